"""Embedded formats: how record keys, values and headers travel inside JSON bodies.

Confluent's REST Proxy calls the format of the data carried inside a JSON request or
response its *embedded format*. laketail speaks:

* v2 ``binary`` (``application/vnd.kafka.binary.v2+json``): bytes as base64 strings;
* v2 ``json`` (``application/vnd.kafka.json.v2+json``): any JSON value, stored as its
  UTF-8 JSON text; JSON ``null`` is a null key / a null value (tombstone);
* v3 ``{"type": "BINARY" | "JSON" | "STRING", "data": ...}``: base64, JSON, UTF-8 text.
  No ``type`` means ``BINARY``, as in Confluent's v3 produce; ``AVRO``, ``JSONSCHEMA``
  and ``PROTOBUF`` (with ``schema``, ``schema_id``, ``schema_version``, ``subject``) are
  encoded by :mod:`laketail.api.embedded_schemas` before :func:`decode_typed`.

v2 content types follow Confluent's grammar and negotiation rule:
``application/vnd.kafka[.embedded_format][.api_version]+json`` (api_version v1 or v2,
or none); the less specific ``application/vnd.kafka.v2+json``,
``application/vnd.kafka+json``, ``application/json`` and ``application/octet-stream``
are accepted, and whenever the embedded format is omitted it is ``binary``. Avro,
Protobuf and JSON Schema (``avro``, ``protobuf``, ``jsonschema``) are produced and
consumed through the broker's schema registry (:mod:`laketail.api.embedded_schemas`,
:func:`schema_format_of`); any other ``application/vnd.kafka`` type is refused with 415.
The v2 GET routes answer an Accept that allows no JSON answer with 406 (:func:`check_accept`).

Header values are always base64 (v3's rule, and laketail's for fetch responses).

Decoding is strict and total: a request is decoded completely before anything is
written, and a value that does not decode is INVALID_RECORD (422/42205).
"""

from __future__ import annotations

import binascii
import re
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np
import orjson
import pyarrow as pa
import pybase64
from starlette.requests import Request

from laketail.bounds import timestamp_ms
from laketail.errors import InvalidRecord, NotAcceptable, UnsupportedMediaType

EmbeddedFormat = Literal["binary", "json"]

V2_JSON = "application/vnd.kafka.v2+json"
V2_BINARY = "application/vnd.kafka.binary.v2+json"
V2_EMBEDDED_JSON = "application/vnd.kafka.json.v2+json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"

MEDIA_TYPES: dict[EmbeddedFormat, str] = {"binary": V2_BINARY, "json": V2_EMBEDDED_JSON}

_SCHEMA_FORMATS = ("avro", "protobuf", "jsonschema")

_a2b = binascii.a2b_base64
_b2a = binascii.b2a_base64
_dumps = orjson.dumps


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


#: Confluent's content type grammar, ``application/vnd.kafka[.embedded_format]
#: [.api_version]+json`` (its API reference, "Content Types"): the serialization format
#: is json; the API versions Confluent's proxy has served are v1 and v2; omitting the
#: version means the latest. Anything else under ``application/vnd.kafka`` is no v2
#: type (``application/vnd.kafka.binary.v1+foo``, ``...avro.v0+json``, ``...json+avro``).
_KAFKA_TYPE = re.compile(
    r"application/vnd\.kafka(?:\.(binary|json|avro|protobuf|jsonschema))?(?:\.(v1|v2))?\+json"
)
_GENERIC_REQUEST = ("", V2_JSON, "application/vnd.kafka+json", "application/json", "application/octet-stream")
_GENERIC_ACCEPT = ("*/*", "application/*", "*/json", "application/json")


def format_of(media_type: str) -> EmbeddedFormat | None:
    """The embedded format a Kafka media type names, ``None`` if it names none.

    ``application/vnd.kafka.<fmt>[.v1|.v2]+json`` -> ``fmt``. Raises UnsupportedMediaType
    for schema-registry formats and for a ``application/vnd.kafka...`` type outside the
    grammar (:data:`_KAFKA_TYPE`).
    """
    if not media_type.startswith("application/vnd.kafka"):
        return None
    match = _KAFKA_TYPE.fullmatch(media_type)
    if match is None:
        raise UnsupportedMediaType(
            f"'{media_type}' is not a Kafka REST content type: application/vnd.kafka"
            "[.binary|.json][.v2]+json"
        )
    fmt = match.group(1)
    if fmt in _SCHEMA_FORMATS:
        raise UnsupportedMediaType(
            f"embedded format '{fmt}' needs a schema registry; laketail takes binary or json"
        )
    return fmt  # type: ignore[return-value]


def schema_format_of(content_type: str | None) -> str | None:
    """The schema'd embedded format (``avro``, ``jsonschema``, ``protobuf``) a v2
    Content-Type names, else None (:mod:`laketail.api.embedded_schemas` serves them)."""
    match = _KAFKA_TYPE.fullmatch(_media_type(content_type))
    fmt = match.group(1) if match is not None else None
    return fmt if fmt in _SCHEMA_FORMATS else None


def request_format(content_type: str | None) -> EmbeddedFormat:
    """The embedded format of a v2 produce body from its Content-Type. Whenever the type
    names no embedded format (``application/json``, ``application/vnd.kafka.v2+json``,
    ``application/octet-stream``, none) it is ``binary``, as Confluent's API reference
    says ("if the embedded format is omitted, binary is assumed")."""
    media = _media_type(content_type)
    fmt = format_of(media)
    if fmt is not None:
        return fmt
    if media in _GENERIC_REQUEST or _KAFKA_TYPE.fullmatch(media):
        return "binary"
    raise UnsupportedMediaType(
        f"content type '{media}' is not a v2 produce type; use {V2_BINARY} or {V2_EMBEDDED_JSON}"
    )


def acceptable(media: str) -> bool:
    """Whether one Accept entry allows a v2 JSON answer: ``*/*``, ``application/*``,
    ``*/json``, ``application/json`` or a Kafka type of the grammar (the peer suite's
    valid and invalid Accept values: ``application/octet-stream``, ``foo/*``,
    ``bar/json``, ``*/baz``, ``application/vnd.kafka+foo`` are refused)."""
    return media in _GENERIC_ACCEPT or _KAFKA_TYPE.fullmatch(media) is not None


def check_accept(accept: str | None) -> None:
    """NOT_ACCEPTABLE (406) unless some Accept entry allows a v2 JSON answer, as Confluent's
    proxy (Jersey) refuses an Accept none of a resource's ``@Produces`` types match."""
    if not accept or not accept.strip():
        return
    if any(acceptable(_media_type(part)) for part in accept.split(",")):
        return
    raise NotAcceptable(f"cannot answer in '{accept}'; accept {V2_JSON} or application/json")


def v2_accept(request: Request) -> None:
    """Router dependency of the v2 routes: :func:`check_accept` on every GET."""
    if request.method == "GET":
        check_accept(request.headers.get("accept"))


def response_format(accept: str | None) -> EmbeddedFormat:
    """The embedded format a fetch should answer in, from its Accept header.

    The first acceptable entry that names a format wins; generic JSON or ``*/*``
    (or no Accept at all) means binary. Anything else is NOT_ACCEPTABLE (406).
    """
    if not accept:
        return "binary"
    generic = False
    for part in accept.split(","):
        media = _media_type(part)
        try:
            fmt = format_of(media)
        except UnsupportedMediaType:
            continue
        if fmt is not None:
            return fmt
        if acceptable(media):
            generic = True
    if generic:
        return "binary"
    raise NotAcceptable(
        f"cannot answer in '{accept}'; accept {V2_BINARY} or {V2_EMBEDDED_JSON}"
    )


def accepts_arrow(accept: str | None) -> bool:
    return accept is not None and ARROW_STREAM in accept.lower()


# -- decoding (request -> bytes) -----------------------------------------------------


def b64decode(text: Any, what: str) -> bytes:
    """Strict standard base64 (padding optional, as in Java's decoder) -> bytes."""
    if type(text) is not str:
        raise InvalidRecord(f"{what} must be a base64 string or null, got {type(text).__name__}")
    try:
        return _a2b(text, strict_mode=True)
    except (binascii.Error, ValueError):
        pass
    missing = -len(text) % 4
    if missing and missing < 3:
        try:
            return _a2b(text + "=" * missing, strict_mode=True)
        except (binascii.Error, ValueError):
            pass
    raise InvalidRecord(f"{what} is not valid base64")


_EQUALS, _A = ord("="), ord("A")
_b64 = pybase64.b64decode

#: From this many texts :func:`b64_column` decodes them joined, in one call; below it,
#: one call each costs less than the numpy work around the joined call (136-character
#: texts here: 37 against 50 us for 100, 94 against 82 for 300, 305 against 197 for 1000).
ONE_CALL_FROM = 256


def b64_column(texts: list[bytes]) -> pa.BinaryArray | None:
    """Padded base64 texts decoded into one binary column, or ``None`` when any is not
    what ``a2b_base64(text, strict_mode=True)`` accepts (the caller then decodes them
    one by one and names the bad one). Texts that decode accepts beyond canonical
    padding (CPython 3.11 takes ``AAAA=``) also give ``None``, and so take that path.

    pybase64 decodes with SIMD and validates as strictly; its per-call cost (about
    0.2 us) is what is left, so many texts are joined and decoded by one call
    (:func:`b64_joined`)."""
    if len(texts) >= ONE_CALL_FROM:
        return b64_joined(texts)
    try:
        return pa.array([_b64(t, None, True) for t in texts], pa.binary())
    except (binascii.Error, ValueError):
        return None


def b64_joined(texts: list[bytes]) -> pa.BinaryArray | None:
    """:func:`b64_column` by one pybase64 call over the joined texts. Only the last one
    or two characters of each text may be ``=``: those are decoded as ``A`` and the bytes
    they gave dropped afterwards. Any other ``=``, or any character outside the
    alphabet, fails the validation."""
    n = len(texts)
    lens = np.array(list(map(len, texts)), np.int64)
    if (lens & 3).any():
        return None
    joined = bytearray().join(texts)
    chars = np.frombuffer(joined, np.uint8)
    nonempty = lens > 0
    ends = np.cumsum(lens)[nonempty]
    last = chars[ends - 1] == _EQUALS
    second = last & (chars[ends - 2] == _EQUALS)
    chars[ends[last] - 1] = _A
    chars[ends[second] - 2] = _A
    try:
        decoded = _b64(joined, None, True)
    except (binascii.Error, ValueError):
        return None
    full = (lens >> 2) * 3  # bytes each text gave, its padding's included
    sizes = full.copy()
    sizes[nonempty] -= last.astype(np.int64) + second
    if not last.any():
        data = decoded
    elif (full == full[0]).all() and (sizes == sizes[0]).all():  # values of one size: a strided copy
        data = np.frombuffer(decoded, np.uint8).reshape(n, int(full[0]))[:, : int(sizes[0])].tobytes()
    else:
        keep = np.ones(len(decoded), bool)
        out_ends = np.cumsum(full)[nonempty]
        keep[out_ends[last] - 1] = False
        keep[out_ends[second] - 2] = False
        data = np.frombuffer(decoded, np.uint8)[keep].tobytes()
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def decode_binary(data: Any, what: str) -> bytes | None:
    """A v2 ``binary`` key or value (base64 string or null)."""
    if data is None:
        return None
    return b64decode(data, what)


#: A body with no run of 19 digits holds no integer past int64 / uint64, the integers
#: orjson reads exactly (past them it reads a float, and would change the record).
WIDE_INTEGER_DIGITS = re.compile(rb"[0-9]{19}")


def json_text(data: Any, what: str) -> bytes:
    """``data`` as JSON text; INVALID_RECORD for an integer orjson cannot write (one past
    64 bits, read exactly by the standard library's parser)."""
    try:
        return _dumps(data)
    except TypeError:
        raise InvalidRecord(
            f"{what} holds an integer outside int64 and uint64: it would not be stored exactly"
        ) from None


def decode_json(data: Any) -> bytes | None:
    """A v2 ``json`` key or value: its JSON text, ``None`` for JSON null."""
    if data is None:
        return None
    return json_text(data, "a json record")


def decode_typed(doc: Any, what: str) -> tuple[bytes | None, str | None]:
    """A v3 ``{"type", "data"}`` object -> (bytes or None, the type used or None)."""
    if doc is None:
        return None, None
    if type(doc) is not dict:
        raise InvalidRecord(f"{what} must be an object with 'type' and 'data'")
    kind = doc.get("type")
    kind = "BINARY" if kind is None else str(kind).upper()
    data = doc.get("data")
    if kind == "BINARY":
        return (None if data is None else b64decode(data, what + ".data")), kind
    if kind == "JSON":
        return (None if data is None else json_text(data, what + ".data")), kind
    if kind == "STRING":
        if data is None:
            return None, kind
        if type(data) is not str:
            raise InvalidRecord(f"{what}.data must be a string for type STRING")
        return data.encode("utf-8"), kind
    raise InvalidRecord(f"{what}.type must be BINARY, JSON, STRING, AVRO, JSONSCHEMA or PROTOBUF, got {kind!r}")


def decode_headers(items: Any, name_field: str, what: str) -> list[tuple[str, bytes | None]] | None:
    """``[{name|key, value(base64)}]`` -> list of (key, bytes) pairs; ``None`` when absent."""
    if items is None:
        return None
    if type(items) is not list:
        raise InvalidRecord(f"{what} must be a list of {{{name_field}, value}} objects")
    out = []
    for i, item in enumerate(items):
        if type(item) is not dict or type(item.get(name_field)) is not str:
            raise InvalidRecord(f"{what}[{i}] needs a string '{name_field}'")
        value = item.get("value")
        out.append((item[name_field], None if value is None else b64decode(value, f"{what}[{i}].value")))
    return out


def parse_timestamp(value: Any, what: str) -> int | None:
    """Kafka milliseconds from an int (ms) or an ISO-8601 string; ``None`` when absent.
    Outside ``[0, MAX_TIMESTAMP_MS]`` it is INVALID_TIMESTAMP (:mod:`laketail.bounds`)."""
    if value is None:
        return None
    if type(value) is int:
        return timestamp_ms(value, what)
    if type(value) is str:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidRecord(f"{what} is not an ISO-8601 timestamp: {value!r}") from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return timestamp_ms(int(moment.timestamp() * 1000), what)
    raise InvalidRecord(f"{what} must be milliseconds or an ISO-8601 string")


# -- encoding (bytes -> response) -----------------------------------------------------


def b64encode(data: bytes | None) -> str | None:
    if data is None:
        return None
    return _b2a(data, newline=False).decode("ascii")


class NotJson(ValueError):
    """Stored bytes that are not JSON (the caller names the record)."""


def encode_json(data: bytes | None, offset: int) -> Any:
    """Bytes stored from JSON back to a JSON value (:class:`NotJson` when they are not)."""
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise NotJson(f"record at offset {offset} is not JSON") from exc


def iso_ms(timestamp_ms: int) -> str:
    """Kafka milliseconds as Confluent v3 writes them: ``2021-02-05T19:14:42.524Z``."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000.0, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
