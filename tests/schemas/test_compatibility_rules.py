"""The compatibility rules as pure functions: Avro's schema resolution (promotions,
unions, defaults, recursive types), the JSON Schema cases and the Protobuf cases, and the
seven levels' choice of direction and versions."""

from __future__ import annotations

import json

import pytest

from laketail.schemas import compatibility as compat
from laketail.schemas.avro import parse_avro, read_errors
from laketail.schemas.errors import InvalidCompatibilityLevel, InvalidSchema
from laketail.schemas.json_schema import parse_json_schema
from laketail.schemas.protobuf import parse_protobuf


def avro(doc: object) -> compat.Parsed:
    return parse_avro(json.dumps(doc))


def record(*fields: dict, name: str = "R") -> dict:
    return {"type": "record", "name": name, "fields": list(fields)}


@pytest.mark.parametrize(("reader", "writer", "ok"), [
    ("long", "int", True), ("double", "float", True), ("int", "long", False),
    ("bytes", "string", True), ("string", "bytes", True), ("boolean", "int", False),
    (["null", "string"], "string", True), ("string", ["null", "string"], False),
    (["null", "long"], ["null", "int"], True),
    ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
    ({"type": "map", "values": "int"}, {"type": "map", "values": "string"}, False),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, False),
    ({"type": "int", "logicalType": "date"}, "int", True),
])
def test_avro_resolution(reader: object, writer: object, ok: bool) -> None:
    assert (read_errors(avro(reader), avro(writer)) == []) is ok


def test_avro_records_defaults_aliases_and_recursion() -> None:
    old = record({"name": "a", "type": "int"})
    assert read_errors(avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1})),
                       avro(old)) == []
    missing = read_errors(avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int"})), avro(old))
    assert missing and "READER_FIELD_MISSING_DEFAULT_VALUE" in missing[0]
    assert read_errors(avro(record({"name": "z", "type": "int", "aliases": ["a"]})), avro(old)) == []
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"], "default": None}]}
    wider = {"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"], "default": None}]}
    assert read_errors(avro(wider), avro(node)) == []
    assert read_errors(avro(node), avro(wider))  # long back to int, found through the recursion


def test_levels_pick_direction_and_versions() -> None:
    v1 = avro(record({"name": "a", "type": "int"}))
    v2 = avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}))
    new = avro(record({"name": "b", "type": "int", "default": 0}))  # drops a: old readers lack its default
    assert compat.check(new, [(1, v1), (2, v2)], "BACKWARD") == []
    assert compat.check(new, [(1, v1), (2, v2)], "FORWARD")
    assert compat.check(new, [(1, v1), (2, v2)], "NONE") == []
    required = avro(record({"name": "a", "type": "int"}, {"name": "c", "type": "int"}))
    assert compat.check(required, [(1, v1)], "BACKWARD")
    assert compat.check(required, [(1, v1)], "FORWARD") == []
    assert compat.check(required, [(1, v1)], "FULL")
    # transitive levels look past the latest version
    b_required = avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int"}))
    assert compat.check(b_required, [(1, v1), (2, v2)], "BACKWARD") == []  # v2 wrote b
    assert compat.check(b_required, [(1, v1), (2, v2)], "BACKWARD_TRANSITIVE")  # v1 did not
    assert compat.check(parse_json_schema("{}"), [(1, v1)], "BACKWARD")  # another type
    with pytest.raises(InvalidCompatibilityLevel):
        compat.level("SOMETIMES")


def js(doc: object) -> compat.Parsed:
    return parse_json_schema(json.dumps(doc))


def test_json_schema_cases() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    open_ = {"type": "object", "properties": {"a": {"type": "integer"}}}
    errs = compat.json_schema.read_errors
    assert errs(js({**closed, "properties": {"a": {"type": "number"}}}), js(closed)) == []
    assert "TYPE_NARROWED" in errs(js({**closed, "properties": {"a": {"type": "string"}}}), js(closed))[0]
    assert errs(js({**closed, "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}), js(closed)) == []
    assert "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" in errs(
        js({**open_, "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}), js(open_))[0]
    assert "REQUIRED_PROPERTY" in errs(js({**closed, "required": ["a"]}), js(closed))[0]
    assert "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in errs(js({**closed, "properties": {}}), js(closed))[0]
    assert "ENUM_ARRAY_NARROWED" in errs(js({"enum": [1]}), js({"enum": [1, 2]}))[0]
    assert errs(js({"enum": [1, 2, 3]}), js({"enum": [1, 2]})) == []
    with pytest.raises(InvalidSchema):
        parse_json_schema('{"type": "object", "properties": 5}')


def test_protobuf_cases() -> None:
    base = 'syntax = "proto3"; package p; message M { int32 a = 1; string s = 2; message N { bytes b = 1; } }'
    errs = compat.protobuf.read_errors
    assert errs(parse_protobuf(base.replace("int32 a", "int64 a")), parse_protobuf(base)) == []
    assert errs(parse_protobuf(base.replace("string s", "bytes s")), parse_protobuf(base)) == []
    assert "FIELD_KIND_CHANGED" in errs(parse_protobuf(base.replace("int32 a", "double a")), parse_protobuf(base))[0]
    dropped = base.replace(" message N { bytes b = 1; }", "")
    assert "MESSAGE_REMOVED" in errs(parse_protobuf(dropped), parse_protobuf(base))[0]
    assert set(parse_protobuf(base).messages) == {"p.M", "p.M.N"}
    with pytest.raises(InvalidSchema):
        parse_protobuf("message M { int32 a = ; }")
