"""JSON Schemas: parsing (jsonschema) and the common cases of Confluent's compatibility.

:func:`parse_json_schema` checks the document against its draft's metaschema with
``jsonschema`` (the ``$schema`` it names, else the latest draft) and answers compact
JSON as the canonical text.

:func:`read_errors` asks whether every document valid under ``writer`` is valid under
``reader`` (Confluent's JSON Schema checker asks the same), for the cases that decide
most evolutions; each problem is named as Confluent's ``Difference.Type`` names it:

* ``TYPE_NARROWED`` / ``TYPE_CHANGED``: the reader accepts fewer types (``integer`` is
  within ``number``);
* ``REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL``: a property the reader requires
  that the writer did not;
* ``PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL``: a new property the reader constrains while
  the writer allowed any additional property (a writer document may hold it with any
  value);
* ``PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL``: a property the writer had that the
  reader's ``additionalProperties: false`` now refuses;
* ``ADDITIONAL_PROPERTIES_NARROWED``: ``additionalProperties`` turned false;
* ``ENUM_ARRAY_NARROWED``: enum values dropped; ``items`` and shared properties are
  compared recursively.

Not compared (documented limitation): ``oneOf``/``anyOf``/``allOf`` combinations,
``$ref`` targets, numeric and string bounds, ``patternProperties`` and
``dependencies``: a change to those alone is treated as compatible.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson

from laketail.schemas.errors import InvalidSchema


class JsonSchema:
    def __init__(self, canonical: str, doc: Any) -> None:
        self.canonical = canonical
        self.doc = doc


def parse_json_schema(text: str) -> JsonSchema:
    """Raises INVALID_SCHEMA (42201) for text that is not JSON or not a valid schema."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from exc
    if not isinstance(doc, (dict, bool)):
        raise InvalidSchema("Invalid schema: a JSON Schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(doc, default=jsonschema.Draft202012Validator).check_schema(doc)
    except jsonschema.exceptions.SchemaError as exc:
        raise InvalidSchema(f"Invalid schema: {exc.message}") from exc
    return JsonSchema(orjson.dumps(doc).decode(), doc)


def read_errors(reader: JsonSchema, writer: JsonSchema) -> list[str]:
    out: list[str] = []
    _check(reader.doc, writer.doc, "#", out)
    return out


def _types(schema: dict) -> set[str] | None:
    t = schema.get("type")
    if t is None:
        return None  # any type
    return {t} if isinstance(t, str) else set(t)


def _closed(schema: dict) -> bool:
    return schema.get("additionalProperties") is False


def _check(reader: Any, writer: Any, path: str, out: list[str]) -> None:
    if reader is True or reader == {}:
        return
    if writer is False:
        return
    if reader is False:
        out.append(f"{path}: TYPE_NARROWED the reader accepts nothing")
        return
    if writer is True:
        writer = {}
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return
    rt, wt = _types(reader), _types(writer)
    if rt is not None:
        widened = set(rt) | ({"integer"} if "number" in rt else set())
        lost = (wt or {"any"}) - widened
        if lost:
            out.append(f"{path}: TYPE_NARROWED {sorted(lost)} no longer accepted")
    if "enum" in reader:
        dropped = [v for v in writer.get("enum", [object()]) if v not in reader["enum"]]
        if "enum" not in writer or dropped:
            out.append(f"{path}: ENUM_ARRAY_NARROWED")
    added = set(reader.get("required", ())) - set(writer.get("required", ()))
    for name in sorted(added):
        out.append(f"{path}/required/{name}: REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
    rprops, wprops = reader.get("properties", {}), writer.get("properties", {})
    for name in sorted(set(rprops) | set(wprops)):
        where = f"{path}/properties/{name}"
        if name in rprops and name in wprops:
            _check(rprops[name], wprops[name], where, out)
        elif name in rprops:
            if not _closed(writer) and rprops[name] not in (True, {}):
                out.append(f"{where}: PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        elif _closed(reader):
            out.append(f"{where}: PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    if _closed(reader) and not _closed(writer) and not wprops.keys() - rprops.keys():
        out.append(f"{path}/additionalProperties: ADDITIONAL_PROPERTIES_NARROWED")
    if "items" in reader and "items" in writer:
        _check(reader["items"], writer["items"], f"{path}/items", out)
