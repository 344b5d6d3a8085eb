"""The REST Proxy's schema'd embedded formats: ``avro``, ``jsonschema``, ``protobuf``.

Produce resolves the key's and the value's schema as kafka-rest's ``SchemaManagerImpl``
does, through the broker's registry (:mod:`laketail.schemas`):

* a schema id (v2 ``value_schema_id``, v3 ``schema_id``): that schema; its subject is
  the one named (v3 ``subject``) or the topic's (TopicNameStrategy: ``<topic>-key`` /
  ``<topic>-value``), which must hold it;
* a schema version (v3 ``schema_version``): that version of the subject;
* a schema text (v2 ``value_schema``, v3 ``schema``): parsed as the format's type, then
  looked up in the subject and registered there when absent (so the subject's
  compatibility rules apply);
* nothing (v3 only, with a ``type``): the subject's latest version.

Records are then encoded by :mod:`laketail.schemas.wire` into Confluent's wire format;
a null key or value stays null (kafka-rest with
``null.request.body.always.publish.empty.record``). Errors are kafka-rest's: a key or
value without a schema is 42201 / 42202, a schema text that is not one 42205, JSON the
schema does not take 42203, and the registry's refusals (unknown id, subject or version,
an incompatible schema) 42207 with the registry's message. Registering needs Write on
the ``Subject``, reading a schema Read (40301 otherwise).

Consumers of these formats decode each record by the schema id it carries
(:func:`decode`). The registry runs beside the coordinators (on the controller of a
cluster); a broker elsewhere resolves schemas in a follower's copy of ``__schemas``,
refreshed when it lacks what a request names (at most once a second: a schema
registered through another broker a moment ago may be 42207 until then), and
registers through the controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import orjson
import pyarrow as pa
from starlette.requests import Request

from laketail.api.authz import may
from laketail.api.fetch_body import encode_records
from laketail.api.services import services_of
from laketail.errors import RecordDeserializationError
from laketail.schemas import SchemaRegistry, wire
from laketail.schemas.errors import (
    InvalidEmbeddedSchema,
    InvalidSchema,
    KeySchemaMissing,
    SchemaRegistryError,
    SchemaSerialization,
    SubjectAuthorizationFailed,
    ValueSchemaMissing,
)
from laketail.security.acl import AclOperation, ResourceType

SchemaFormat = Literal["avro", "jsonschema", "protobuf"]
#: The registry's ``schemaType`` of each embedded format (and of v3's ``type``).
SCHEMA_TYPES: dict[str, str] = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}


@dataclass(frozen=True)
class ResolvedSchema:
    subject: str
    schema_id: int
    version: int
    codec: wire.Codec
    schema_type: str = "AVRO"  # the registry's schemaType

    def encode(self, doc: Any) -> bytes | None:
        return None if doc is None else wire.frame(self.schema_id, self.codec.encode(doc))


def registry_of(request: Request) -> SchemaRegistry:
    """The registry where it runs (a v2 consumer's poll: instances live beside it)."""
    request.app.state.broker.check_coordinating()
    return services_of(request).schemas


class _Registry:
    """The registry as a produce uses it: the broker's own where it runs; elsewhere a
    follower's copy of ``__schemas`` (:class:`laketail.schemas.validation.SchemaValidation`,
    refreshed when it has not seen an id or subject) for reads, and the controller's
    registry, over the cluster's link, to register."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.broker = request.app.state.broker
        self.services = services_of(request)
        self.here = self.broker.coordinators_loaded or len(self.services.cluster.image.brokers) <= 1
        self.state: SchemaRegistry = self.services.schemas

    async def view(self, fresh: bool = False, force: bool = False) -> SchemaRegistry:
        if self.here:
            self.broker.check_coordinating()
            return self.services.schemas
        copies = self.services.schema_copies
        assert copies is not None, "a broker of a cluster validates against a copy of __schemas"
        self.state = await copies.follower(fresh, force)
        return self.state

    async def register(self, subject: str, body: dict[str, Any]) -> int:
        if self.here:
            return await self.services.schemas.register(subject, body)
        from laketail.security.peers import peer_headers

        principal = self.request.scope.get("state", {}).get("principal")
        client = self.request.scope.get("client")
        headers = {"Content-Type": "application/vnd.schemaregistry.v1+json",
                   **peer_headers("", principal, client[0] if client else None)}
        resp = await self.services.cluster.call_controller_raw(
            "POST", f"/subjects/{quote(subject, safe='')}/versions", headers=headers, content=orjson.dumps(body))
        doc = resp.json() if resp.content else {}
        if resp.status_code != 200:
            raise SchemaSerialization(f"Error when registering schema. subject = {subject}: "
                                      f"{doc.get('message', resp.text)}; error code: {doc.get('error_code')}")
        await self.view(force=True)  # the new version, for the lookups that follow
        return int(doc["id"])


def subject_for(topic: str, is_key: bool) -> str:
    """TopicNameStrategy, Confluent's default."""
    return f"{topic}-{'key' if is_key else 'value'}"


def _check(request: Request, operation: AclOperation, subject: str) -> None:
    if not may(request, operation, ResourceType.SUBJECT, subject):
        raise SubjectAuthorizationFailed(f"not authorized to {operation.name.title()} subject '{subject}'")


def _codec_of(registry: SchemaRegistry, schema_id: int) -> wire.Codec:
    stored = registry.schema(schema_id)
    refs = tuple(registry.schema(registry.version(s, str(n), deleted=True).id).schema
                 for _, s, n in stored.references)
    return wire.codec(stored.schema_type, stored.schema, refs)


def _version_holding(registry: SchemaRegistry, subject: str, schema_id: int) -> int:
    for v in reversed(registry.versions_of_subject(subject)):
        if v.id == schema_id and not v.deleted:
            return v.version
    raise SchemaSerialization(f"Error when fetching schema version. subject = {subject}, "
                              f"schemaId = {schema_id}: Subject '{subject}' does not hold schema {schema_id}")


async def resolve(
    request: Request,
    topic: str,
    schema_type: str | None,
    is_key: bool,
    *,
    text: Any = None,
    schema_id: Any = None,
    subject: Any = None,
    version: Any = None,
) -> ResolvedSchema:
    """The schema a produce names for the key or the value (see the module docstring).
    ``schema_type`` is the registry's type of the format, None when the request names
    none (v3 with only an id or a version)."""
    access = _Registry(request)
    registry = await access.view()
    if subject is not None and (type(subject) is not str or not subject):
        raise InvalidEmbeddedSchema(f"subject must be a non-empty string, got {subject!r}")
    name = subject if subject is not None else subject_for(topic, is_key)
    try:
        if schema_id is not None:
            if type(schema_id) is not int:
                raise InvalidEmbeddedSchema(f"a schema id is an integer, got {schema_id!r}")
            _check(request, AclOperation.READ, name)
            try:
                if not access.here and schema_id not in {v.id for v in registry.versions_of_subject(name)}:
                    registry = await access.view(fresh=True)  # registered since the copy was loaded?
                codec = _codec_of(registry, schema_id)
            except SchemaRegistryError as exc:
                raise SchemaSerialization(f"Error when fetching schema by id. schemaId = {schema_id}: "
                                          f"{exc.message}") from exc
            return ResolvedSchema(name, schema_id, _version_holding(registry, name, schema_id), codec,
                                  registry.schema(schema_id).schema_type)
        if version is not None:
            if type(version) is not int:
                raise InvalidEmbeddedSchema(f"schema_version is an integer, got {version!r}")
            _check(request, AclOperation.READ, name)
            if not access.here:
                registry = await access.view(fresh=True)
            return _at_version(registry, name, str(version))
        if text is not None:
            if type(text) is not str or schema_type is None:
                raise InvalidEmbeddedSchema(f"a schema is a string of a format's schema type, got {text!r}")
            body: dict[str, Any] = {"schema": text}
            if schema_type != "AVRO":
                body["schemaType"] = schema_type
            try:
                wire.codec(schema_type, text)
            except InvalidSchema as exc:
                raise InvalidEmbeddedSchema(exc.message) from exc
            try:
                if not may(request, AclOperation.READ, ResourceType.SUBJECT, name):
                    raise SchemaSerialization("not looked up")  # registering answers the id
                found = registry.lookup(name, body)
                new_id, new_version = int(found["id"]), int(found["version"])
            except (SchemaRegistryError, SchemaSerialization):
                _check(request, AclOperation.WRITE, name)
                try:
                    new_id = await access.register(name, body)
                except SchemaRegistryError as exc:
                    raise SchemaSerialization(f"Error when registering schema. subject = {name}: "
                                              f"{exc.message}") from exc
                registry = access.state
                new_version = _version_holding(registry, name, new_id)
            return ResolvedSchema(name, new_id, new_version, _codec_of(registry, new_id), schema_type)
        _check(request, AclOperation.READ, name)
        if not access.here:
            registry = await access.view(fresh=True)
        return _at_version(registry, name, "latest")
    except InvalidEmbeddedSchema:
        raise
    except SchemaSerialization:
        raise
    except SchemaRegistryError as exc:
        raise SchemaSerialization(exc.message) from exc


def _at_version(registry: SchemaRegistry, subject: str, version: str) -> ResolvedSchema:
    try:
        v = registry.version(subject, version)
    except SchemaRegistryError as exc:
        raise SchemaSerialization(f"Error when fetching schema version. subject = {subject}, "
                                  f"version = {version}: {exc.message}") from exc
    return ResolvedSchema(subject, v.id, v.version, _codec_of(registry, v.id), registry.schema(v.id).schema_type)


def encode_column(docs: list[Any], schema: ResolvedSchema | None, is_key: bool) -> list[bytes | None]:
    """Each record's key or value JSON in the wire format; null stays null.
    KEY_SCHEMA_MISSING / VALUE_SCHEMA_MISSING when one is not null and there is no schema."""
    if schema is None:
        if any(d is not None for d in docs):
            raise (KeySchemaMissing("Request includes keys but does not include key schema") if is_key
                   else ValueSchemaMissing("Request includes values but does not include value schema"))
        return [None] * len(docs)
    return [schema.encode(d) for d in docs]


def decode(registry: SchemaRegistry, data: bytes | None) -> Any:
    """Framed bytes back to JSON by the schema id they carry (:class:`wire.NotDecodable`
    when they are not framed, name an unknown id, or do not decode)."""
    if data is None:
        return None
    schema_id = wire.schema_id_of(data)
    try:
        codec = _codec_of(registry, schema_id)
    except SchemaRegistryError as exc:
        raise wire.NotDecodable(f"schema id {schema_id}: {exc.message}") from exc
    return codec.decode(data[5:])


def schema_rows(registry: SchemaRegistry, topic: str, table: pa.Table) -> list:
    """One partition's rows for a v2 consumer of a schema'd format (a piece of
    :func:`laketail.api.fetch_body.body`): key and value decoded to JSON. A record that
    does not decode is RECORD_DESERIALIZATION_ERROR naming it (the consumer stays on it)."""
    records, _ = encode_records(topic, table, "binary")  # offsets, timestamps, headers
    for field in ("key", "value"):
        for record, data in zip(records, table.column(field).to_pylist()):
            try:
                record[field] = decode(registry, data)
            except wire.NotDecodable as exc:
                partition, offset = record["partition"], record["offset"]
                raise RecordDeserializationError(
                    f"the {field} of the record at offset {offset} of {topic}-{partition} does not "
                    f"decode ({exc}); the consumer stays on it: seek past it, or read it as binary",
                    topic=topic, partition=partition, offset=offset, field=field,
                ) from exc
    return [orjson.dumps(records)[1:-1] + b","] if records else []


# -- v3 produce: {"type": "AVRO"|"JSONSCHEMA"|"PROTOBUF", "schema"|"schema_id"|..., "data"} ----

#: v3's ``type`` of each schema'd format, and back from the registry's ``schemaType``.
V3_TYPES: dict[str, str] = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF"}
_V3_NAMES = {v: k for k, v in V3_TYPES.items()}
_V3_SCHEMA_FIELDS = ("schema", "schema_id", "schema_version", "subject", "subject_name_strategy")


@dataclass(frozen=True)
class V3Data:
    """A v3 key or value encoded by its schema, and what the answer reports of it."""

    data: bytes | None
    v3_type: str
    schema: ResolvedSchema

    def report(self) -> dict[str, Any]:
        return {"type": self.v3_type, "subject": self.schema.subject, "schema_id": self.schema.schema_id,
                "schema_version": self.schema.version, "size": len(self.data) if self.data else 0}


async def v3_data(request: Request, topic: str, doc: Any, is_key: bool) -> V3Data | None:
    """The key or value object of a v3 record when it is schema'd (a ``type`` of AVRO,
    JSONSCHEMA or PROTOBUF, or no type and a schema id, version or subject), encoded;
    None for the schemaless types (:func:`laketail.api.encoding.decode_typed`).

    As kafka-rest's ``SchemaManagerImpl``: ``schema_id`` or ``schema_version`` take no
    ``type`` (the schema's is used), ``schema`` needs one, a ``type`` alone is the
    subject's latest version. ``subject_name_strategy`` other than TOPIC_NAME is refused
    (limitation: RECORD_NAME and TOPIC_RECORD_NAME are not served)."""
    from laketail.errors import InvalidRequest

    if type(doc) is not dict:
        return None
    kind = doc.get("type")
    named = str(kind).upper() if kind is not None else None
    if named not in V3_TYPES and (kind is not None or not any(doc.get(f) is not None for f in _V3_SCHEMA_FIELDS)):
        return None
    strategy = doc.get("subject_name_strategy")
    if strategy is not None and str(strategy).upper() != "TOPIC_NAME":
        raise InvalidRequest(f"Unsupported argument: subject_name_strategy {strategy!r}; laketail takes TOPIC_NAME")
    if kind is not None and (doc.get("schema_id") is not None or doc.get("schema_version") is not None):
        raise InvalidRequest("Unsupported argument: a schema_id or schema_version takes no type")
    if kind is None and doc.get("schema") is not None:
        raise InvalidRequest("Unsupported argument: a schema needs its type")
    if doc.get("schema_id") is not None and doc.get("schema_version") is not None:
        raise InvalidRequest("Unsupported argument: name either schema_id or schema_version")
    resolved = await resolve(
        request, topic, V3_TYPES.get(named or ""), is_key, text=doc.get("schema"),
        schema_id=doc.get("schema_id"), subject=doc.get("subject"), version=doc.get("schema_version"),
    )
    return V3Data(resolved.encode(doc.get("data")), _V3_NAMES[resolved.schema_type], resolved)
