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
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from laketail.api.deps import broker_of, json_response, metrics_of
from laketail.api.encoding import MEDIA_TYPES, EmbeddedFormat, b64encode, encode_json, response_format

router = APIRouter(tags=["v2 fetch (Redpanda)"])


def data_rows(table: pa.Table) -> pa.Table:
    """``table`` without control records (transaction markers)."""
    if "control" in table.column_names and table.num_rows:
        control = table.column("control")
        if control.null_count < table.num_rows:
            return table.filter(pc.is_null(control))
    return table


def timestamps_ms(table: pa.Table) -> list[int]:
    micros = table.column("timestamp").cast(pa.int64())
    return pc.divide(micros, 1000).to_pylist()


def encode_records(topic: str, table: pa.Table, embedded: EmbeddedFormat) -> tuple[list[dict], int]:
    """Rows as Redpanda/Confluent JSON records, plus their key + value byte count."""
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    offsets = table.column("offset").to_pylist()
    partitions = table.column("partition").to_pylist()
    stamps = timestamps_ms(table)
    headers = table.column("headers").to_pylist()
    nbytes = 0
    out = []
    binary = embedded == "binary"
    for key, value, offset, partition, ts, hdrs in zip(keys, values, offsets, partitions, stamps, headers):
        if key:
            nbytes += len(key)
        if value:
            nbytes += len(value)
        out.append({
            "topic": topic,
            "key": b64encode(key) if binary else encode_json(key, offset),
            "value": b64encode(value) if binary else encode_json(value, offset),
            "partition": partition,
            "offset": offset,
            "timestamp": ts,
            "headers": [{"key": h["key"], "value": b64encode(h["value"])} for h in hdrs] if hdrs else [],
        })
    return out, nbytes


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
)
async def fetch_records(
    request: Request,
    topic: str,
    partition: int,
    offset: int = Query(..., description="first offset to return"),
    timeout: int = Query(0, ge=0, description="ms to wait for records when none are there yet"),
    max_bytes: int | None = Query(None, ge=1, description="bound on key + value bytes returned"),
    max_records: int | None = Query(None, ge=1, description="bound on records returned"),
    isolation_level: Literal["read_committed", "read_uncommitted"] = Query("read_committed"),
) -> Response:
    started = perf_counter()
    embedded = response_format(request.headers.get("accept"))
    result = await broker_of(request).fetch(
        topic, partition, offset,
        max_records=max_records, max_bytes=max_bytes, timeout_ms=timeout,
        isolation=isolation_level,
    )
    rows, nbytes = encode_records(topic, data_rows(result.records), embedded)
    metrics_of(request).observe_fetch("v2", topic, len(rows), nbytes, perf_counter() - started)
    return json_response(rows, media_type=MEDIA_TYPES[embedded])
