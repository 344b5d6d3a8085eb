"""Fetch by offset in Redpanda's shape: ``GET /topics/{t}/partitions/{p}/records``.

``?offset=`` (required) ``&timeout=`` (ms to long-poll when nothing is there yet,
default 0) ``&max_bytes=`` ``&max_records=`` ``&isolation_level=`` (read_committed by
default, as in librdkafka). The answer is a JSON array of
``{topic, key, value, partition, offset, timestamp, headers}``: key and value in the
embedded format the Accept header names (binary: base64; json: the stored JSON
parsed back), ``timestamp`` in Kafka's milliseconds, ``headers`` as
``[{"key": str, "value": base64 | null}]``. Transaction markers (control records)
never appear. An offset outside [log start, high watermark] is OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

from time import perf_counter

from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api import fetch_body
from laketail.api.deps import (
    ISOLATION_PARAM,
    BytesResponse,
    fetch_by_offset,
    openapi_params,
    path_param,
    query_param,
)
from laketail.api.encoding import (
    MEDIA_TYPES,
    response_format,
)
from laketail.records import payload_bytes

router = APIRouter(tags=["v2 fetch (Redpanda)"])


_PARAMS = openapi_params(
    path_param("topic", description="topic name"),
    path_param("partition", "integer", "partition id"),
    query_param("offset", {"type": "integer"}, "first offset to return", required=True),
    query_param("timeout", {"type": "integer", "minimum": 0, "default": 0},
                "ms to wait for records when none are there yet"),
    query_param("max_bytes", {"type": "integer", "minimum": 1}, "bound on the bytes returned"),
    query_param("max_records", {"type": "integer", "minimum": 1}, "bound on the records returned"),
    ISOLATION_PARAM,
)


@router.get(
    "/topics/{topic}/partitions/{partition}/records",
    summary="Fetch records from an offset (long-polls up to timeout ms)",
    responses={200: {"content": {
        MEDIA_TYPES["binary"]: {"example": [{
            "topic": "orders", "key": "azE=", "value": "aGVsbG8=", "partition": 0,
            "offset": 0, "timestamp": 1700000000000, "headers": [],
        }]},
        MEDIA_TYPES["json"]: {},
    }}},
    openapi_extra=_PARAMS,
)
async def fetch_records(request: Request) -> Response:
    started = perf_counter()
    topic = request.path_params["topic"]
    embedded = response_format(request.headers.get("accept"))
    state = request.app.state
    result = await fetch_by_offset(request, topic)
    table = fetch_body.data_rows(result.records)
    cached = result.from_blocks and table is result.records
    body = fetch_body.body(fetch_body.rows(topic, table, embedded, cached))
    nbytes = payload_bytes(table.column("key")) + payload_bytes(table.column("value"))
    state.metrics.observe_fetch("v2", topic, table.num_rows, nbytes, perf_counter() - started)
    return BytesResponse(body, _MEDIA[embedded])


_MEDIA = {fmt: media.encode() for fmt, media in MEDIA_TYPES.items()}
