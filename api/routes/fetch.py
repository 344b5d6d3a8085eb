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

import binascii
from time import perf_counter

import orjson
import pyarrow as pa
import pyarrow.compute as pc
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
    EmbeddedFormat,
    b64encode,
    encode_json,
    response_format,
)
from laketail.api.fetch_body import rows_for
from laketail.records import payload_bytes

_b2a = binascii.b2a_base64

router = APIRouter(tags=["v2 fetch (Redpanda)"])


def data_rows(table: pa.Table) -> pa.Table:
    """``table`` without control records (transaction markers)."""
    i = table.schema.get_field_index("control")
    if i >= 0 and table.num_rows:
        control = table.column(i)
        if control.null_count < table.num_rows:
            return table.filter(pc.is_null(control))
    return table


def timestamps_ms(table: pa.Table) -> list[int]:
    """The ``timestamp`` column (microseconds) as Kafka's milliseconds."""
    return (table.column("timestamp").cast(pa.int64()).to_numpy() // 1000).tolist()


def _column(table: pa.Table, name: str) -> list | None:
    """A column as Python values, ``None`` when every value is null (skipped cheaply)."""
    column = table.column(name)
    return None if column.null_count == len(column) else column.to_pylist()


def _b64_column(values: list | None, n: int) -> list:
    if values is None:
        return [None] * n
    return [None if v is None else _b2a(v, newline=False).decode("ascii") for v in values]


def _json_column(values: list | None, n: int, offsets: list[int]) -> list:
    if values is None:
        return [None] * n
    return [encode_json(v, o) for v, o in zip(values, offsets)]


def encode_records(topic: str, table: pa.Table, embedded: EmbeddedFormat) -> tuple[list[dict], int]:
    """Rows of one partition as Redpanda/Confluent JSON records, plus their key + value
    byte count. Column at a time: all-null columns and dense offsets cost nothing."""
    n = table.num_rows
    if n == 0:
        return [], 0
    offset_column = table.column("offset")
    first, last = offset_column[0].as_py(), offset_column[-1].as_py()
    offsets = list(range(first, last + 1)) if last - first == n - 1 else offset_column.to_pylist()
    partition = table.column("partition")[0].as_py()
    keys = _column(table, "key")
    values = _column(table, "value")
    nbytes = (sum(map(len, filter(None, keys))) if keys else 0) + (
        sum(map(len, filter(None, values))) if values else 0
    )
    if embedded == "binary":
        key_out, value_out = _b64_column(keys, n), _b64_column(values, n)
    else:
        key_out, value_out = _json_column(keys, n, offsets), _json_column(values, n, offsets)
    headers = _column(table, "headers")
    header_out = [[]] * n if headers is None else [
        [{"key": h["key"], "value": b64encode(h["value"])} for h in hs] if hs else [] for hs in headers
    ]
    return [
        {"topic": topic, "key": k, "value": v, "partition": partition, "offset": o,
         "timestamp": ts, "headers": h}
        for k, v, o, ts, h in zip(key_out, value_out, offsets, timestamps_ms(table), header_out)
    ], nbytes


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
    table = data_rows(result.records)
    parts = rows_for(topic, table, embedded, cached=result.from_blocks and table is result.records)
    if parts is None:  # records with headers
        body = orjson.dumps(encode_records(topic, table, embedded)[0])
    else:
        body = fetch_body.body(parts)
    nbytes = payload_bytes(table.column("key")) + payload_bytes(table.column("value"))
    state.metrics.observe_fetch("v2", topic, table.num_rows, nbytes, perf_counter() - started)
    return BytesResponse(body, _MEDIA[embedded])


_MEDIA = {fmt: media.encode() for fmt, media in MEDIA_TYPES.items()}
