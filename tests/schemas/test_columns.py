"""Schemas as Arrow types, and wire-format values decoded into them (the typed value
column's pure part): each type's mapping, unions, logical types, and values that do
not decode becoming counted nulls."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pytest

from laketail.schemas import wire
from laketail.schemas.columns import (
    UnsupportedSchema,
    arrow_type,
    conform,
    decode_column,
    decode_versions,
    encode_column,
)
from laketail.schemas.errors import JsonConversion

ORDER = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "either", "type": ["null", "int", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
]})


def _framed(codec: wire.Codec, schema_id: int, doc) -> bytes:
    return wire.frame(schema_id, codec.encode(doc))


def test_avro_types_and_values() -> None:
    codec = wire.codec("AVRO", ORDER)
    assert arrow_type(codec) == pa.struct([
        ("id", pa.string()), ("amount", pa.float64()), ("note", pa.string()),
        ("at", pa.timestamp("ms", tz="UTC")),
        ("lines", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int32())]))),
        ("tags", pa.map_(pa.string(), pa.int64())),
        ("either", pa.struct([("member0", pa.int32()), ("member1", pa.string())])),
        ("kind", pa.string()),
    ])
    doc = {"id": "o-1", "amount": 9.5, "note": {"string": "gift"}, "at": 1_700_000_000_000,
           "lines": [{"sku": "s", "qty": 2}], "tags": {"x": 1}, "either": {"string": "two"}, "kind": "B"}
    values = pa.array([_framed(codec, 7, doc), None, b"not framed", _framed(codec, 8, doc)], pa.binary())
    column, failures = decode_column(values, 7, codec)
    assert failures == 2  # no magic byte; another schema id
    rows = column.to_pylist()
    assert rows[1] is None and rows[2] is None and rows[3] is None
    assert rows[0]["id"] == "o-1" and rows[0]["amount"] == 9.5 and rows[0]["note"] == "gift"
    assert rows[0]["at"] == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc)
    assert rows[0]["lines"] == [{"sku": "s", "qty": 2}]
    assert rows[0]["tags"] == [("x", 1)]
    assert rows[0]["either"] == {"member0": None, "member1": "two"}
    assert rows[0]["kind"] == "B"


def test_json_schema_types_and_values() -> None:
    schema = json.dumps({"type": "object", "properties": {
        "id": {"type": "string"}, "amount": {"type": "number"}, "n": {"type": ["integer", "null"]},
        "items": {"type": "array", "items": {"type": "string"}}, "free": {}}})
    codec = wire.codec("JSON", schema)
    assert arrow_type(codec) == pa.struct([("id", pa.string()), ("amount", pa.float64()), ("n", pa.int64()),
                                           ("items", pa.list_(pa.string())), ("free", pa.string())])
    values = pa.array([_framed(codec, 3, {"id": "a", "amount": 1, "n": None, "items": ["x"], "free": {"k": 1}})])
    column, failures = decode_column(values, 3, codec)
    assert failures == 0
    assert column.to_pylist() == [{"id": "a", "amount": 1.0, "n": None, "items": ["x"], "free": '{"k":1}'}]


def test_protobuf_types_and_values() -> None:
    codec = wire.codec("PROTOBUF", """syntax = "proto3";
package shop;
message Order {
  string id = 1;
  int64 cents = 2;
  repeated string tags = 3;
  Kind kind = 4;
  Line line = 5;
  map<string, int32> counts = 6;
  message Line { string sku = 1; }
}
enum Kind { A = 0; B = 1; }
""")
    assert arrow_type(codec) == pa.struct([
        ("id", pa.string()), ("cents", pa.int64()), ("tags", pa.list_(pa.string())), ("kind", pa.string()),
        ("line", pa.struct([("sku", pa.string())])), ("counts", pa.map_(pa.string(), pa.int32())),
    ])
    values = pa.array([_framed(codec, 4, {"id": "a", "cents": "12", "tags": ["t"], "kind": "B",
                                          "counts": {"c": 2}}), b"\x00\x00\x00\x00\x04\x00\xff"])
    column, failures = decode_column(values, 4, codec)
    assert failures == 1
    assert column.to_pylist()[0] == {"id": "a", "cents": 12, "tags": ["t"], "kind": "B", "line": None,
                                     "counts": [("c", 2)]}


def test_a_recursive_avro_record_has_no_arrow_type() -> None:
    codec = wire.codec("AVRO", json.dumps({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}))
    with pytest.raises(UnsupportedSchema):
        arrow_type(codec)


def test_values_of_every_version_decode_into_the_latest_type() -> None:
    """Avro v1 values read with v2 as reader schema (its default applies); a value of an
    id that is not one of the versions, or of no wire format, is a counted null."""
    v1 = wire.codec("AVRO", json.dumps({"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"}]}))
    v2 = wire.codec("AVRO", json.dumps({"type": "record", "name": "O", "fields": [
        {"name": "id", "type": "string"}, {"name": "n", "type": "long", "default": 7}]}))
    values = pa.array([_framed(v1, 1, {"id": "a"}), _framed(v2, 2, {"id": "b", "n": 3}), None,
                       _framed(v1, 9, {"id": "c"}), b"plain"], pa.binary())
    column, failures = decode_versions(values, {1: v1, 2: v2}, latest=2)
    assert column.type == pa.struct([("id", pa.string()), ("n", pa.int64())])
    assert column.to_pylist() == [{"id": "a", "n": 7}, {"id": "b", "n": 3}, None, None, None]
    assert failures == 2


def test_json_values_that_do_not_fit_the_latest_type_are_counted_nulls() -> None:
    """Under compatibility NONE a version may change a field's type: values of the old
    shape that do not fit the latest type are nulls, the others kept."""
    old = wire.codec("JSON", json.dumps({"type": "object", "properties": {"n": {"type": "string"}}}))
    new = wire.codec("JSON", json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))
    values = pa.array([_framed(old, 1, {"n": "x"}), _framed(new, 2, {"n": 5})], pa.binary())
    column, failures = decode_versions(values, {1: old, 2: new}, latest=2)
    assert column.to_pylist() == [None, {"n": 5}]
    assert failures == 1


# -- conform and encode_column (format("laketail") and its sink) --------------------------------


def test_conform_matches_struct_fields_by_name() -> None:
    old = pa.array([{"amount": 1.5, "id": "a"}, None], pa.struct([("amount", pa.float64()), ("id", pa.string())]))
    wide = pa.struct([("id", pa.string()), ("amount", pa.float64()), ("note", pa.string())])
    assert conform(old, wide).to_pylist() == [{"id": "a", "amount": 1.5, "note": None}, None]
    newer = pa.array([{"id": "b", "amount": 2.0, "note": "x"}], wide)
    narrow = pa.struct([("id", pa.string()), ("amount", pa.float64())])
    assert conform(newer, narrow).to_pylist() == [{"id": "b", "amount": 2.0}]
    lists = pa.array([[{"id": "c", "amount": 3.0}]], pa.list_(narrow))
    assert conform(lists, pa.list_(wide)).to_pylist() == [[{"id": "c", "amount": 3.0, "note": None}]]
    at = pa.array([datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)], pa.timestamp("ms", tz="UTC"))
    assert conform(at, pa.timestamp("us", tz="UTC")).type == pa.timestamp("us", tz="UTC")


def test_encode_column_is_decode_columns_inverse_for_avro() -> None:
    codec = wire.codec("AVRO", ORDER)
    docs = [{"id": "o-1", "amount": 1.5, "note": {"string": "rush"}, "at": 1_700_000_000_000,
             "lines": [{"sku": "s", "qty": 2}], "tags": {"a": 1}, "either": {"string": "x"}, "kind": "B"},
            {"id": "o-2", "amount": 2.0, "note": None, "at": 0, "lines": [], "tags": {}, "either": {"int": 7},
             "kind": "A"}]
    column, failures = decode_column(pa.array([_framed(codec, 9, d) for d in docs] + [None], pa.binary()), 9, codec)
    assert failures == 0
    encoded = encode_column(column, 9, codec)
    assert encoded[2] is None
    again, failures = decode_column(pa.array(encoded, pa.binary()), 9, codec)
    assert failures == 0 and again.to_pylist() == column.to_pylist()


def test_encode_column_json_schema_and_protobuf() -> None:
    js = wire.codec("JSON", json.dumps({"type": "object", "properties": {
        "id": {"type": "string"}, "n": {"type": "integer"}}, "required": ["id"]}))
    out = encode_column(pa.array([{"id": "a", "n": None}], arrow_type(js)), 3, js)
    assert out == [wire.frame(3, b'{"id":"a"}')]  # a null property is left out
    proto = wire.codec("PROTOBUF", 'syntax = "proto3"; message M { string id = 1; bytes raw = 2; '
                                   'map<string, int64> tags = 3; }')
    column = pa.array([{"id": "p", "raw": b"\x00\x01", "tags": [("k", 5)]}], arrow_type(proto))
    encoded = encode_column(column, 4, proto)
    assert decode_column(pa.array(encoded, pa.binary()), 4, proto)[0].to_pylist() == [
        {"id": "p", "raw": b"\x00\x01", "tags": [("k", 5)]}]


def test_encode_column_refuses_what_the_schema_does_not_take() -> None:
    js = wire.codec("JSON", json.dumps({"type": "object", "properties": {"id": {"type": "string"}},
                                        "required": ["id"]}))
    with pytest.raises(JsonConversion, match="row 1"):
        encode_column(pa.array([{"id": "a"}, {"id": None}], arrow_type(js)), 3, js)
