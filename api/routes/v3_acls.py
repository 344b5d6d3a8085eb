"""Confluent v3 ACLs: ``GET|POST|DELETE /v3/clusters/{cluster_id}/acls`` and ``POST .../acls:batch``.

Kafka's DescribeAcls, CreateAcls and DeleteAcls over REST, with Confluent's shapes:

* ``GET`` takes the filter as query parameters (``resource_type``, ``resource_name``,
  ``pattern_type``, ``principal``, ``host``, ``operation``, ``permission``; an absent
  one matches anything, ``ANY`` too; ``pattern_type=MATCH`` selects every ACL that
  applies to ``resource_name``) and answers a ``KafkaAclList``;
* ``POST`` takes one ACL ``{resource_type, resource_name, pattern_type, principal,
  host, operation, permission}`` (201, no body); ``acls:batch`` takes ``{"data": [...]}``
  of them (204), all validated before any is stored;
* ``DELETE`` takes the same filter as ``GET`` (``resource_type`` required, so an empty
  query never deletes every ACL) and answers ``{"data": [...]}``, the deleted ACLs.

Enum values are Kafka's names in capitals (``TOPIC``, ``PREFIXED``, ``READ``,
``ALLOW``). The route table requires Describe on the cluster to list and Alter on the
cluster to change; every change is an audit line (:mod:`laketail.security.authorizer`).
With authorization off these answer SECURITY_DISABLED.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.authz import acting, authorizer_of
from laketail.api.deps import broker_of, check_cluster, json_response, parse_json, read_body
from laketail.api.routes.clusters import cluster_url, list_metadata
from laketail.errors import InvalidRequest, SecurityDisabled
from laketail.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from laketail.security.authorizer import Authorizer
from laketail.security.principal import KafkaPrincipal

router = APIRouter(tags=["v3 acls"])
PATH = "/v3/clusters/{cluster_id}/acls"
_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")


def _authorizer(request: Request, cluster_id: str) -> Authorizer:
    check_cluster(broker_of(request), cluster_id)
    authorizer = authorizer_of(request)
    if not authorizer.enabled:
        raise SecurityDisabled("no authorizer is configured on the broker (authorizer.class.name is empty)")
    return authorizer


def acl_doc(request: Request, cluster_id: str, b: AclBinding) -> dict:
    p, e = b.pattern, b.entry
    return {
        "kind": "KafkaAcl",
        "metadata": {"self": f"{cluster_url(request, cluster_id)}/acls?resource_type={p.resource_type.name}"
                             f"&resource_name={p.name}&pattern_type={p.pattern_type.name}&principal={e.principal}"
                             f"&host={e.host}&operation={e.operation.name}&permission={e.permission.name}"},
        "cluster_id": cluster_id,
        "resource_type": p.resource_type.name,
        "resource_name": p.name,
        "pattern_type": p.pattern_type.name,
        "principal": e.principal,
        "host": e.host,
        "operation": e.operation.name,
        "permission": e.permission.name,
    }


def filter_of(request: Request, require_type: bool = False) -> AclBindingFilter:
    """The query parameters as Kafka's AclBindingFilter."""
    q = request.query_params
    unknown = set(q) - set(_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown query parameters {sorted(unknown)}; the filter takes {list(_FIELDS)}")
    if require_type and not q.get("resource_type"):
        raise InvalidRequest("resource_type is required to delete ACLs (ANY for every type)")
    principal = q.get("principal") or None
    if principal is not None:
        principal = str(KafkaPrincipal.parse(principal))
    return AclBindingFilter(
        resource_type=ResourceType.parse(q.get("resource_type") or "ANY", "resource_type"),
        name=q.get("resource_name") or None,
        pattern_type=PatternType.parse(q.get("pattern_type") or "ANY", "pattern_type"),
        principal=principal,
        host=q.get("host") or None,
        operation=AclOperation.parse(q.get("operation") or "ANY", "operation"),
        permission=AclPermissionType.parse(q.get("permission") or "ANY", "permission"),
    )


def binding_of(doc: object) -> AclBinding:
    """One CreateAclRequest body, strictly: every field present, nothing else."""
    if not isinstance(doc, dict):
        raise InvalidRequest("an ACL is a JSON object with " + ", ".join(_FIELDS))
    missing = [f for f in _FIELDS if f not in doc]
    extra = sorted(set(doc) - set(_FIELDS))
    if missing or extra:
        raise InvalidRequest(f"an ACL needs exactly {list(_FIELDS)}; missing {missing}, unknown {extra}")
    return AclBinding.of(*(doc[f] for f in _FIELDS))


@router.get(PATH, summary="Search ACLs (DescribeAcls)")
async def list_acls(request: Request, cluster_id: str) -> Response:
    authorizer = _authorizer(request, cluster_id)
    selector = filter_of(request)
    return json_response({
        "kind": "KafkaAclList",
        "metadata": list_metadata(str(request.url)),
        "data": [acl_doc(request, cluster_id, b) for b in authorizer.matching(selector)],
    })


@router.post(PATH, status_code=201, summary="Create an ACL (CreateAcls)")
async def create_acl(request: Request, cluster_id: str) -> Response:
    authorizer = _authorizer(request, cluster_id)
    binding = binding_of(parse_json(await read_body(request)))
    await authorizer.create([binding], *acting(request))
    return Response(status_code=201)


@router.post(PATH + ":batch", status_code=204, summary="Create several ACLs (CreateAcls)")
async def create_acls(request: Request, cluster_id: str) -> Response:
    authorizer = _authorizer(request, cluster_id)
    doc = parse_json(await read_body(request))
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list) or set(doc) != {"data"}:
        raise InvalidRequest('the body is {"data": [ACL, ...]}')
    bindings = [binding_of(item) for item in doc["data"]]  # all valid before any is stored
    await authorizer.create(bindings, *acting(request))
    return Response(status_code=204)


@router.delete(PATH, summary="Delete the ACLs the filter matches (DeleteAcls); answers them")
async def delete_acls(request: Request, cluster_id: str) -> Response:
    authorizer = _authorizer(request, cluster_id)
    selector = filter_of(request, require_type=True)
    removed = await authorizer.delete(selector, *acting(request))
    return json_response({"data": [acl_doc(request, cluster_id, b) for b in removed]})
