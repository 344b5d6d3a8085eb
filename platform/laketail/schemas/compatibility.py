"""Schema types and compatibility levels, as Confluent Schema Registry defines them.

:func:`parse` turns ``(schemaType, text, referenced texts)`` into a parsed schema of
its type (AVRO, JSON, PROTOBUF); :func:`check` answers the messages that make a new
schema incompatible with the earlier versions of a subject under a level:

* BACKWARD: the new schema reads data written with the latest version;
* FORWARD: the latest version reads data written with the new schema;
* FULL: both; the ``_TRANSITIVE`` levels check every live version, not just the
  latest; NONE checks nothing.

A schema of another type than the version compared with is incompatible.
"""

from __future__ import annotations

from typing import Literal, Union

from laketail.schemas import avro, json_schema, protobuf
from laketail.schemas.errors import InvalidCompatibilityLevel, InvalidSchema

SchemaType = Literal["AVRO", "JSON", "PROTOBUF"]
SCHEMA_TYPES: tuple[SchemaType, ...] = ("JSON", "PROTOBUF", "AVRO")  # as /schemas/types lists them
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
          "FULL", "FULL_TRANSITIVE", "NONE")
DEFAULT_LEVEL = "BACKWARD"
Parsed = Union[avro.AvroSchema, json_schema.JsonSchema, protobuf.ProtobufSchema]


def schema_type(value: object) -> SchemaType:
    """The registration's ``schemaType`` (absent: AVRO). Raises INVALID_SCHEMA (42201)."""
    if value is None:
        return "AVRO"
    if value not in SCHEMA_TYPES:
        raise InvalidSchema(f"Invalid schema type {value!r}: one of AVRO, JSON, PROTOBUF")
    return value  # type: ignore[return-value]


def level(value: object) -> str:
    """A compatibility level; INVALID_COMPATIBILITY_LEVEL (42203) otherwise."""
    if not isinstance(value, str) or value.upper() not in LEVELS:
        raise InvalidCompatibilityLevel(
            f"Invalid compatibility level. Valid values are none, backward, forward, full, "
            f"backward_transitive, forward_transitive, and full_transitive; got {value!r}")
    return value.upper()


def parse(kind: SchemaType, text: str, references: list[str]) -> Parsed:
    if kind == "AVRO":
        return avro.parse_avro(text, references)
    if kind == "JSON":
        return json_schema.parse_json_schema(text)
    return protobuf.parse_protobuf(text)


def _read_errors(reader: Parsed, writer: Parsed) -> list[str]:
    if isinstance(reader, avro.AvroSchema) and isinstance(writer, avro.AvroSchema):
        return avro.read_errors(reader, writer)
    if isinstance(reader, json_schema.JsonSchema) and isinstance(writer, json_schema.JsonSchema):
        return json_schema.read_errors(reader, writer)
    if isinstance(reader, protobuf.ProtobufSchema) and isinstance(writer, protobuf.ProtobufSchema):
        return protobuf.read_errors(reader, writer)
    return ["TYPE_MISMATCH: the schema type differs from the earlier version's"]


def check(new: Parsed, earlier: list[tuple[int, Parsed]], compatibility: str) -> list[str]:
    """Messages for each (version, schema) in ``earlier`` (oldest first) the new schema
    is incompatible with under ``compatibility``; empty when compatible."""
    if compatibility == "NONE" or not earlier:
        return []
    against = earlier if compatibility.endswith("_TRANSITIVE") else earlier[-1:]
    base = compatibility.removesuffix("_TRANSITIVE")
    out: list[str] = []
    for version, old in against:
        problems = []
        if base in ("BACKWARD", "FULL"):
            problems += _read_errors(new, old)
        if base in ("FORWARD", "FULL"):
            problems += _read_errors(old, new)
        out += [f"{{oldSchemaVersion: {version}, {p}, compatibility: '{compatibility}'}}" for p in problems]
    return out
