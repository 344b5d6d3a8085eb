"""Protobuf schemas: ``.proto`` text parsed by ``proto-schema-parser`` (an ANTLR grammar
of the protobuf language, maintained), and the common cases of Confluent's checker.

:func:`parse_protobuf` refuses text the grammar does not accept (INVALID_SCHEMA) and
answers the text itself, stripped, as the canonical form. Imports are not resolved:
the references a registration names are stored and returned, but types imported from
them are not looked into (limitation).

:func:`read_errors` compares the messages of two files by full name and their fields by
number, with Confluent's ``Difference.Type`` names:

* ``MESSAGE_REMOVED``: a message of the writer the reader no longer has;
* ``FIELD_KIND_CHANGED`` / ``FIELD_SCALAR_KIND_CHANGED``: a field number whose type
  changed outside a wire-compatible group (int32/uint32/int64/uint64/bool;
  sint32/sint64; fixed32/sfixed32; fixed64/sfixed64; string/bytes; a message or enum
  type must keep its name);
* ``REQUIRED_FIELD_ADDED`` / ``REQUIRED_FIELD_REMOVED`` (proto2 ``required``);
* ``FIELD_NAMED_TYPE_CHANGED`` for a message-typed field that names another message.

Not compared (documented limitation): ``oneof`` moves, ``map`` entries' key and value
types, enums' values, options, services, and anything behind an import.
"""

from __future__ import annotations

import base64
from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from laketail.schemas.errors import InvalidSchema

_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
]


class ProtobufSchema:
    def __init__(self, canonical: str, messages: dict[str, dict[int, Any]]) -> None:
        self.canonical = canonical
        #: message full name -> field number -> the parsed field
        self.messages = messages


class _Strict(ErrorListener):
    """ANTLR recovers from syntax errors and prints them; the registry refuses them."""

    def syntaxError(self, recognizer: Any, offendingSymbol: Any, line: int, column: int,  # noqa: N802, N803
                    msg: str, e: Any) -> None:
        raise InvalidSchema(f"Invalid schema: line {line}:{column} {msg}")


def _strict(recognizer: Any) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Strict())


def parse_protobuf(text: str) -> ProtobufSchema:
    """Raises INVALID_SCHEMA (42201) when the text is not a ``.proto`` file, nor a
    base64 ``FileDescriptorProto`` (what confluent-kafka's Python ProtobufSerializer
    registers; Confluent's registry accepts both). A descriptor's canonical text is the
    base64 as given: it is answered as registered (limitation: ``?format=serialized``
    of a schema registered as ``.proto`` text answers the text, not a descriptor)."""
    described = _from_descriptor(text)
    if described is not None:
        return described
    try:
        parsed = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except InvalidSchema:
        raise
    except Exception as exc:  # the AST builder's own errors on odd input
        raise InvalidSchema(f"Invalid schema: {exc}") from exc
    package = next((e.name for e in parsed.file_elements if isinstance(e, ast.Package)), "")
    messages: dict[str, dict[int, Any]] = {}
    _collect(parsed.file_elements, package, messages)
    return ProtobufSchema(text.strip(), messages)


def _from_descriptor(text: str) -> ProtobufSchema | None:
    """The messages of a base64 ``FileDescriptorProto``; None when ``text`` is not one."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c.isspace() or c in "{};" for c in stripped):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (ValueError, DecodeError):
        return None
    if not fd.name and not fd.message_type:
        return None
    messages: dict[str, dict[int, Any]] = {}

    def walk(types: Any, prefix: str) -> None:
        for m in types:
            name = f"{prefix}.{m.name}" if prefix else m.name
            fields: dict[int, Any] = {}
            for f in m.field:
                kind = descriptor_pb2.FieldDescriptorProto.Type.Name(f.type).removeprefix("TYPE_").lower()
                label = descriptor_pb2.FieldDescriptorProto.Label.Name(f.label).removeprefix("LABEL_")
                fields[f.number] = _Field(f.type_name.lstrip(".") if kind in ("message", "enum") else kind,
                                          label)
            messages[name] = fields
            walk(m.nested_type, name)

    walk(fd.message_type, fd.package)
    return ProtobufSchema(stripped, messages)


class _Field:
    """A descriptor's field as the comparison reads it (``type``, ``cardinality``)."""

    def __init__(self, type_: str, cardinality: str) -> None:
        self.type = type_
        self.cardinality = cardinality


def _collect(elements: list, prefix: str, out: dict[str, dict[int, Any]]) -> None:
    for element in elements:
        if type(element).__name__ != "Message":
            continue
        name = f"{prefix}.{element.name}" if prefix else element.name
        fields: dict[int, Any] = {}
        for inner in element.elements:
            kind = type(inner).__name__
            if kind == "Field":
                fields[inner.number] = inner
            elif kind == "OneOf":
                for f in inner.elements:
                    if type(f).__name__ == "Field":
                        fields[f.number] = f
        out[name] = fields
        _collect(element.elements, name, out)


def _compatible(reader_type: str, writer_type: str) -> bool:
    if reader_type == writer_type:
        return True
    return any(reader_type in g and writer_type in g for g in _GROUPS)


def _required(field: Any) -> bool:
    return str(getattr(field, "cardinality", "") or "").upper().endswith("REQUIRED")


def read_errors(reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    out: list[str] = []
    for name, wfields in writer.messages.items():
        rfields = reader.messages.get(name)
        if rfields is None:
            out.append(f"#/{name}: MESSAGE_REMOVED")
            continue
        for number, rf in rfields.items():
            wf = wfields.get(number)
            if wf is None:
                if _required(rf):
                    out.append(f"#/{name}/{number}: REQUIRED_FIELD_ADDED")
                continue
            if not _compatible(str(rf.type), str(wf.type)):
                out.append(f"#/{name}/{number}: FIELD_KIND_CHANGED {wf.type} -> {rf.type}")
        for number, wf in wfields.items():
            if number not in rfields and _required(wf):
                out.append(f"#/{name}/{number}: REQUIRED_FIELD_REMOVED")
    return out
