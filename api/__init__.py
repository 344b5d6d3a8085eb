"""laketail's HTTP gateway: Confluent REST Proxy v2/v3, Redpanda fetch and laketail's /v1.

``create_app(settings)`` builds the FastAPI app for one broker process; its lifespan
starts and closes the :class:`~laketail.broker.Broker`.
"""

from laketail.api.app import create_app

__all__ = ["create_app"]
