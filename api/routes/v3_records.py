"""Confluent v3 produce: ``POST /v3/clusters/{cluster_id}/topics/{t}[/partitions/{p}]/records``.

A record is ``{partition_id?, headers?: [{name, value(base64)}], key?: {type, data},
value?: {type, data}, timestamp?}`` with types BINARY / JSON / STRING (no type means
BINARY) and the timestamp as ISO-8601 or Kafka milliseconds. Its delivery report is
``{error_code: 200, cluster_id, topic_name, partition_id, offset, timestamp (ISO-8601),
key: {type, size} | null, value: {type, size} | null}``.

Three ways to send, as in Confluent:

* one JSON object: one report; an error answers with its own HTTP status and body;
* several concatenated JSON objects (or a JSON array) in one body: HTTP 200 and one
  report per record, in order, concatenated (one per line). A record that cannot be
  produced gets ``{"error_code", "message"}`` in its place and the others still go;
* streaming mode (``Transfer-Encoding: chunked``): records are parsed as they arrive
  and reports stream back while the request is still open, HTTP 200 throughout.

Unknown cluster or topic refuses the whole request (404) before anything is read.
The body bound applies per record in streaming mode, to the whole body otherwise.
Records that arrive together are produced with one ``broker.produce`` call.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from time import perf_counter
from typing import Any, AsyncIterator

import orjson
from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from laketail.api.deps import (
    ACKS_QUERY,
    MAX_JSON_DEPTH,
    Records,
    broker_of,
    check_cluster,
    check_json_depth,
    json_response,
    metrics_of,
    parse_acks,
    produce,
    read_body,
    record_error,
)
from laketail.api.embedded_schemas import V3Data, v3_data
from laketail.api.encoding import WIDE_INTEGER_DIGITS, decode_headers, decode_typed, iso_ms, parse_timestamp
from laketail.api.errors import STREAMED_BODY
from laketail.bounds import int32
from laketail.errors import InvalidRecord, InvalidRequest, LaketailError, RecordTooLarge
from laketail.produce_path import RECORD_SIZE_OVERHEAD
from laketail.records import Acks

router = APIRouter(tags=["v3 produce"])

_decoder = json.JSONDecoder()
_space = re.compile(r"[ \t\n\r]*")


@dataclass(slots=True)
class V3Record:
    key: bytes | None
    value: bytes | None
    key_type: str | None
    value_type: str | None
    headers: list[tuple[str, bytes | None]] | None
    partition: int | None
    timestamp: int | None
    key_schema: V3Data | None = None
    value_schema: V3Data | None = None

    def size(self) -> int:
        size = (len(self.key) if self.key else 0) + (len(self.value) if self.value else 0)
        for hk, hv in self.headers or ():
            size += len(hk.encode("utf-8")) + (len(hv) if hv else 0)
        return size


def prepare(doc: Any, fixed_partition: int | None,
            schemas: tuple[V3Data | None, V3Data | None] = (None, None)) -> V3Record:
    """One v3 record object, decoded (its key and value already encoded when
    ``schemas`` holds them: :func:`laketail.api.embedded_schemas.v3_data`); raises
    INVALID_RECORD."""
    if type(doc) is not dict:
        raise InvalidRequest("a record must be a JSON object")
    check_json_depth(doc, "the record")
    partition = doc.get("partition_id")
    if fixed_partition is not None:
        partition = fixed_partition
    elif partition is not None:
        int32(partition, "partition_id", InvalidRecord)
    key_schema, value_schema = schemas
    key, key_type = (key_schema.data, key_schema.v3_type) if key_schema else decode_typed(doc.get("key"), "key")
    value, value_type = ((value_schema.data, value_schema.v3_type) if value_schema
                         else decode_typed(doc.get("value"), "value"))
    return V3Record(
        key=key,
        value=value,
        key_type=key_type,
        value_type=value_type,
        key_schema=key_schema,
        value_schema=value_schema,
        headers=decode_headers(doc.get("headers"), "name", "headers"),
        partition=partition,
        timestamp=parse_timestamp(doc.get("timestamp"), "timestamp"),
    )


def error_report(err: LaketailError) -> dict:
    return err.to_body(v3=True)


def _data(kind: str | None, data: bytes | None, schema: V3Data | None = None) -> dict | None:
    if schema is not None:
        return schema.report()
    return None if kind is None else {"type": kind, "size": len(data) if data else 0}


async def produce_many(
    request: Request, cluster_id: str, topic: str, items: list[Any], acks: Acks,
    fixed_partition: int | None, *, raise_single: bool = False,
) -> list[dict]:
    """Decode, check and produce ``items``; one report (or error report) per item, in order.

    With ``raise_single`` (a one-record request) errors are raised instead of reported.
    """
    started = perf_counter()
    broker = broker_of(request)
    slots: list[V3Record | LaketailError] = []
    for doc in items:
        try:
            schemas: tuple[V3Data | None, V3Data | None] = (None, None)
            if type(doc) is dict and (type(doc.get("key")) is dict or type(doc.get("value")) is dict):
                schemas = (await v3_data(request, topic, doc.get("key"), True),
                           await v3_data(request, topic, doc.get("value"), False))
            slots.append(prepare(doc, fixed_partition, schemas))
        except LaketailError as err:
            if raise_single:
                raise
            slots.append(err)
    try:
        info = broker.topic(topic)
        limit = broker.topic_config(topic).max_message_bytes
    except LaketailError as err:  # the topic went away mid-stream
        if raise_single:
            raise
        return [error_report(err) for _ in slots]
    for i, slot in enumerate(slots):
        if isinstance(slot, V3Record):
            refused = record_error(topic, info.partitions, limit, slot.size() + RECORD_SIZE_OVERHEAD, slot.partition, i)
            if refused is not None:
                if raise_single:
                    raise refused
                slots[i] = refused
    valid = [s for s in slots if isinstance(s, V3Record)]
    if not valid:
        return [error_report(s) for s in slots]  # type: ignore[arg-type]
    records = Records(
        values=[r.value for r in valid],
        keys=[r.key for r in valid] if any(r.key is not None for r in valid) else None,
        headers=[r.headers for r in valid] if any(r.headers for r in valid) else None,
        partitions=[r.partition for r in valid] if any(r.partition is not None for r in valid) else None,
        timestamps=[r.timestamp for r in valid] if any(r.timestamp is not None for r in valid) else None,
    )
    try:
        result = await produce(request, topic, records, acks, per_record_errors=True)
    except LaketailError as err:
        if raise_single:
            raise
        return [error_report(s if isinstance(s, LaketailError) else err) for s in slots]
    metrics_of(request).observe_produce(
        "v3", topic, len(valid), records.payload_bytes(), perf_counter() - started
    )
    reports = []
    j = 0
    for slot in slots:
        if isinstance(slot, LaketailError):
            reports.append(error_report(slot))
            continue
        failed = result.errors[j] if result is not None and result.errors else None
        if failed is not None:  # its partition's append failed, others' succeeded
            if raise_single:
                raise failed
            reports.append(error_report(failed))
            j += 1
            continue
        reports.append({
            "error_code": 200,
            "cluster_id": cluster_id,
            "topic_name": topic,
            "partition_id": result.partitions[j] if result else slot.partition,
            "offset": result.offsets[j] if result else None,
            "timestamp": iso_ms(result.timestamps_ms[j]) if result else (
                iso_ms(slot.timestamp) if slot.timestamp is not None else None
            ),
            "key": _data(slot.key_type, slot.key, slot.key_schema),
            "value": _data(slot.value_type, slot.value, slot.value_schema),
        })
        j += 1
    return reports


def split_json(text: str, pos: int = 0) -> tuple[list[Any], int, json.JSONDecodeError | None]:
    """Concatenated JSON values from ``text[pos:]``: (values, where parsing stopped, error)."""
    docs: list[Any] = []
    n = len(text)
    while True:
        pos = _space.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= n:
            return docs, pos, None
        try:
            doc, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            return docs, pos, exc
        except RecursionError:  # far deeper than MAX_JSON_DEPTH
            return docs, pos, json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels", text, pos)
        docs.append(doc)


def _concatenated(reports: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in reports)


class DuplexResponse(StreamingResponse):
    """A streaming response that may be sent while the request body is still arriving.

    Starlette's StreamingResponse reads ``receive`` to notice disconnects, which would
    steal the request body the generator is consuming; here the generator itself sees
    the disconnect (``ClientDisconnect`` from ``request.stream()``).
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.stream_response(send)
        except OSError:
            raise ClientDisconnect() from None


def _is_chunked(request: Request) -> bool:
    return "content-length" not in request.headers and "chunked" in request.headers.get(
        "transfer-encoding", ""
    ).lower()


async def _stream_reports(
    request: Request, cluster_id: str, topic: str, acks: Acks, fixed: int | None
) -> AsyncIterator[bytes]:
    limit = request.app.state.settings.socket_request_max_bytes
    utf8 = codecs.getincrementaldecoder("utf-8")()
    buf = ""
    error: LaketailError | None = None
    try:
        async for chunk in request.stream():
            try:
                text = utf8.decode(chunk)
            except UnicodeDecodeError:
                error = InvalidRequest("request body is not UTF-8")
                break
            buf += text
            if "}" not in text and "]" not in text and len(buf) <= limit:
                continue  # no value can have ended in this chunk
            docs, pos, exc = split_json(buf)
            buf = buf[pos:]
            if docs:
                yield _concatenated(await produce_many(request, cluster_id, topic, docs, acks, fixed))
            if len(buf) > limit:
                error = RecordTooLarge(
                    f"no complete record within socket.request.max.bytes={limit}"
                    + (f" ({exc})" if exc is not None else "")
                )
                break
        else:
            docs, pos, exc = split_json(buf)
            if docs:
                yield _concatenated(await produce_many(request, cluster_id, topic, docs, acks, fixed))
            if exc is not None:
                error = InvalidRequest(f"request body is not valid JSON: {exc}")
    except ClientDisconnect:
        return
    if error is not None:
        metrics_of(request).count_error(error)
        yield _concatenated([error_report(error)])


def _whole_json(body: bytes) -> Any:
    """The body as one JSON value: orjson's, or the standard library's (whose integers
    are exact) when a run of 19 digits may be an integer orjson would read as a float."""
    if WIDE_INTEGER_DIGITS.search(body) is None:
        return orjson.loads(body)
    try:
        return json.loads(body)
    except RecursionError:  # read record by record below, where the depth is refused
        raise ValueError("nested too deeply") from None


async def _produce_v3(
    request: Request, cluster_id: str, topic: str, partition: int | None, acks_raw: str
) -> Response:
    acks = parse_acks(acks_raw)
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    await broker.topic_for_produce(topic)  # auto.create.topics.enable
    if partition is not None:
        broker.partition_state(topic, partition)
    if _is_chunked(request):
        request.scope[STREAMED_BODY] = True  # bounded per record below, not in total
        return DuplexResponse(
            _stream_reports(request, cluster_id, topic, acks, partition),
            media_type="application/json",
        )
    body = await read_body(request)
    try:
        parsed = _whole_json(body)
    except ValueError:  # not one JSON value (or not UTF-8): concatenated records, or an error
        parsed = None
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("request body is not UTF-8") from None
        docs, _, exc = split_json(text)
        if not docs:
            raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    else:
        if type(parsed) is dict:
            reports = await produce_many(
                request, cluster_id, topic, [parsed], acks, partition, raise_single=True
            )
            return json_response(reports[0])
        if type(parsed) is not list or not parsed:
            raise InvalidRequest("the body must be a record object, several concatenated, or a list")
        docs, exc = parsed, None
    reports = await produce_many(request, cluster_id, topic, docs, acks, partition)
    if exc is not None:
        err = InvalidRequest(f"request body is not valid JSON: {exc}")
        metrics_of(request).count_error(err)
        reports.append(error_report(err))
    return Response(_concatenated(reports), media_type="application/json")


_RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        "partition_id": {"type": "integer"},
        "headers": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "value": {"type": "string", "format": "byte"},
        }}},
        "key": {"type": "object", "properties": {
            "type": {"type": "string", "enum": ["BINARY", "JSON", "STRING"]}, "data": {},
        }},
        "value": {"type": "object", "properties": {
            "type": {"type": "string", "enum": ["BINARY", "JSON", "STRING"]}, "data": {},
        }},
        "timestamp": {"type": "string", "format": "date-time"},
    },
}

_OPENAPI = {
    "requestBody": {
        "required": True,
        "description": "one record, or several concatenated (streaming mode with chunked encoding)",
        "content": {"application/json": {"schema": _RECORD_SCHEMA, "example": {
            "key": {"type": "STRING", "data": "k1"},
            "value": {"type": "JSON", "data": {"amount": 3}},
            "headers": [{"name": "source", "value": "YXBp"}],
        }}},
    },
    "responses": {"200": {"description": "delivery report(s)", "content": {"application/json": {
        "example": {
            "error_code": 200, "cluster_id": "lt-abc", "topic_name": "orders", "partition_id": 0,
            "offset": 7, "timestamp": "2024-01-01T00:00:00.000Z",
            "key": {"type": "STRING", "size": 2}, "value": {"type": "JSON", "size": 12},
        }
    }}}},
}


@router.post(
    "/v3/clusters/{cluster_id}/topics/{topic}/records",
    summary="Produce records with headers and timestamps (streaming mode supported)",
    openapi_extra=_OPENAPI,
)
async def produce_records(
    request: Request, cluster_id: str, topic: str, acks: str = ACKS_QUERY
) -> Response:
    return await _produce_v3(request, cluster_id, topic, None, acks)


@router.post(
    "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/records",
    summary="Produce records to one partition",
    openapi_extra=_OPENAPI,
)
async def produce_partition_records(
    request: Request, cluster_id: str, topic: str, partition: int, acks: str = ACKS_QUERY
) -> Response:
    return await _produce_v3(request, cluster_id, topic, partition, acks)
