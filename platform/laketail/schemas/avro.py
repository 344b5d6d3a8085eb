"""Avro schemas: parsing (fastavro) and Avro's schema resolution as a compatibility test.

:func:`parse_avro` validates the text with :func:`fastavro.parse_schema` (named types
of the schema's references are parsed first, so ``"com.acme.Address"`` resolves) and
answers the schema's canonical text: the JSON as given, re-serialized compactly with
keys in their given order. Two registrations of the same schema differing only in
whitespace are then one schema with one id, as Confluent's ``AvroSchema.canonicalString``
makes them.

:func:`read_errors` is the Avro specification's "Schema Resolution" as Confluent's
``AvroCompatibilityChecker`` applies it: can data written with ``writer`` be read with
``reader``? It returns a message per problem, empty when it can:

* primitives must match, or be a promotion (int to long, float, double; long to float,
  double; float to double; string to bytes and bytes to string);
* records: every reader field is in the writer (by name or alias) with a readable
  type, or has a default; writer fields the reader lacks are skipped;
* enums: every writer symbol is a reader symbol, unless the reader has a default;
* arrays and maps by their items and values; fixed types by name and size;
* a writer union: each branch must be readable; a reader union: one branch must read
  the writer (the writer's union branches each so).

Named types are compared by their unqualified names, as Avro's Java
``SchemaCompatibility`` compares them (a namespace change alone is compatible); the
reader's aliases count too. Recursive types are followed once per (reader, writer) pair.
"""

from __future__ import annotations

from typing import Any

import fastavro
import orjson

from laketail.schemas.errors import InvalidSchema

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class AvroSchema:
    """A parsed Avro schema: ``canonical`` text, and fastavro's parsed form with the
    named types it can reach (its own and its references')."""

    def __init__(self, canonical: str, parsed: Any, names: dict[str, Any]) -> None:
        self.canonical = canonical
        self.parsed = parsed
        self.names = names


def parse_avro(text: str, references: list[str] = ()) -> AvroSchema:  # type: ignore[assignment]
    """The schema ``text`` names, its ``references`` (their texts, in dependency order)
    parsed first. Raises INVALID_SCHEMA (42201) with fastavro's reason."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from exc
    names: dict[str, Any] = {}
    try:
        for ref in references:
            fastavro.parse_schema(orjson.loads(ref), named_schemas=names)
        parsed = fastavro.parse_schema(doc, named_schemas=names)
    except Exception as exc:  # fastavro raises SchemaParseException, ValueError, KeyError, TypeError
        raise InvalidSchema(f"Invalid schema {text[:200]}: {exc}") from exc
    return AvroSchema(orjson.dumps(doc).decode(), parsed, names)


def read_errors(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    out: list[str] = []
    _check(reader.parsed, writer.parsed, reader.names, writer.names, "/", out, set())
    return out


def _deref(schema: Any, names: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        return names.get(schema, schema)
    if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES:
        return schema["type"]  # {"type": "int"} is "int"; a logical type reads as its base type
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema.get("type"))


def _readable(reader: Any, writer: Any, rn: dict, wn: dict, seen: set) -> bool:
    probe: list[str] = []
    _check(reader, writer, rn, wn, "", probe, set(seen))
    return not probe


def _check(reader: Any, writer: Any, rn: dict, wn: dict, path: str, out: list[str], seen: set) -> None:
    reader, writer = _deref(reader, rn), _deref(writer, wn)
    rk, wk = _kind(reader), _kind(writer)
    if wk == "union":
        for i, branch in enumerate(writer):
            _check(reader, branch, rn, wn, f"{path}[{i}]", out, seen)
        return
    if rk == "union":
        if not any(_readable(branch, writer, rn, wn, seen) for branch in reader):
            out.append(f"{path}: reader union lacks writer type {wk}")
        return
    if rk in _PRIMITIVES or wk in _PRIMITIVES:
        if rk != wk and rk not in _PROMOTIONS.get(wk, ()):
            out.append(f"{path}: TYPE_MISMATCH reader type {rk} cannot read writer type {wk}")
        return
    if rk != wk:
        out.append(f"{path}: TYPE_MISMATCH reader type {rk} cannot read writer type {wk}")
        return
    if rk in ("record", "enum", "fixed"):
        aliases = {a.rsplit(".", 1)[-1] for a in reader.get("aliases") or ()}
        simple_reader, simple_writer = reader["name"].rsplit(".", 1)[-1], writer["name"].rsplit(".", 1)[-1]
        if simple_reader != simple_writer and simple_writer not in aliases:
            out.append(f"{path}: NAME_MISMATCH expected {reader['name']}, found {writer['name']}")
            return
    if rk == "record":
        pair = (reader["name"], writer["name"])
        if pair in seen:
            return
        seen = seen | {pair}
        by_name = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            found = by_name.get(field["name"])
            for alias in field.get("aliases") or ():
                found = found or by_name.get(alias)
            if found is not None:
                _check(field["type"], found["type"], rn, wn, f"{path}{field['name']}/", out, seen)
            elif "default" not in field:
                out.append(f"{path}{field['name']}: READER_FIELD_MISSING_DEFAULT_VALUE {field['name']}")
    elif rk == "enum":
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and "default" not in reader:
            out.append(f"{path}: MISSING_ENUM_SYMBOLS {missing}")
    elif rk == "fixed":
        if reader["size"] != writer["size"]:
            out.append(f"{path}: FIXED_SIZE_MISMATCH expected {reader['size']}, found {writer['size']}")
    elif rk == "array":
        _check(reader["items"], writer["items"], rn, wn, f"{path}items/", out, seen)
    elif rk == "map":
        _check(reader["values"], writer["values"], rn, wn, f"{path}values/", out, seen)
