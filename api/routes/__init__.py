"""The gateway's routes, one module per resource; :data:`ROUTERS` in mounting order.

The produce and fetch routes come first: routing tries routes in order, so the hot
paths match after the fewest attempts.
"""

from laketail.api.routes import (
    arrow,
    check,
    clusters,
    consumers,
    fetch,
    groups_v1,
    internal,
    offsets,
    produce,
    schema_registry,
    topics,
    transactions_v1,
    v3_acls,
    v3_groups,
    v3_records,
    v3_replicas,
    v3_topics,
)

ROUTERS = [
    produce.router,
    fetch.router,
    topics.router,
    clusters.router,
    v3_topics.router,
    v3_records.router,
    arrow.router,
    offsets.router,
    consumers.router,
    groups_v1.router,
    transactions_v1.router,
    v3_groups.router,
    check.router,
    v3_replicas.router,
    v3_acls.router,
    internal.router,
    schema_registry.router,  # Confluent Schema Registry (laketail.schemas)
]

__all__ = ["ROUTERS"]
