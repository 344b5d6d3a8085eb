"""Confluent's wire format, and the codecs between JSON documents and schema'd bytes.

A record written with a registered schema (by Confluent's serializers, by the REST
Proxy's ``avro``/``jsonschema``/``protobuf`` embedded formats, by laketail's)::

    byte 0       magic byte, 0
    bytes 1-4    the schema id, a big-endian signed int32 (the registry's global id)
    [protobuf]   the message indexes: the path from the file's top-level messages to
                 the record's message, as zigzag varints, the count first; the common
                 path [0] (the first message) is the single byte 0
    rest         the payload: Avro binary encoding (no container header), the UTF-8
                 JSON text (JSON Schema), or the Protobuf message's bytes

:func:`codec` answers one :class:`Codec` per schema (cached: an id's schema never
changes); its ``encode`` takes the JSON a REST body carries -- Avro's JSON encoding
(a union's branch as ``{"type": value}``, bytes as code points), a JSON Schema
document, Protobuf's JSON mapping -- and ``decode`` answers the same JSON back.
A document the schema does not take is :class:`~laketail.schemas.errors.JsonConversion`
(422 42203); bytes the schema cannot read are :class:`NotDecodable`.
"""

from __future__ import annotations

import functools
import io
import struct
from typing import Any

import fastavro
import jsonschema
import orjson
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError, EncodeError

from laketail.schemas import protobuf_descriptor
from laketail.schemas.errors import JsonConversion

MAGIC = 0
_HEADER = struct.Struct(">bi")


class NotDecodable(ValueError):
    """Bytes that are not in the wire format, or that the writer's schema cannot read."""


def frame(schema_id: int, payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, schema_id) + payload


def schema_id_of(data: bytes) -> int:
    """The schema id of framed bytes; :class:`NotDecodable` when there is no magic byte."""
    if len(data) < _HEADER.size or data[0] != MAGIC:
        raise NotDecodable("no magic byte 0 and schema id: not Confluent's wire format")
    return int(_HEADER.unpack_from(data)[1])


class Codec:
    """JSON documents to and from one schema's payloads (see the module docstring)."""

    def encode(self, doc: Any) -> bytes:
        raise NotImplementedError

    def decode(self, payload: bytes) -> Any:
        raise NotImplementedError

    def check(self, payload: bytes) -> None:
        """:class:`NotDecodable` unless the payload reads as the schema's data (broker-side
        validation: Avro reads to its last byte, JSON parses, Protobuf parses)."""
        self.decode(payload)


class AvroCodec(Codec):
    def __init__(self, parsed: Any) -> None:
        self.parsed = parsed

    def encode(self, doc: Any) -> bytes:
        try:
            # Avro's JSON encoding, as Avro's JsonDecoder (and so Confluent's proxy) reads it
            datum = next(iter(fastavro.json_reader(io.StringIO(orjson.dumps(doc).decode()), self.parsed)))
            out = io.BytesIO()
            fastavro.schemaless_writer(out, self.parsed, datum, strict_allow_default=True)
        except Exception as exc:  # fastavro raises ValueError, TypeError, KeyError, AttributeError, ...
            raise JsonConversion(f"{type(exc).__name__}: {exc}") from exc
        return out.getvalue()

    def decode(self, payload: bytes) -> Any:
        try:
            datum = fastavro.schemaless_reader(io.BytesIO(payload), self.parsed, None)
            out = io.StringIO()
            fastavro.json_writer(out, self.parsed, [datum])
        except Exception as exc:
            raise NotDecodable(f"not Avro of its schema: {type(exc).__name__}: {exc}") from exc
        return orjson.loads(out.getvalue())

    def check(self, payload: bytes) -> None:
        buffer = io.BytesIO(payload)
        try:
            fastavro.schemaless_reader(buffer, self.parsed, None)
        except Exception as exc:
            raise NotDecodable(f"not Avro of its schema: {type(exc).__name__}: {exc}") from exc
        if buffer.tell() != len(payload):
            raise NotDecodable(f"{len(payload) - buffer.tell()} bytes after the Avro datum")


class JsonSchemaCodec(Codec):
    def __init__(self, doc: Any) -> None:
        cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft202012Validator)
        self.validator = cls(doc)

    def encode(self, doc: Any) -> bytes:
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(doc))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            raise JsonConversion(f"#/{where}: {error.message}")
        return orjson.dumps(doc)

    def decode(self, payload: bytes) -> Any:
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise NotDecodable(f"not JSON: {exc}") from exc


class ProtobufCodec(Codec):
    """Encodes into the file's first message (index path [0]), as Confluent's proxy does;
    decodes the message the indexes name."""

    def __init__(self, messages: list[Descriptor]) -> None:
        self.messages = messages

    def encode(self, doc: Any) -> bytes:
        cls = message_factory.GetMessageClass(self.messages[0])
        try:
            message = json_format.ParseDict(doc, cls())
            return b"\x00" + message.SerializeToString()
        except (json_format.ParseError, EncodeError, TypeError, ValueError, AttributeError) as exc:
            raise JsonConversion(str(exc)) from exc

    def decode(self, payload: bytes) -> Any:
        indexes, at = read_indexes(payload)
        nested = self.messages
        descriptor = None
        for i in indexes:
            if not 0 <= i < len(nested):
                raise NotDecodable(f"message index {i} is not in the schema")
            descriptor = nested[i]
            nested = list(descriptor.nested_types)
        assert descriptor is not None
        try:
            message = message_factory.GetMessageClass(descriptor).FromString(payload[at:])
        except DecodeError as exc:
            raise NotDecodable(f"not a {descriptor.full_name}: {exc}") from exc
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def read_indexes(data: bytes) -> tuple[list[int], int]:
    count, at = _zigzag(data, 0)
    if count == 0:
        return [0], at
    if not 0 < count <= 100:
        raise NotDecodable(f"{count} message indexes")
    out = []
    for _ in range(count):
        value, at = _zigzag(data, at)
        out.append(value)
    return out, at


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if at >= len(data) or shift > 63:
            raise NotDecodable("truncated message indexes")
        b = data[at]
        at += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), at


@functools.lru_cache(maxsize=256)
def codec(schema_type: str, text: str, references: tuple[str, ...] = ()) -> Codec:
    """The codec of a schema (its type as the registry names it, its canonical text and
    the texts of its references, in dependency order). Raises the registry's
    INVALID_SCHEMA when the text is not a schema of its type."""
    from laketail.schemas import avro, json_schema

    if schema_type == "AVRO":
        return AvroCodec(avro.parse_avro(text, list(references)).parsed)
    if schema_type == "JSON":
        return JsonSchemaCodec(json_schema.parse_json_schema(text).doc)
    return ProtobufCodec(protobuf_descriptor.messages(text, list(references)))
