"""laketail's bulk interface: Arrow IPC streams in and out (``/v1``).

Produce: ``POST /v1/topics/{t}/records`` (or ``/v1/topics/{t}/partitions/{p}/records``)
with ``Content-Type: application/vnd.apache.arrow.stream`` and a stream whose columns
are a subset of ``PRODUCE_SCHEMA`` (``key``, ``value``, ``headers``, ``timestamp`` in
Kafka's ms, ``partition``; ``value`` required; compatible types such as ``string`` or
``large_binary`` are cast). The answer summarises where the records went, per
partition: ``{"offsets": [{partition, base_offset, last_offset, count}]}`` (``null``
with ``acks=0``). When the appends to some partitions of ``/v1/topics/{t}/records``
failed and others succeeded (or a record alone is over ``max.message.bytes``), the
answer is still 200, ``offsets`` summarises the records written, and ``records`` says
per record, in request order, what was written or why not -- v2's ``offsets[i]``
(``{partition, offset, error_code, error}``, :func:`laketail.api.routes.produce.record_offsets`)
-- so a client retries only the records that failed; a request of which nothing was
written is answered by its error, as a whole. The per-partition endpoint also takes laketail's producer parameters
(``producer_id``, ``producer_epoch``, ``sequence``, ``transactional``; see
:func:`laketail.api.deps.producer_of`): a retried batch gets its original offsets.

Fetch: ``GET /v1/topics/{t}/partitions/{p}/records?offset=...`` answers an Arrow IPC
stream of ``RECORD_SCHEMA`` rows (data records only: transaction markers are never
returned, so offsets may have gaps; ``isolation_level``, read_committed by default,
stops at the last stable offset and drops aborted records), with the partition's
offsets in headers: ``X-Laketail-Next-Offset`` (where the next fetch starts),
``X-Laketail-High-Watermark``, ``X-Laketail-Last-Stable-Offset``,
``X-Laketail-Log-Start-Offset``.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.deps import (
    ACKS_PARAM,
    ISOLATION_PARAM,
    PRODUCER_PARAMS,
    BytesResponse,
    acks_of,
    fetch_by_offset,
    json_response,
    openapi_params,
    path_int,
    path_param,
    produce,
    producer_of,
    query_param,
    read_body,
    refuse_producer,
)
from laketail.api.encoding import ARROW_STREAM
from laketail.api.routes.produce import record_offsets
from laketail.broker import PRODUCE_SCHEMA
from laketail.errors import InvalidRecord, InvalidRequest, RecordTooLarge
from laketail.ipc_bounds import IpcTooLarge, decoded_size
from laketail.records import RECORD_SCHEMA, payload_bytes

if TYPE_CHECKING:
    from laketail.broker import ProduceResult

router = APIRouter(tags=["v1 arrow"])


def read_ipc(body: bytes, limit: int) -> pa.Table:
    """The request's Arrow IPC stream as a table (INVALID_REQUEST when it is not one).

    Before anything is decoded, the sizes the stream declares (compressed buffers carry
    their decoded length) are summed and checked against ``limit``
    (``socket.request.max.bytes``): a small ZSTD body that would decode to gigabytes is
    MESSAGE_TOO_LARGE, and pyarrow never allocates it.
    """
    buffer = pa.py_buffer(body)
    try:
        decoded_size(buffer, limit)
        return pa.ipc.open_stream(buffer).read_all()
    except IpcTooLarge as exc:
        raise RecordTooLarge(
            f"the Arrow IPC body {exc}: socket.request.max.bytes applies to the decoded stream"
        ) from None
    except (pa.ArrowInvalid, pa.ArrowIOError, pa.ArrowNotImplementedError, ValueError) as exc:
        raise InvalidRequest(f"body is not an Arrow IPC stream: {exc}") from None


def to_produce_table(table: pa.Table, partition: int | None) -> pa.Table:
    """Columns checked and cast to ``PRODUCE_SCHEMA``; the path's partition applied."""
    known = {f.name: f.type for f in PRODUCE_SCHEMA}
    unknown = [n for n in table.column_names if n not in known]
    if unknown:
        raise InvalidRecord(f"unknown column(s) {unknown}; allowed: {list(known)}")
    repeated = sorted({n for n in table.column_names if table.column_names.count(n) > 1})
    if repeated:
        raise InvalidRecord(f"column(s) {repeated} appear more than once")
    if "value" not in table.column_names:
        raise InvalidRecord("the stream needs a 'value' column")
    if table.num_rows == 0:
        raise InvalidRequest("a produce request needs at least one record")
    columns, names = [], []
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_dictionary(column.type) or pa.types.is_run_end_encoded(column.type):
            # casting either expands it: a small body could decode to any size
            raise InvalidRecord(f"column '{name}' of type {column.type}: send plain (not "
                                "dictionary or run-end encoded) arrays")
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


def summarise(result: ProduceResult) -> list[dict]:
    """Per partition: first and last offset assigned and how many records. Records that
    all went to one partition are summarised from ``result.dense``, without a list of
    their offsets."""
    if result.dense is not None:
        partition, base = result.dense
        return [{"partition": partition, "base_offset": base, "last_offset": base + result.count - 1,
                 "count": result.count}]
    spans: dict[int, list[int]] = {}
    for p, o in zip(result.partitions, result.offsets):
        if o < 0:  # not written (its error is in the per-record answer)
            continue
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


_RECORD_SCHEMA_MESSAGE = RECORD_SCHEMA.serialize().to_pybytes()
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # continuation marker, zero-length metadata


def write_ipc(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream: the schema message, one record batch message
    per chunk, the end-of-stream marker; the bytes pyarrow's stream writer writes (a
    test pins them). For ``RECORD_SCHEMA`` (every fetch) the schema message is
    serialised once per process and the stream is one join of the messages."""
    if table.schema != RECORD_SCHEMA:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()
    return b"".join([_RECORD_SCHEMA_MESSAGE, *[batch.serialize() for batch in table.to_batches()], _END_OF_STREAM])


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


async def _produce_arrow(request: Request, topic: str, partition: int | None) -> Response:
    started = perf_counter()
    acks = acks_of(request)
    if partition is None:
        refuse_producer(request)
        producer = None
    else:
        producer = producer_of(request)
    state = request.app.state
    broker = state.broker
    limit = state.settings.socket_request_max_bytes
    table = to_produce_table(read_ipc(await read_body(request), limit), partition)
    await broker.topic_for_produce(topic)  # auto.create.topics.enable, once the body is good
    # Across partitions, some appends may fail while others are written: answered per
    # record then. One partition is answered as a whole (its clients retry the batch).
    result = await produce(request, topic, table, acks, producer, per_record_errors=partition is None)
    nbytes = payload_bytes(table.column("value"))
    if "key" in table.column_names:
        nbytes += payload_bytes(table.column("key"))
    state.metrics.observe_produce("v1", topic, table.num_rows, nbytes, perf_counter() - started)
    if result is None:
        return json_response({"offsets": None})
    if result.errors is None:
        return json_response({"offsets": summarise(result)})
    return json_response({"offsets": summarise(result), "records": record_offsets(result)})


_TOPIC = path_param("topic", description="topic name")
_PARTITION = path_param("partition", "integer", "partition id")


@router.post("/v1/topics/{topic}/records", summary="Produce an Arrow IPC stream",
             openapi_extra={**_PRODUCE_OPENAPI, **openapi_params(_TOPIC, ACKS_PARAM)})
async def produce_arrow(request: Request) -> Response:
    return await _produce_arrow(request, request.path_params["topic"], None)


@router.post("/v1/topics/{topic}/partitions/{partition}/records",
             summary="Produce an Arrow IPC stream to one partition (idempotently or in a transaction "
             "with the producer parameters)",
             openapi_extra={**_PRODUCE_OPENAPI, **openapi_params(_TOPIC, _PARTITION, ACKS_PARAM, *PRODUCER_PARAMS)})
async def produce_arrow_partition(request: Request) -> Response:
    return await _produce_arrow(request, request.path_params["topic"], path_int(request, "partition"))


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/records",
    summary="Fetch records as an Arrow IPC stream (RECORD_SCHEMA)",
    responses={200: {"content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}}}},
    openapi_extra=openapi_params(
        _TOPIC, _PARTITION,
        query_param("offset", {"type": "integer"}, "first offset to return", required=True),
        query_param("max_records", {"type": "integer", "minimum": 1}, "bound on the records returned"),
        query_param("max_bytes", {"type": "integer", "minimum": 1}, "bound on the bytes returned"),
        query_param("timeout", {"type": "integer", "minimum": 0, "default": 0},
                    "ms to wait for records when none are there yet"),
        ISOLATION_PARAM,
    ),
)
async def fetch_arrow(request: Request) -> Response:
    started = perf_counter()
    topic = request.path_params["topic"]
    state = request.app.state
    result = await fetch_by_offset(request, topic)
    table = result.records
    if table.schema != RECORD_SCHEMA:
        table = table.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)
    body = write_ipc(table)
    nbytes = payload_bytes(table.column("value")) + payload_bytes(table.column("key"))
    state.metrics.observe_fetch("v1", topic, table.num_rows, nbytes, perf_counter() - started)
    return BytesResponse(body, _ARROW_MEDIA, [
        (b"x-laketail-next-offset", b"%d" % result.next_offset),
        (b"x-laketail-high-watermark", b"%d" % result.high_watermark),
        (b"x-laketail-last-stable-offset", b"%d" % result.last_stable_offset),
        (b"x-laketail-log-start-offset", b"%d" % result.log_start_offset),
    ])


_ARROW_MEDIA = ARROW_STREAM.encode()
