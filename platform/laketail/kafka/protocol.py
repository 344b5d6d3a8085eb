"""Kafka's request and response frames, decoded and encoded with kio.

A frame on the wire is ``size int32`` then ``size`` bytes: a request header (v1, or v2
with tagged fields for a flexible version) and the request body; an answer is ``size``,
a response header (v0, or v1 for a flexible version; ApiVersions always v0) and the
body. kio (generated from Kafka's own message JSON) reads and writes every version's
header and body; this module decides which versions laketail serves and what a frame
that does not parse means:

* :class:`CloseConnection` -- a frame Kafka's broker would drop the connection for: an
  unknown API key, a version outside :data:`SUPPORTED` (except ApiVersions), bytes that
  do not parse as the header or body (bytes left after the body are ignored, as
  Kafka's broker ignores them);
* an ApiVersions request of a version newer than laketail's is answered
  UNSUPPORTED_VERSION in v0 layout with the supported ranges (KIP-511), so the client
  retries with a version both sides know.

:data:`SUPPORTED` is the whole list ApiVersions answers: an API not in it is never
served. The maximum versions are the newest whose fields laketail fills honestly
(Fetch stops at v12: v13 names topics by id; Produce at v10, KIP-951's leader hints:
v11 and v12 belong to KIP-890's transactions, not served).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
from dataclasses import dataclass
from typing import Any, Mapping

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.serial.errors import SerialError
from kio.static.primitive import i32Timedelta, i64Timedelta

#: api key -> (name, min version, max version): every API laketail's Kafka listener serves.
SUPPORTED: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 10),  # v10: KIP-951's leader hints (laketail.kafka.leadership)
    1: ("Fetch", 4, 16),  # v13+: topics by id (KIP-516); v16: KIP-951's node_endpoints
    2: ("ListOffsets", 1, 7),
    3: ("Metadata", 0, 12),
    8: ("OffsetCommit", 2, 8),
    9: ("OffsetFetch", 1, 7),
    10: ("FindCoordinator", 0, 3),
    11: ("JoinGroup", 0, 7),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 4),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 4),
    17: ("SaslHandshake", 0, 1),  # v0: raw tokens follow (laketail.kafka.sasl)
    18: ("ApiVersions", 0, 3),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 5),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetForLeaderEpoch", 2, 4),  # laketail.kafka.epochs
    # transactions (laketail.kafka.txn): the client's versions, before KIP-890's
    24: ("AddPartitionsToTxn", 0, 3),
    25: ("AddOffsetsToTxn", 0, 3),
    26: ("EndTxn", 0, 3),
    28: ("TxnOffsetCommit", 0, 3),
    # admin: configs, groups, the cluster, ACLs (laketail.kafka.admin)
    29: ("DescribeAcls", 1, 3),
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    47: ("OffsetDelete", 0, 0),
    60: ("DescribeCluster", 0, 1),
    # transaction admin (laketail.kafka.txn_admin, KIP-664)
    61: ("DescribeProducers", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 1),
}
API_VERSIONS = 18
_KEY_VERSION = struct.Struct(">hh")
_SIZE = struct.Struct(">i")


class CloseConnection(Exception):
    """The frame cannot be answered: the connection is closed (the reason is logged)."""


@dataclass(frozen=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    #: the response class for this version (kio)
    response_type: type
    #: the frame as received (without its size prefix): what a request process passes
    #: to the sibling that answers it (:mod:`laketail.kafka.siblings`)
    frame: bytes = b""


def decode_request(frame: bytes) -> Request:
    """One request frame (without its size prefix) -> :class:`Request`, or
    :class:`CloseConnection`. An ApiVersions request of an unknown version decodes
    with ``body=None`` (its body is in a layout laketail may not know)."""
    if len(frame) < 8:
        raise CloseConnection(f"a request frame of {len(frame)} bytes has no header")
    api_key, version = _KEY_VERSION.unpack_from(frame)
    if api_key not in SUPPORTED:
        raise CloseConnection(f"API key {api_key} is not served here")
    name, low, high = SUPPORTED[api_key]
    if api_key == API_VERSIONS and not low <= version <= high:
        # KIP-511: answer in v0 layout; only the correlation id of the header is read
        (correlation_id,) = struct.unpack_from(">i", frame, 4)
        return Request(api_key, version, correlation_id, None, None, load_response_schema(API_VERSIONS, 0))
    if not low <= version <= high:
        raise CloseConnection(f"{name} v{version} is outside the served v{low}-v{high}")
    try:
        request_type = load_request_schema(api_key, version)
        response_type = load_response_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity) as exc:  # pragma: no cover - SUPPORTED lists kio's versions
        raise CloseConnection(str(exc)) from exc
    try:
        header, used = entity_reader(request_type.__header_schema__)(frame, 0)
        body, _ = entity_reader(request_type)(frame, used)
    except (SerialError, ValueError, TypeError, OverflowError, UnicodeDecodeError, IndexError, KeyError) as exc:
        # kio's reader on untrusted bytes: an unknown tag, a length past the end, bad
        # UTF-8 (the fuzz test in tests/kafka/test_protocol.py found KeyError too)
        raise CloseConnection(f"{name} v{version} does not parse: {exc}") from exc
    # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka's
    # Metadata v12 for all topics carries three (tests/kafka_listener/test_protocol.py).
    return Request(api_key, version, header.correlation_id, header.client_id, body, response_type, frame)


def encode_response(request: Request, body: Any) -> bytes:
    """The answer's frame, size prefix included."""
    header_type = type(body).__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_type)(buf, header_type(correlation_id=request.correlation_id))
    entity_writer(type(body))(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """An instance of kio's ``cls`` (one version of a message) from ``data``, a plain
    dict with the fields of any version: fields ``cls`` lacks are ignored, fields it
    has and ``data`` lacks take their schema default. Error codes are ints, durations
    milliseconds; nested entities are dicts (or lists of dicts)."""
    values = {}
    for name, how, type_, missing in _fields(cls):
        if name not in data:
            if missing is not _SCHEMA_DEFAULT:
                values[name] = missing
            continue
        raw = data[name]
        if how == _ENTITIES:
            values[name] = None if raw is None else tuple(build(type_, item) for item in raw)
        elif how == _ENTITY:
            values[name] = None if raw is None else build(type_, raw)
        elif how == _ERROR_CODE:
            values[name] = ErrorCode(raw)
        elif how == _DURATION:
            values[name] = type_.parse(datetime.timedelta(milliseconds=raw))
        elif how == _ARRAY:
            values[name] = tuple(raw)
        else:
            values[name] = raw
    return cls(**values)


_PLAIN, _ENTITIES, _ENTITY, _ERROR_CODE, _DURATION, _ARRAY = range(6)
#: a field ``build`` leaves to its dataclass default
_SCHEMA_DEFAULT = object()


@functools.lru_cache(maxsize=None)  # one entry per kio class: a bounded set
def _fields(cls: type) -> tuple[tuple[str, int, Any, Any], ...]:
    """How :func:`build` fills each field of ``cls``: (name, how, type, value when
    ``data`` lacks it), worked out once per class: kio's ``classify_field`` cost more
    than the rest of an answer's building. The implicit values are immutable."""
    out = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            how = _ENTITIES
        elif isinstance(kind, EntityField):
            how = _ENTITY
        elif kind.type_ is ErrorCode:
            how = _ERROR_CODE
        elif kind.type_ in (i32Timedelta, i64Timedelta):
            how = _DURATION
        elif kind.is_array:
            how = _ARRAY
        else:
            how = _PLAIN
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        out.append((f.name, how, kind.type_, _SCHEMA_DEFAULT if has_default else _implicit(f)))
    return tuple(out)


def _implicit(f: dataclasses.Field) -> Any:
    kind = classify_field(f)
    if kind.is_array:
        return ()
    if kind.type_ is ErrorCode:
        return ErrorCode.none
    if kind.type_ in (i32Timedelta, i64Timedelta):
        return kind.type_.parse(datetime.timedelta(0))
    if isinstance(kind, EntityField):
        return None
    kafka_type = f.metadata.get("kafka_type")
    if kafka_type == "uuid":
        return None  # written as the zero UUID (Kafka's "no id")
    if kafka_type == "string":
        return ""
    if kafka_type == "bytes" or kafka_type == "records":
        return b""
    if kafka_type == "bool":
        return False
    return 0


def ms(value: Any) -> int:
    """A kio duration (timedelta) or int as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)
