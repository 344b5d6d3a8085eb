"""laketail's bulk interface: Arrow IPC streams in and out (``/v1``).

Produce: ``POST /v1/topics/{t}/records`` (or ``/v1/topics/{t}/partitions/{p}/records``)
with ``Content-Type: application/vnd.apache.arrow.stream`` and a stream whose columns
are a subset of ``PRODUCE_SCHEMA`` (``key``, ``value``, ``headers``, ``timestamp`` in
Kafka's ms, ``partition``; ``value`` required; compatible types such as ``string`` or
``large_binary`` are cast). The answer summarises where the records went, per
partition: ``{"offsets": [{partition, base_offset, last_offset, count}]}`` (``null``
with ``acks=0``).

Fetch: ``GET /v1/topics/{t}/partitions/{p}/records?offset=...`` answers an Arrow IPC
stream of ``RECORD_SCHEMA`` rows as stored (control records included: a client sees
transaction markers exactly as the log holds them), with the partition's offsets in
headers: ``X-Laketail-Next-Offset`` (where the next fetch starts),
``X-Laketail-High-Watermark``, ``X-Laketail-Last-Stable-Offset``,
``X-Laketail-Log-Start-Offset``.
"""

from __future__ import annotations

from time import perf_counter
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from laketail.api.deps import ACKS_QUERY, broker_of, json_response, metrics_of, parse_acks
from laketail.api.deps import produce, read_body
from laketail.api.encoding import ARROW_STREAM
from laketail.broker import PRODUCE_SCHEMA
from laketail.errors import InvalidRecord, InvalidRequest, RecordTooLarge, UnknownTopicOrPartition
from laketail.records import RECORD_SCHEMA

router = APIRouter(tags=["v1 arrow"])


def read_ipc(body: bytes) -> pa.Table:
    """The request's Arrow IPC stream as a table (INVALID_REQUEST when it is not one)."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError, pa.ArrowNotImplementedError, ValueError) as exc:
        raise InvalidRequest(f"body is not an Arrow IPC stream: {exc}") from None


def to_produce_table(table: pa.Table, partition: int | None) -> pa.Table:
    """Columns checked and cast to ``PRODUCE_SCHEMA``; the path's partition applied."""
    known = {f.name: f.type for f in PRODUCE_SCHEMA}
    unknown = [n for n in table.column_names if n not in known]
    if unknown:
        raise InvalidRecord(f"unknown column(s) {unknown}; allowed: {list(known)}")
    if "value" not in table.column_names:
        raise InvalidRecord("the stream needs a 'value' column")
    if table.num_rows == 0:
        raise InvalidRequest("a produce request needs at least one record")
    columns, names = [], []
    for name in table.column_names:
        column = table.column(name)
        if column.type != known[name]:
            try:
                column = column.cast(known[name])
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidRecord(
                    f"column '{name}' of type {column.type} cannot be {known[name]}: {exc}"
                ) from None
        columns.append(column)
        names.append(name)
    if partition is not None:
        if "partition" in names:
            given = table.column("partition")
            if given.null_count < len(given) and pc.any(pc.not_equal(given, partition)).as_py():
                raise InvalidRecord(f"the 'partition' column disagrees with the path's {partition}")
            i = names.index("partition")
            columns.pop(i)
            names.pop(i)
        columns.append(pa.repeat(pa.scalar(partition, pa.int32()), table.num_rows))
        names.append("partition")
    return pa.Table.from_arrays(columns, names=names).combine_chunks()


def _lengths(array) -> pa.Array:
    return pc.fill_null(pc.binary_length(array), 0).cast(pa.int64())


def check_table(broker, topic: str, table: pa.Table) -> None:
    """What ``broker.produce`` would refuse, checked before an acks=0 answer."""
    info = broker.topic(topic)
    limit = broker.topic_config(topic).max_message_bytes
    names = table.column_names
    if "partition" in names:
        parts = table.column("partition")
        bad = pc.or_(pc.less(parts, 0), pc.greater_equal(parts, info.partitions))
        if pc.any(bad).as_py():
            raise UnknownTopicOrPartition.partition(topic, pc.filter(parts, bad)[0].as_py())
    sizes = _lengths(table.column("value"))
    if "key" in names:
        sizes = pc.add(sizes, _lengths(table.column("key")))
    if "headers" in names:
        headers = table.column("headers").combine_chunks()
        flat = pc.list_flatten(headers)
        if len(flat):
            per = pc.add(_lengths(flat.field("key")), _lengths(flat.field("value")))
            totals = [0] * len(headers)
            for parent, size in zip(pc.list_parent_indices(headers).to_pylist(), per.to_pylist()):
                totals[parent] += size
            sizes = pc.add(sizes, pa.array(totals, pa.int64()))
    biggest = pc.max(sizes).as_py() or 0
    if biggest > limit:
        raise RecordTooLarge(f"a record is {biggest} bytes, above max.message.bytes={limit}")


def summarise(partitions: list[int], offsets: list[int]) -> list[dict]:
    """Per partition: first and last offset assigned and how many records."""
    spans: dict[int, list[int]] = {}
    for p, o in zip(partitions, offsets):
        span = spans.get(p)
        if span is None:
            spans[p] = [o, o, 1]
        else:
            span[0] = min(span[0], o)
            span[1] = max(span[1], o)
            span[2] += 1
    return [
        {"partition": p, "base_offset": s[0], "last_offset": s[1], "count": s[2]}
        for p, s in sorted(spans.items())
    ]


def write_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


_PRODUCE_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {ARROW_STREAM: {"schema": {
            "type": "string", "format": "binary",
            "description": "Arrow IPC stream with columns key, value (required), headers, "
            "timestamp (int64 ms), partition (int32)",
        }}},
    },
    "responses": {"200": {"content": {"application/json": {"example": {
        "offsets": [{"partition": 0, "base_offset": 100, "last_offset": 199, "count": 100}]
    }}}}},
}


async def _produce_arrow(request: Request, topic: str, partition: int | None, acks_raw: str) -> Response:
    started = perf_counter()
    acks = parse_acks(acks_raw)
    broker = broker_of(request)
    broker.topic(topic)
    table = to_produce_table(read_ipc(await read_body(request)), partition)
    if acks == "0":
        check_table(broker, topic, table)
    result = await produce(request, topic, table, acks)
    nbytes = pc.sum(_lengths(table.column("value"))).as_py() or 0
    if "key" in table.column_names:
        nbytes += pc.sum(_lengths(table.column("key"))).as_py() or 0
    metrics_of(request).observe_produce("v1", topic, table.num_rows, nbytes, perf_counter() - started)
    offsets = None if result is None else summarise(result.partitions, result.offsets)
    return json_response({"offsets": offsets})


@router.post("/v1/topics/{topic}/records", summary="Produce an Arrow IPC stream",
             openapi_extra=_PRODUCE_OPENAPI)
async def produce_arrow(request: Request, topic: str, acks: str = ACKS_QUERY) -> Response:
    return await _produce_arrow(request, topic, None, acks)


@router.post("/v1/topics/{topic}/partitions/{partition}/records",
             summary="Produce an Arrow IPC stream to one partition", openapi_extra=_PRODUCE_OPENAPI)
async def produce_arrow_partition(
    request: Request, topic: str, partition: int, acks: str = ACKS_QUERY
) -> Response:
    return await _produce_arrow(request, topic, partition, acks)


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/records",
    summary="Fetch records as an Arrow IPC stream (RECORD_SCHEMA)",
    responses={200: {"content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}}}},
)
async def fetch_arrow(
    request: Request,
    topic: str,
    partition: int,
    offset: int = Query(..., description="first offset to return"),
    max_records: int | None = Query(None, ge=1),
    max_bytes: int | None = Query(None, ge=1),
    timeout: int = Query(0, ge=0, description="ms to wait for records when none are there yet"),
    isolation_level: Literal["read_committed", "read_uncommitted"] = Query("read_committed"),
) -> Response:
    started = perf_counter()
    result = await broker_of(request).fetch(
        topic, partition, offset, max_records=max_records, max_bytes=max_bytes,
        timeout_ms=timeout, isolation=isolation_level,
    )
    table = result.records
    if table.schema != RECORD_SCHEMA:
        table = table.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)
    body = write_ipc(table)
    nbytes = 0
    if table.num_rows:
        nbytes = (pc.sum(_lengths(table.column("value"))).as_py() or 0) + (
            pc.sum(_lengths(table.column("key"))).as_py() or 0
        )
    metrics_of(request).observe_fetch("v1", topic, table.num_rows, nbytes, perf_counter() - started)
    return Response(body, media_type=ARROW_STREAM, headers={
        "X-Laketail-Next-Offset": str(result.next_offset),
        "X-Laketail-High-Watermark": str(result.high_watermark),
        "X-Laketail-Last-Stable-Offset": str(result.last_stable_offset),
        "X-Laketail-Log-Start-Offset": str(result.log_start_offset),
    })

