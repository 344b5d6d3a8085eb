"""What Spark's driver asks a gateway before it reads a topic: ``GET /v1/topics/{t}/table``.

The answer locates the topic's Delta table and gives every partition's offsets in one
round trip, so planning a scan of a many-partition topic costs one request::

    {"topic": "orders", "uri": "/data/topics/orders", "version": 17,
     "partitions": [{"partition": 0, "log_start_offset": 0, "high_watermark": 120,
                     "last_stable_offset": 120, "tiered_offset": 100}, ...]}

``uri`` is absolute (a local data root is resolved against the broker's working
directory), so executors on the same file system or object store open the files
directly. ``version`` is the table version the broker last read or committed; readers
take the file list from the Delta log themselves (:mod:`laketail.spark.snapshot`).
"""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.deps import broker_of, json_response

router = APIRouter(tags=["v1 spark"])

_EXAMPLE = {
    "topic": "orders",
    "uri": "/var/lib/laketail/topics/orders",
    "version": 17,
    "partitions": [{
        "partition": 0, "log_start_offset": 0, "high_watermark": 120,
        "last_stable_offset": 120, "tiered_offset": 100,
    }],
}


def absolute_uri(uri: str) -> str:
    """A local path made absolute; a URI with a scheme (``s3://``, ``file://``) as is."""
    return uri if "://" in uri else os.path.abspath(uri)


@router.get(
    "/v1/topics/{topic}/table",
    summary="The topic's Delta table (absolute URI, version) and every partition's offsets",
    responses={200: {"content": {"application/json": {"example": _EXAMPLE}}}},
)
async def table(request: Request, topic: str) -> Response:
    broker = broker_of(request)
    info = broker.topic(topic)  # UNKNOWN_TOPIC_OR_PARTITION first
    states = [await broker.partition_state_async(topic, p) for p in range(info.partitions)]
    uri, version = await broker.table_version(topic)
    return json_response({
        "topic": topic,
        "uri": absolute_uri(uri),
        "version": version,
        "partitions": [
            {
                "partition": s.partition,
                "log_start_offset": s.log_start_offset,
                "high_watermark": s.high_watermark,
                "last_stable_offset": s.last_stable_offset,
                "tiered_offset": s.tiered_offset,
            }
            for s in states
        ],
    })
