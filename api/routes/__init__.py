"""The gateway's routes, one module per resource; :data:`ROUTERS` in mounting order."""

from laketail.api.routes import arrow, clusters, fetch, offsets, produce, topics, v3_records, v3_topics

ROUTERS = [
    topics.router,
    produce.router,
    fetch.router,
    clusters.router,
    v3_topics.router,
    v3_records.router,
    arrow.router,
    offsets.router,
]

__all__ = ["ROUTERS"]
