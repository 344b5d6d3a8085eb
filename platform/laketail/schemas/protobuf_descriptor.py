"""A registered Protobuf schema as live message descriptors, to encode and decode records.

The registry keeps a Protobuf schema as ``.proto`` text or as a base64
``FileDescriptorProto`` (:mod:`laketail.schemas.protobuf`). :func:`messages` answers the
file's top-level message descriptors, in declaration order (the order Confluent's
message indexes count in), from a private descriptor pool per schema:

* a descriptor is added to the pool as it is;
* ``.proto`` text is parsed by ``proto-schema-parser`` and its AST turned into a
  ``FileDescriptorProto``: messages (nested too), enums, scalar, message and enum
  fields, ``repeated``, proto3 ``optional`` (a synthetic oneof, as protoc writes it),
  ``oneof`` and ``map`` (a nested ``...Entry`` message). Type names stay as written;
  the pool resolves them by protobuf's scoping rules, as protoc does.

References are added to the same pool first, so imported types resolve. Options,
extensions, services and groups are not carried (limitation: they do not change the
bytes of the messages a REST body can hold).
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from laketail.schemas.errors import InvalidSchema

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _F.TYPE_DOUBLE, "float": _F.TYPE_FLOAT, "int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64,
    "int32": _F.TYPE_INT32, "fixed64": _F.TYPE_FIXED64, "fixed32": _F.TYPE_FIXED32, "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "uint32": _F.TYPE_UINT32,
    "sfixed32": _F.TYPE_SFIXED32, "sfixed64": _F.TYPE_SFIXED64, "sint32": _F.TYPE_SINT32,
    "sint64": _F.TYPE_SINT64,
}


def messages(text: str, references: list[str]) -> list[Descriptor]:
    """The top-level messages of the schema ``text`` (INVALID_SCHEMA when it has none or
    its types do not resolve)."""
    pool = descriptor_pool.DescriptorPool()
    files = [file_proto(ref, f"reference_{i}.proto") for i, ref in enumerate(references)]
    main = file_proto(text, "schema.proto")
    for dep in files:
        if dep.name not in main.dependency:
            main.dependency.append(dep.name)
    try:
        for fd in files:
            pool.Add(fd)
        pool.Add(main)
        found = pool.FindFileByName(main.name)
    except (TypeError, KeyError, ValueError) as exc:
        raise InvalidSchema(f"Invalid schema: {exc}") from exc
    out = [found.message_types_by_name[m.name] for m in main.message_type]
    if not out:
        raise InvalidSchema("Invalid schema: the file declares no message")
    return out


def file_proto(text: str, name: str) -> descriptor_pb2.FileDescriptorProto:
    stripped = text.strip()
    try:
        raw = base64.b64decode(stripped, validate=True)
        fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
        if fd.message_type or fd.enum_type:
            del fd.dependency[:]  # imports are the references, added under their own names
            fd.name = name
            return fd
    except Exception:  # noqa: BLE001 - not a descriptor: .proto text
        pass
    try:
        parsed = Parser().parse(text)
    except Exception as exc:
        raise InvalidSchema(f"Invalid schema: {exc}") from exc
    fd = descriptor_pb2.FileDescriptorProto(name=name, syntax="proto3")
    for element in parsed.file_elements:
        if isinstance(element, ast.Package):
            fd.package = element.name
        elif isinstance(element, ast.Message):
            _message(element, fd.message_type.add(), fd)
        elif isinstance(element, ast.Enum):
            _enum(element, fd.enum_type.add())
    if parsed.syntax is not None and getattr(parsed.syntax, "value", parsed.syntax) == "proto2":
        fd.syntax = "proto2"
    return fd


def _enum(node: Any, out: descriptor_pb2.EnumDescriptorProto) -> None:
    out.name = node.name
    for value in node.elements:
        if isinstance(value, ast.EnumValue):
            out.value.add(name=value.name, number=value.number)


def _field(node: Any, out: descriptor_pb2.FieldDescriptorProto) -> None:
    out.name = node.name
    out.number = node.number
    out.json_name = _camel(node.name)
    if node.type in _SCALARS:
        out.type = _SCALARS[node.type]  # type: ignore[assignment]
    else:
        out.type_name = node.type  # resolved by the pool; message or enum
    cardinality = getattr(node.cardinality, "value", None)
    out.label = (_F.LABEL_REPEATED if cardinality == "REPEATED"  # type: ignore[assignment]
                 else _F.LABEL_REQUIRED if cardinality == "REQUIRED" else _F.LABEL_OPTIONAL)


def _message(node: Any, out: descriptor_pb2.DescriptorProto, fd: descriptor_pb2.FileDescriptorProto) -> None:
    out.name = node.name
    synthetic = []
    for element in node.elements:
        if isinstance(element, ast.Field):
            field = out.field.add()
            _field(element, field)
            if getattr(element.cardinality, "value", None) == "OPTIONAL" and fd.syntax == "proto3":
                field.proto3_optional = True
                synthetic.append(field)
        elif isinstance(element, ast.MapField):
            entry = out.nested_type.add(name=_camel(element.name, upper=True) + "Entry")
            entry.options.map_entry = True
            _field(ast.Field(name="key", number=1, type=element.key_type), entry.field.add())
            _field(ast.Field(name="value", number=2, type=element.value_type), entry.field.add())
            out.field.add(name=element.name, number=element.number, json_name=_camel(element.name),
                          label=_F.LABEL_REPEATED, type=_F.TYPE_MESSAGE, type_name=entry.name)
        elif isinstance(element, ast.OneOf):
            index = len(out.oneof_decl)
            out.oneof_decl.add(name=element.name)
            for member in element.elements:
                if isinstance(member, ast.Field):
                    field = out.field.add()
                    _field(member, field)
                    field.oneof_index = index
        elif isinstance(element, ast.Message):
            _message(element, out.nested_type.add(), fd)
        elif isinstance(element, ast.Enum):
            _enum(element, out.enum_type.add())
    for field in synthetic:  # after the real oneofs, as protoc orders them
        field.oneof_index = len(out.oneof_decl)
        out.oneof_decl.add(name="_" + field.name)


def _camel(name: str, upper: bool = False) -> str:
    parts = name.split("_")
    text = parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])
    return text[:1].upper() + text[1:] if upper else text
