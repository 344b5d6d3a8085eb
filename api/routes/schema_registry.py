"""Confluent Schema Registry's REST API, served by the broker.

The paths, bodies, status codes and ``error_code`` values are Confluent Schema
Registry's (``/subjects``, ``/schemas/ids/{id}``, ``/config``, ``/mode``,
``/compatibility``); answers carry ``application/vnd.schemaregistry.v1+json``, and
requests are read as JSON whatever their content type (``application/json``, the
registry's own type, or none), as Confluent's clients send either. Booleans in the
query accept ``true``/``True`` (the Python client sends ``normalize=False``).

The registry's state is :class:`laketail.schemas.SchemaRegistry` on
``broker.schemas`` (the ``__schemas`` topic); in a cluster it runs on the controller
beside the coordinators, and :mod:`laketail.api.coordinator_proxy` forwards these paths
there. Authorization: the route table (:mod:`laketail.api.acl_rules`) maps Confluent's
``Subject`` resource onto laketail's ``Subject`` ACL resource type; ``/schemas/ids``
routes check here that the principal may Read one subject holding the schema.

``normalize`` is accepted and ignored: the canonical text is compared (limitation).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.authz import may, may_describe
from laketail.api.deps import json_response, parse_json, query_of, read_body
from laketail.api.services import services_of
from laketail.schemas import SchemaRegistry
from laketail.schemas.compatibility import SCHEMA_TYPES
from laketail.schemas.errors import SchemaNotFound, SubjectAuthorizationFailed
from laketail.security.acl import AclOperation, ResourceType

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"

router = APIRouter(tags=["schema registry"])


def _body_doc(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The OpenAPI description of a JSON body the route reads itself."""
    schema = {"type": "object", "properties": properties, "required": required}
    return {"requestBody": {"required": True, "content": {
        MEDIA_TYPE: {"schema": schema}, "application/json": {"schema": schema}}}}


_REFERENCE = {"type": "object", "properties": {
    "name": {"type": "string"}, "subject": {"type": "string"}, "version": {"type": "integer"}}}
SCHEMA_BODY = _body_doc({
    "schema": {"type": "string"}, "schemaType": {"type": "string", "enum": ["AVRO", "JSON", "PROTOBUF"]},
    "references": {"type": "array", "items": _REFERENCE},
    "id": {"type": "integer", "description": "IMPORT mode only"},
    "version": {"type": "integer", "description": "IMPORT mode only"},
}, ["schema"])
CONFIG_BODY = _body_doc({"compatibility": {"type": "string", "enum": [
    "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE"]}},
    ["compatibility"])
MODE_BODY = _body_doc({"mode": {"type": "string", "enum": ["READWRITE", "READONLY", "IMPORT"]}}, ["mode"])


def _registry(request: Request) -> SchemaRegistry:
    return services_of(request).schemas


def _answer(doc: Any) -> Response:
    return json_response(doc, media_type=MEDIA_TYPE)


def _flag(request: Request, name: str) -> bool:
    return str(query_of(request).get(name, "false")).lower() == "true"


async def _body(request: Request) -> Any:
    return parse_json(await read_body(request))


def _schema_id(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise SchemaNotFound(f"Schema {raw} not found") from None


def _readable_versions(request: Request, schema_id: int, deleted: bool = False) -> list:
    """The id's versions in subjects the principal may Read; SUBJECT authorization
    failure when it holds versions but none readable (Confluent's RBAC rule for ids)."""
    versions = _registry(request).versions_of_id(schema_id, deleted=True)
    readable = [v for v in versions if may(request, AclOperation.READ, ResourceType.SUBJECT, v.subject)]
    if versions and not readable:
        raise SubjectAuthorizationFailed(f"not authorized to Read any subject of schema {schema_id}")
    return [v for v in readable if deleted or not v.deleted]


# -- schemas ---------------------------------------------------------------------------------

@router.get("/schemas/types", summary="The schema types the registry accepts")
async def schema_types() -> Response:
    return _answer(list(SCHEMA_TYPES))


@router.get("/schemas/ids/{schema_id}", summary="A schema by its global id")
async def schema_by_id(request: Request, schema_id: str) -> Response:
    sid = _schema_id(schema_id)
    _readable_versions(request, sid, deleted=True)
    return _answer(_registry(request).schema(sid).to_body())


@router.get("/schemas/ids/{schema_id}/schema", summary="The raw schema text of an id")
async def raw_schema_by_id(request: Request, schema_id: str) -> Response:
    sid = _schema_id(schema_id)
    _readable_versions(request, sid, deleted=True)
    return Response(_registry(request).schema(sid).schema, media_type=MEDIA_TYPE)


@router.get("/schemas/ids/{schema_id}/versions", summary="The (subject, version) pairs of an id")
async def versions_of_id(request: Request, schema_id: str) -> Response:
    found = _readable_versions(request, _schema_id(schema_id), _flag(request, "deleted"))
    return _answer([{"subject": v.subject, "version": v.version} for v in found])


@router.get("/schemas/ids/{schema_id}/subjects", summary="The subjects holding an id")
async def subjects_of_id(request: Request, schema_id: str) -> Response:
    found = _readable_versions(request, _schema_id(schema_id), _flag(request, "deleted"))
    return _answer(sorted({v.subject for v in found}))


# -- subjects and versions -------------------------------------------------------------------

@router.get("/subjects", summary="Subjects (those the principal may Describe)")
async def list_subjects(request: Request) -> Response:
    prefix = str(query_of(request).get("subjectPrefix", ""))
    names = _registry(request).subjects(deleted=_flag(request, "deleted"))
    return _answer([s for s in names if s.startswith(prefix) and may_describe(request, ResourceType.SUBJECT, s)])


@router.post("/subjects/{subject}", summary="Look up a schema under a subject", openapi_extra=SCHEMA_BODY)
async def lookup_schema(request: Request, subject: str) -> Response:
    body = await _body(request)
    return _answer(_registry(request).lookup(subject, body, deleted=_flag(request, "deleted")))


@router.delete("/subjects/{subject}", summary="Delete a subject (soft; permanent=true: hard)")
async def delete_subject(request: Request, subject: str) -> Response:
    return _answer(await _registry(request).delete_subject(subject, permanent=_flag(request, "permanent")))


@router.get("/subjects/{subject}/versions", summary="A subject's versions")
async def list_versions(request: Request, subject: str) -> Response:
    return _answer(_registry(request).versions(subject, deleted=_flag(request, "deleted")))


@router.post("/subjects/{subject}/versions", summary="Register a schema under a subject", openapi_extra=SCHEMA_BODY)
async def register(request: Request, subject: str) -> Response:
    body = await _body(request)
    return _answer({"id": await _registry(request).register(subject, body)})


@router.get("/subjects/{subject}/versions/{version}", summary="One version (a number or latest)")
async def get_version(request: Request, subject: str, version: str) -> Response:
    registry = _registry(request)
    return _answer(registry.describe(registry.version(subject, version, deleted=_flag(request, "deleted"))))


@router.get("/subjects/{subject}/versions/{version}/schema", summary="One version's raw schema text")
async def get_version_schema(request: Request, subject: str, version: str) -> Response:
    registry = _registry(request)
    v = registry.version(subject, version, deleted=_flag(request, "deleted"))
    return Response(registry.schema(v.id).schema, media_type=MEDIA_TYPE)


@router.get("/subjects/{subject}/versions/{version}/referencedby", summary="Ids of schemas referencing a version")
async def referenced_by(request: Request, subject: str, version: str) -> Response:
    return _answer(_registry(request).referenced_by(subject, version))


@router.delete("/subjects/{subject}/versions/{version}", summary="Delete a version (soft; permanent=true: hard)")
async def delete_version(request: Request, subject: str, version: str) -> Response:
    return _answer(await _registry(request).delete_version(subject, version, permanent=_flag(request, "permanent")))


# -- compatibility ---------------------------------------------------------------------------

def _compatibility_answer(request: Request, problems: list[str]) -> Response:
    doc: dict[str, Any] = {"is_compatible": not problems}
    if _flag(request, "verbose"):
        doc["messages"] = problems
    return _answer(doc)


@router.post("/compatibility/subjects/{subject}/versions/{version}", summary="Test against one version",
             openapi_extra=SCHEMA_BODY)
async def test_compatibility(request: Request, subject: str, version: str) -> Response:
    body = await _body(request)
    return _compatibility_answer(request, _registry(request).test_compatibility(subject, body, version))


@router.post("/compatibility/subjects/{subject}/versions", summary="Test against the versions the level compares",
             openapi_extra=SCHEMA_BODY)
async def test_compatibility_all(request: Request, subject: str) -> Response:
    body = await _body(request)
    return _compatibility_answer(request, _registry(request).test_compatibility(subject, body, None))


# -- config and mode -------------------------------------------------------------------------

def _field(body: Any, name: str) -> Any:
    return body.get(name) if isinstance(body, dict) else None


@router.get("/config", summary="The global compatibility level")
async def get_global_config(request: Request) -> Response:
    return _answer({"compatibilityLevel": _registry(request).compatibility(None)})


@router.put("/config", summary="Set the global compatibility level", openapi_extra=CONFIG_BODY)
async def put_global_config(request: Request) -> Response:
    level = await _registry(request).set_compatibility(None, _field(await _body(request), "compatibility"))
    return _answer({"compatibility": level})


@router.delete("/config", summary="Reset the global compatibility level to BACKWARD")
async def delete_global_config(request: Request) -> Response:
    return _answer({"compatibilityLevel": await _registry(request).delete_compatibility(None)})


@router.get("/config/{subject}", summary="A subject's compatibility level")
async def get_subject_config(request: Request, subject: str) -> Response:
    level = _registry(request).compatibility(subject, default_to_global=_flag(request, "defaultToGlobal"))
    return _answer({"compatibilityLevel": level})


@router.put("/config/{subject}", summary="Set a subject's compatibility level", openapi_extra=CONFIG_BODY)
async def put_subject_config(request: Request, subject: str) -> Response:
    level = await _registry(request).set_compatibility(subject, _field(await _body(request), "compatibility"))
    return _answer({"compatibility": level})


@router.delete("/config/{subject}", summary="Remove a subject's compatibility level")
async def delete_subject_config(request: Request, subject: str) -> Response:
    return _answer({"compatibilityLevel": await _registry(request).delete_compatibility(subject)})


@router.get("/mode", summary="The global mode")
async def get_global_mode(request: Request) -> Response:
    return _answer({"mode": _registry(request).mode(None)})


@router.put("/mode", summary="Set the global mode (READWRITE, READONLY, IMPORT)", openapi_extra=MODE_BODY)
async def put_global_mode(request: Request) -> Response:
    mode = await _registry(request).set_mode(None, _field(await _body(request), "mode"), _flag(request, "force"))
    return _answer({"mode": mode})


@router.get("/mode/{subject}", summary="A subject's mode")
async def get_subject_mode(request: Request, subject: str) -> Response:
    return _answer({"mode": _registry(request).mode(subject, default_to_global=_flag(request, "defaultToGlobal"))})


@router.put("/mode/{subject}", summary="Set a subject's mode", openapi_extra=MODE_BODY)
async def put_subject_mode(request: Request, subject: str) -> Response:
    registry = _registry(request)
    mode = await registry.set_mode(subject, _field(await _body(request), "mode"), _flag(request, "force"))
    return _answer({"mode": mode})


@router.delete("/mode/{subject}", summary="Remove a subject's mode")
async def delete_subject_mode(request: Request, subject: str) -> Response:
    return _answer({"mode": await _registry(request).delete_mode(subject)})
