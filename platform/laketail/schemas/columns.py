"""A registered schema as Arrow columns: the typed value of a topic's table (issue 42).

:func:`arrow_type` maps a schema (its :class:`~laketail.schemas.wire.Codec`) to the
Arrow type of one decoded value, and :func:`decode_column` decodes a column of
wire-format values into that type. They are the pure part of typed columns: the
column a topic's Delta table would hold next to the raw ``value`` (named
:data:`TYPED_VALUE_COLUMN`), written off the request path: the tier pass of a topic
with ``laketail.table.mode=value_schema_id_prefix`` calls :func:`decode_versions`
(``storage/tierer.py``).

Types, as Spark's ``from_avro`` / ``from_protobuf`` map them where they can:

* Avro: record -> struct; null, boolean, int, long, float, double, bytes, string ->
  null, bool, int32, int64, float32, float64, binary, string; enum -> string; fixed ->
  fixed-size binary; array -> list; map -> map<string, T>; a union of null and one
  type -> that type (nullable); other unions -> struct ``member0..n`` (Spark's shape);
  ``date`` -> date32, ``timestamp-millis``/``-micros`` -> timestamp (UTC),
  ``decimal`` on bytes -> decimal128.
* JSON Schema: object with ``properties`` -> struct; string, integer, number, boolean
  -> string, int64, float64, bool; array with ``items`` -> list; ``["T", "null"]`` -> T;
  anything else (no type, combinators) -> its JSON text as a string.
* Protobuf: message -> struct by field name; the scalar types by width; enum ->
  string (its name); repeated -> list; map -> map; a message type met again inside
  itself (recursion) -> its JSON text.

A value that is null stays null; one that does not decode (not framed, another
schema's id, bytes that do not read) is null in the column and counted
(``failures``), never refused here: refusing is broker-side validation's job.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

import fastavro
import orjson
import pyarrow as pa
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from laketail.records import TYPED_VALUE_COLUMN
from laketail.schemas import wire

_AVRO_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_JSON_PRIMITIVES = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
_F = FieldDescriptor
_PROTO_SCALARS = {
    _F.TYPE_DOUBLE: pa.float64(), _F.TYPE_FLOAT: pa.float32(), _F.TYPE_INT64: pa.int64(),
    _F.TYPE_UINT64: pa.uint64(), _F.TYPE_INT32: pa.int32(), _F.TYPE_FIXED64: pa.uint64(),
    _F.TYPE_FIXED32: pa.uint32(), _F.TYPE_BOOL: pa.bool_(), _F.TYPE_STRING: pa.string(),
    _F.TYPE_BYTES: pa.binary(), _F.TYPE_UINT32: pa.uint32(), _F.TYPE_SFIXED32: pa.int32(),
    _F.TYPE_SFIXED64: pa.int64(), _F.TYPE_SINT32: pa.int32(), _F.TYPE_SINT64: pa.int64(),
}


class UnsupportedSchema(ValueError):
    """A schema with no Arrow shape here (a recursive Avro record)."""


def arrow_type(codec: wire.Codec) -> pa.DataType:
    if isinstance(codec, wire.AvroCodec):
        return _avro(codec.parsed, codec.parsed.get("__named_schemas", {}) if isinstance(codec.parsed, dict) else {},
                     frozenset())
    if isinstance(codec, wire.JsonSchemaCodec):
        return _json(codec.validator.schema)
    if isinstance(codec, wire.ProtobufCodec):
        return _proto(codec.messages[0], frozenset())
    raise UnsupportedSchema(f"no Arrow type for {type(codec).__name__}")


def _avro(schema: Any, names: dict[str, Any], seen: frozenset[str]) -> pa.DataType:
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        if schema in seen:
            raise UnsupportedSchema(f"recursive Avro type {schema}")
        return _avro(names[schema], names, seen)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _avro(branches[0], names, seen)
        return pa.struct([pa.field(f"member{i}", _avro(b, names, seen)) for i, b in enumerate(branches)])
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical == "timestamp-millis" and kind == "long":
        return pa.timestamp("ms", tz="UTC")
    if logical == "timestamp-micros" and kind == "long":
        return pa.timestamp("us", tz="UTC")
    if logical == "decimal" and kind == "bytes":
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "record":
        name = schema["name"]
        if name in seen:
            raise UnsupportedSchema(f"recursive Avro record {name}")
        inner = seen | {name}
        return pa.struct([pa.field(f["name"], _avro(f["type"], names, inner)) for f in schema["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary(int(schema["size"]))
    if kind == "array":
        return pa.list_(_avro(schema["items"], names, seen))
    if kind == "map":
        return pa.map_(pa.string(), _avro(schema["values"], names, seen))
    return _avro(kind, names, seen)


def _json(schema: Any) -> pa.DataType:
    if not isinstance(schema, dict):
        return pa.string()
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "object" and isinstance(schema.get("properties"), dict):
        return pa.struct([pa.field(name, _json(sub)) for name, sub in schema["properties"].items()])
    if kind == "array" and isinstance(schema.get("items"), dict):
        return pa.list_(_json(schema["items"]))
    return _JSON_PRIMITIVES.get(kind, pa.string()) if isinstance(kind, str) else pa.string()


def _proto(message: Descriptor, seen: frozenset[str]) -> pa.DataType:
    inner = seen | {message.full_name}
    return pa.struct([pa.field(f.name, _proto_field(f, inner)) for f in message.fields])


def _proto_field(field: FieldDescriptor, seen: frozenset[str]) -> pa.DataType:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return pa.map_(_proto_single(key, seen), _proto_single(value, seen))
    single = _proto_single(field, seen)
    return pa.list_(single) if _repeated(field) else single


def _repeated(field: FieldDescriptor) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf 6+; ``label`` before
        return bool(field.is_repeated)
    return bool(field.label == _F.LABEL_REPEATED)


def _proto_single(field: FieldDescriptor, seen: frozenset[str]) -> pa.DataType:
    if field.type == _F.TYPE_ENUM:
        return pa.string()
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        if field.message_type.full_name in seen:
            return pa.string()  # recursion: the JSON text
        return _proto(field.message_type, seen)
    return _PROTO_SCALARS[field.type]


# -- decoding ----------------------------------------------------------------------------------


def decode_column(values: pa.Array | pa.ChunkedArray, schema_id: int, codec: wire.Codec
                  ) -> tuple[pa.Array, int]:
    """``values`` (wire format of ``schema_id``) decoded into :func:`arrow_type`'s type;
    the number of non-null values that did not decode (null in the column)."""
    prefix = struct.pack(">bi", wire.MAGIC, schema_id)

    def decode(data: bytes) -> Any:
        if data[:5] != prefix:
            raise wire.NotDecodable("not this schema's wire format")
        return _native(codec, data[5:])

    out, failures = _decode_each(values, decode)
    return pa.array(out, arrow_type(codec)), failures


def decode_versions(values: pa.Array | pa.ChunkedArray, versions: dict[int, wire.Codec], latest: int
                    ) -> tuple[pa.Array, int]:
    """``values`` decoded each by the version its wire-format prefix names (``versions``:
    schema id -> codec, the subject's live versions) into the type of version ``latest``
    (the column a table with ``laketail.table.mode=value_schema_id_prefix`` holds); the
    number of non-null values that did not decode (null in the column).

    Avro values of an older version are read with ``latest`` as the reader schema
    (Avro's schema resolution: added fields take their defaults); JSON Schema and
    Protobuf values keep the fields ``latest``'s type names. A value whose shape does not
    fit ``latest``'s type (an incompatible change made with compatibility NONE) is a
    counted null too."""
    reader = versions[latest]

    def decode(data: bytes) -> Any:
        codec = versions.get(wire.schema_id_of(data))
        if codec is None:
            raise wire.NotDecodable("not a version of the subject")
        return _native(codec, data[5:], reader)

    return _fitted(*_decode_each(values, decode), arrow_type(reader))


def decode_unframed(values: pa.Array | pa.ChunkedArray, codec: wire.Codec) -> tuple[pa.Array, int]:
    """``values`` as they are -- no wire-format prefix: Avro binary, JSON text, or the
    bytes of the schema's first Protobuf message -- decoded by ``codec`` (a subject's
    latest version, ``laketail.table.mode=value_schema_latest``) into its
    :func:`arrow_type`; the number of non-null values that did not decode (null)."""
    def decode(data: bytes) -> Any:
        if isinstance(codec, wire.ProtobufCodec):
            data = b"\x00" + data  # the first message's index path, as _native reads it
        elif isinstance(codec, wire.AvroCodec):
            codec.check(data)  # to its last byte: a framed value is not read as Avro by chance
        return _native(codec, data)

    return _fitted(*_decode_each(values, decode), arrow_type(codec))


def _decode_each(values: pa.Array | pa.ChunkedArray, decode: Callable[[bytes], Any]) -> tuple[list[Any], int]:
    """``decode`` of each non-null value (None where it raised NotDecodable), and how many raised."""
    out: list[Any] = []
    failures = 0
    for data in values.to_pylist():
        if data is None:
            out.append(None)
            continue
        try:
            out.append(decode(data))
        except wire.NotDecodable:
            out.append(None)
            failures += 1
    return out, failures


def _fitted(values: list[Any], failures: int, target: pa.DataType) -> tuple[pa.Array, int]:
    """``values`` as an array of ``target``, and ``failures`` plus the values that do not
    fit it (an incompatible change made with compatibility NONE): those become null,
    the others are kept."""
    try:
        return pa.array(values, target), failures
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    fitted: list[Any] = []
    for value in values:
        try:
            fitted.append(pa.array([value], target)[0].as_py())
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            fitted.append(None)
            failures += 1
    return pa.array(fitted, target), failures


def _native(codec: wire.Codec, payload: bytes, reader: wire.Codec | None = None) -> Any:
    if isinstance(codec, wire.AvroCodec):
        target = reader.parsed if isinstance(reader, wire.AvroCodec) else codec.parsed
        buffer = io.BytesIO(payload)
        try:
            datum = fastavro.schemaless_reader(buffer, codec.parsed, target if target is not codec.parsed else None)
        except Exception as exc:
            raise wire.NotDecodable(str(exc)) from exc
        return _avro_value(datum, target, target.get("__named_schemas", {}) if isinstance(target, dict) else {})
    if isinstance(codec, wire.JsonSchemaCodec) and isinstance(reader, wire.JsonSchemaCodec):
        return _json_value(codec.decode(payload), reader.validator.schema)
    if isinstance(codec, wire.JsonSchemaCodec):
        return _json_value(codec.decode(payload), codec.validator.schema)
    if isinstance(codec, wire.ProtobufCodec):
        indexes, at = wire.read_indexes(payload)
        if indexes != [0]:
            raise wire.NotDecodable("a message other than the first")
        cls = message_factory.GetMessageClass(codec.messages[0])
        try:
            return _proto_value(cls.FromString(payload[at:]))
        except Exception as exc:
            raise wire.NotDecodable(str(exc)) from exc
    raise wire.NotDecodable(type(codec).__name__)


def _avro_value(datum: Any, schema: Any, names: dict[str, Any]) -> Any:
    """fastavro's datum in the shape of :func:`_avro`'s type (unions of several types as
    ``member<i>`` structs; maps as key/value pairs)."""
    if datum is None:
        return None
    if isinstance(schema, str):
        return _avro_value(datum, names[schema], names) if schema in names else datum
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _avro_value(datum, branches[0], names)
        index = _branch(datum, branches, names)
        return {f"member{index}": _avro_value(datum, branches[index], names)}
    kind = schema["type"]
    if kind == "record":
        return {f["name"]: _avro_value(datum.get(f["name"]), f["type"], names) for f in schema["fields"]}
    if kind == "array":
        return [_avro_value(d, schema["items"], names) for d in datum]
    if kind == "map":
        return [(k, _avro_value(v, schema["values"], names)) for k, v in datum.items()]
    return datum


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,), "int": (int,), "long": (int,), "float": (float,), "double": (float,),
    "bytes": (bytes,), "string": (str,), "record": (dict,), "map": (dict,), "array": (list,),
    "enum": (str,), "fixed": (bytes,),
}


def _branch(datum: Any, branches: list[Any], names: dict[str, Any]) -> int:
    """The union branch a decoded datum came from, by its Python type (the first that
    fits; a record by its fields)."""
    for i, branch in enumerate(branches):
        resolved = names.get(branch, branch) if isinstance(branch, str) else branch
        kind = resolved if isinstance(resolved, str) else resolved.get("type")
        if isinstance(datum, bool) and kind != "boolean":
            continue
        if not isinstance(datum, _PYTHON_TYPES.get(kind, ())):
            continue
        fields = set(datum) if isinstance(datum, dict) else set()
        if kind == "record" and fields != {f["name"] for f in resolved["fields"]}:
            continue
        return i
    return 0


def _json_value(doc: Any, schema: Any) -> Any:
    target = _json(schema)
    if doc is None:
        return None
    if pa.types.is_struct(target):
        if not isinstance(doc, dict):
            raise wire.NotDecodable("not an object")
        return {name: _json_value(doc.get(name), sub) for name, sub in schema["properties"].items()}
    if pa.types.is_list(target):
        if not isinstance(doc, list):
            raise wire.NotDecodable("not an array")
        return [_json_value(d, schema["items"]) for d in doc]
    if target == pa.string() and not isinstance(doc, str):
        return orjson.dumps(doc).decode()
    return doc


def _proto_value(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = [(k, _proto_single_value(field.message_type.fields_by_name["value"], v))
                               for k, v in value.items()]
        elif _repeated(field):
            out[field.name] = [_proto_single_value(field, v) for v in value]
        elif field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP) and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _proto_single_value(field, value)
    return out


def _proto_single_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == _F.TYPE_ENUM:
        found = field.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        return _proto_value(value)
    return value


# -- fitting and encoding (Spark's format("laketail") and its sink) ----------------------------


def conform(column: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``column`` in ``target``'s type, struct fields matched by name at every depth: a
    field ``target`` has and ``column`` lacks is null (a file written before a version
    added it), one ``column`` has and ``target`` lacks is left out (a version newer than
    the reader's type). Other types are cast (a timestamp's unit, a wider integer)."""
    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([conform(chunk, target) for chunk in column.chunks], target)
    if pa.types.is_struct(target) and pa.types.is_struct(column.type):
        names = {column.type.field(i).name for i in range(column.type.num_fields)}
        children = []
        for i in range(target.num_fields):
            field = target.field(i)
            children.append(conform(column.field(field.name), field.type) if field.name in names
                            else pa.nulls(len(column), field.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=column.is_null())
    if pa.types.is_list(target) and pa.types.is_list(column.type):
        values = conform(column.flatten(), target.value_type)
        return pa.ListArray.from_arrays(column.offsets, values, type=target, mask=column.is_null())
    if pa.types.is_null(column.type):
        return pa.nulls(len(column), target)
    return column.cast(target)


def encode_column(column: pa.Array | pa.ChunkedArray, schema_id: int, codec: wire.Codec) -> list[bytes | None]:
    """Each value of a ``value_struct``-shaped column (:func:`arrow_type`'s type of
    ``codec``, fields matched by name) in Confluent's wire format of ``schema_id``;
    null stays null. :class:`~laketail.schemas.errors.JsonConversion` (naming the row)
    for a value the schema does not take."""
    from laketail.schemas.errors import JsonConversion

    out: list[bytes | None] = []
    for i, value in enumerate(column.to_pylist()):
        if value is None:
            out.append(None)
            continue
        try:
            out.append(wire.frame(schema_id, _encode_native(codec, value)))
        except JsonConversion as exc:
            raise JsonConversion(f"row {i}: {exc.detail}") from exc
    return out


def _encode_native(codec: wire.Codec, value: Any) -> bytes:
    from laketail.schemas.errors import JsonConversion

    if isinstance(codec, wire.AvroCodec):
        names = codec.parsed.get("__named_schemas", {}) if isinstance(codec.parsed, dict) else {}
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, codec.parsed, _avro_datum(value, codec.parsed, names))
        except Exception as exc:  # fastavro raises ValueError, TypeError, KeyError, ...
            raise JsonConversion(f"{type(exc).__name__}: {exc}") from exc
        return out.getvalue()
    if isinstance(codec, wire.JsonSchemaCodec):
        return codec.encode(_json_doc(value))
    if isinstance(codec, wire.ProtobufCodec):
        return codec.encode(_proto_doc(value, codec.messages[0]))
    raise JsonConversion(f"no encoding for {type(codec).__name__}")


def _avro_datum(value: Any, schema: Any, names: dict[str, Any]) -> Any:
    """:func:`_avro_value`'s inverse: a column value as fastavro writes it."""
    if value is None:
        return None
    if isinstance(schema, str):
        return _avro_datum(value, names[schema], names) if schema in names else value
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _avro_datum(value, branches[0], names)
        chosen = [(int(k[len("member"):]), v) for k, v in value.items() if v is not None]
        if len(chosen) != 1:
            return None if not chosen else value  # several members set: fastavro refuses it
        index, inner = chosen[0]
        return _avro_datum(inner, branches[index], names)
    kind = schema["type"]
    if kind == "record":
        return {f["name"]: _avro_datum(value.get(f["name"]), f["type"], names) for f in schema["fields"]}
    if kind == "array":
        return [_avro_datum(v, schema["items"], names) for v in value]
    if kind == "map":
        return {k: _avro_datum(v, schema["values"], names) for k, v in value}
    return value


def _json_doc(value: Any) -> Any:
    """A column value as a JSON document: null fields left out (JSON Schema's optional
    properties are absent, not null), maps as objects."""
    if isinstance(value, dict):
        return {k: _json_doc(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_json_doc(v) for v in value]
    return value


def _proto_doc(value: Any, message: Descriptor) -> dict[str, Any]:
    """A column value as Protobuf's JSON mapping of ``message`` (bytes as base64, maps as
    objects, null fields left out)."""
    import base64

    out: dict[str, Any] = {}
    for field in message.fields:
        item = value.get(field.name)
        if item is None:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            inner = field.message_type.fields_by_name["value"]
            out[field.name] = {str(k): _proto_item(inner, v, base64) for k, v in item}
        elif _repeated(field):
            out[field.name] = [_proto_item(field, v, base64) for v in item]
        else:
            out[field.name] = _proto_item(field, item, base64)
    return out


def _proto_item(field: FieldDescriptor, value: Any, base64: Any) -> Any:
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP) and isinstance(value, dict):
        return _proto_doc(value, field.message_type)
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP) and isinstance(value, str):
        return orjson.loads(value)  # a recursive message kept as its JSON text
    if field.type == _F.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


__all__ = ["TYPED_VALUE_COLUMN", "UnsupportedSchema", "arrow_type", "conform", "decode_column", "decode_unframed",
           "decode_versions", "encode_column"]
