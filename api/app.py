"""The gateway's FastAPI application, built once per broker process by :func:`create_app`.

The app owns its broker: the lifespan starts it (opening the catalog, recovering the
partition logs, starting the tierer) and, at shutdown, waits for acks=0 appends still
in flight and closes it. Routes live in :mod:`laketail.api.routes`, one module per
resource; errors are translated in one place (:mod:`laketail.api.errors`); metrics
are at ``GET /metrics``; the OpenAPI UIs at ``/docs`` and ``/redoc`` need no internet
(:mod:`laketail.api.docs_pages`), nor does the web console at ``/console``
(:mod:`laketail.api.console`); ``--access-log`` logs every request
(:mod:`laketail.api.access_log`).

Authorization (on when ``authorizer.class.name`` is set) is one middleware outside
everything but the access log (:mod:`laketail.api.authz`, its table in
:mod:`laketail.api.acl_rules`).

State on ``app.state``: ``settings``, ``broker``, ``authorizer``, ``metrics``, ``pending`` (the
tasks of acks=0 appends, kept referenced until they end) and ``consumers`` (the v2
consumer instances, destroyed at shutdown).
"""

from __future__ import annotations

import asyncio
import inspect
import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from starlette.responses import Response

from laketail import __version__
from laketail.api import console, docs_pages, errors
from laketail.api.access_log import AccessLog
from laketail.api.authz import Authorization
from laketail.api.consumer_instances import ConsumerInstances
from laketail.api.coordinator_proxy import CoordinatorProxy
from laketail.api.hot_routes import HotRoutes
from laketail.api.metrics import CONTENT_TYPE_LATEST, GatewayMetrics
from laketail.api.routes import ROUTERS, spark_v1
from laketail.api.services import Services
from laketail.broker import Broker
from laketail.config import BrokerSettings
from laketail.security.authorizer import Authorizer

DESCRIPTION = """\
laketail is a streaming platform with Kafka's semantics whose topics are Delta Lake tables.

* **Confluent REST Proxy v2**: topics, partitions, offsets, brokers, produce
  (`application/vnd.kafka.binary.v2+json`, `application/vnd.kafka.json.v2+json`).
* **Redpanda fetch**: `GET /topics/{t}/partitions/{p}/records?offset=`.
* **Confluent v3**: clusters, topic admin and configs, produce with headers (streaming mode too).
* **Confluent v2 consumer instances** (`/consumers/{group}`) and **v3 consumer groups and
  lag** (`/v3/clusters/{id}/consumer-groups`), with laketail's time lag.
* **laketail /v1**: Arrow IPC produce and fetch, offsets by timestamp, the group protocol,
  and what no REST proxy offered: idempotent and transactional produce (`/v1/producers`,
  `producer_id`/`producer_epoch`/`sequence`/`transactional` on the per-partition produce
  endpoints), transactions (`/v1/transactions/{transactional_id}/...`) and batch
  transactions for Spark's sink (`/v1/sinks/{sink_id}/batches/{batch_id}/...`).
* **Isolation**: every read (fetch, /v1 Arrow fetch, v2 consumer instances, end offsets)
  defaults to read_committed: it stops at the last stable offset and never returns
  aborted records; transaction markers are never returned as records.

Every produce endpoint takes `acks` (0, 1, all); producing to a missing topic creates it
(`auto.create.topics.enable`, default true). Errors are
`{"error_code": <Confluent code>, "message": "<Kafka error name>: ..."}` (the
"Error codes" table of docs/rest-api.md lists every code).
"""


def create_app(settings: BrokerSettings, broker: Broker | None = None, *, access_log: bool = False) -> FastAPI:
    """The gateway for one broker; ``broker`` defaults to ``Broker(settings)``.

    The lifespan starts and closes the broker either way, so pass one that has not
    been started. ``access_log`` logs every request on ``laketail.access``.
    """
    broker = broker if broker is not None else Broker(settings)
    authorizer = Authorizer.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await broker.start()
        refresher = None
        if authorizer.enabled:
            await authorizer.start()
            refresher = asyncio.create_task(authorizer.run_refresher(), name="laketail-acl-refresh")
        try:
            yield
        finally:
            if refresher is not None:
                refresher.cancel()
                await asyncio.gather(refresher, return_exceptions=True)
            await app.state.consumers.close()  # v2 consumer instances leave their groups
            pending = list(app.state.pending)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            await broker.close()

    app = FastAPI(
        title="laketail",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # docs_pages serves both UIs from packaged assets
        redoc_url=None,
        **fastapi_telemetry(),
    )
    app.state.settings = settings
    app.state.broker = broker
    app.state.services = services = Services.of(broker)
    app.state.authorizer = authorizer
    app.state.metrics = GatewayMetrics(broker, services)
    app.state.pending = set()
    app.state.consumers = ConsumerInstances(broker, services, settings.consumer_instance_timeout_ms)
    app.add_middleware(HotRoutes, fastapi_app=app)  # innermost: produce and fetch skip FastAPI's routing
    errors.install(app, settings.socket_request_max_bytes)
    app.add_middleware(CoordinatorProxy, broker=broker, cluster=services.cluster)
    if authorizer.enabled:  # outside the proxy and the hot routes: every request is checked first
        app.add_middleware(Authorization, fastapi_app=app, authorizer=authorizer)
    if access_log:
        app.add_middleware(AccessLog)  # outermost: sees every answer, proxied ones too
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(spark_v1.router)  # table locations for Spark's driver
    docs_pages.install(app)
    console.install(app)  # the web console at /console and its /v1/console endpoints

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    async def metrics(request: Request) -> Response:
        return Response(await request.app.state.metrics.render_async(), media_type=CONTENT_TYPE_LATEST)

    return app


def fastapi_telemetry() -> dict[str, Any]:
    """FastAPI's own OpenTelemetry instrumentation (FastAPI 0.16x) is off unless the
    process asks for it with FastAPI's switch, ``FASTAPI_OTEL_AUTO_CONFIGURE=true``.
    laketail reports through ``/metrics``; left on, the instrumentation looks up
    whether a tracer, meter and logger provider is configured on every request (three
    provider lookups with environment reads: 3.2 us, against 0.08 us with it off)."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}  # a FastAPI without it
    if os.getenv("FASTAPI_OTEL_AUTO_CONFIGURE", "").lower() == "true":
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
