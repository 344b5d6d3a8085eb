"""Kafka's ACL APIs: DescribeAcls, CreateAcls, DeleteAcls (v1-3).

They read and change the :class:`~laketail.security.authorizer.Authorizer`'s store
(``matching``, ``create``, ``delete``), the one v3's ``/acls`` routes change, with the
same audit lines. SECURITY_DISABLED when no authorizer is configured. Resource types,
pattern types, operations and permissions travel as Kafka's int8 codes
(:mod:`laketail.kafka.acl_codes`); laketail has no DELEGATION_TOKEN or USER resources
(INVALID_REQUEST). A creation that does not validate is refused alone; the others are
stored together.

Authorization, as Kafka's ``AclAuthorizer``: DescribeAcls needs Describe on the cluster,
CreateAcls and DeleteAcls Alter on the cluster.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from laketail.errors import InvalidRequest, LaketailError, SecurityDisabled
from laketail.kafka.acl_codes import (
    CODE,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
)
from laketail.kafka.apis import (
    CLUSTER_AUTHORIZATION_FAILED,
    ApiPart,
    Session,
    error_code,
    error_message,
)
from laketail.kafka.protocol import Request
from laketail.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
)
from laketail.security.principal import KafkaPrincipal

Op, R = AclOperation, ResourceType


class AclApis(ApiPart):
    """The three ACL APIs of one Kafka listener (see the module docstring).
    Stateless; event loop thread only."""

    @property
    def handlers(self) -> dict[int, Callable[[Request, Session], Awaitable[dict]]]:
        return {29: self.describe_acls, 30: self.create_acls, 31: self.delete_acls}

    def _acl_refusal(self, session: Session, op: AclOperation) -> tuple[int, str | None] | None:
        if not self.authorizer.enabled:
            exc = SecurityDisabled("no authorizer is configured on the broker (authorizer.class.name is empty)")
            return exc.kafka_code, exc.message
        if not self._allowed(session, op, R.CLUSTER):
            return CLUSTER_AUTHORIZATION_FAILED, None
        return None

    async def describe_acls(self, request: Request, session: Session) -> dict:
        out: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": []}
        if refusal := self._acl_refusal(session, Op.DESCRIBE):
            return {**out, "error_code": refusal[0], "error_message": refusal[1]}
        try:
            selector = _filter(request.body)
        except LaketailError as exc:
            return {**out, "error_code": exc.kafka_code, "error_message": exc.message}
        by_resource: dict[tuple, list[dict]] = {}
        for b in self.authorizer.matching(selector):
            p, e = b.pattern, b.entry
            by_resource.setdefault((CODE[p.resource_type], p.name, CODE[p.pattern_type]), []).append(
                {"principal": e.principal, "host": e.host, "operation": CODE[e.operation],
                 "permission_type": CODE[e.permission]})
        out["resources"] = [{"resource_type": t, "resource_name": n, "pattern_type": pt, "acls": acls}
                            for (t, n, pt), acls in by_resource.items()]
        return out

    async def create_acls(self, request: Request, session: Session) -> dict:
        creations = request.body.creations
        if refusal := self._acl_refusal(session, Op.ALTER):
            return {"throttle_time": 0, "results": [
                {"error_code": refusal[0], "error_message": refusal[1]} for _ in creations]}
        results: list[dict] = []
        valid: list[AclBinding] = []
        for c in creations:
            try:
                valid.append(AclBinding.of(
                    _enum(RESOURCE_TYPES, c.resource_type, "resource type"), c.resource_name,
                    _enum(PATTERN_TYPES, getattr(c, "resource_pattern_type", 3), "pattern type"),
                    c.principal, c.host, _enum(OPERATIONS, c.operation, "operation"),
                    _enum(PERMISSIONS, c.permission_type, "permission type")))
                results.append({"error_code": 0, "error_message": None})
            except LaketailError as exc:
                results.append({"error_code": exc.kafka_code, "error_message": exc.message})
        if valid:
            try:
                await self.authorizer.create(valid, session.principal, session.host)
            except Exception as exc:  # noqa: BLE001 - the valid ones were one write
                code, message = error_code(exc), error_message(exc)
                results = [r if r["error_code"] else {"error_code": code, "error_message": message} for r in results]
        return {"throttle_time": 0, "results": results}

    async def delete_acls(self, request: Request, session: Session) -> dict:
        filters = request.body.filters
        if refusal := self._acl_refusal(session, Op.ALTER):
            return {"throttle_time": 0, "filter_results": [
                {"error_code": refusal[0], "error_message": refusal[1], "matching_acls": []} for _ in filters]}
        results: list[dict[str, Any]] = []
        for f in filters:
            try:
                removed = await self.authorizer.delete(_filter(f), session.principal, session.host)
            except Exception as exc:  # noqa: BLE001 - answered as the filter's error code
                results.append({"error_code": error_code(exc), "error_message": error_message(exc),
                                "matching_acls": []})
                continue
            results.append({"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None, "resource_type": CODE[b.pattern.resource_type],
                 "resource_name": b.pattern.name, "pattern_type": CODE[b.pattern.pattern_type],
                 "principal": b.entry.principal, "host": b.entry.host, "operation": CODE[b.entry.operation],
                 "permission_type": CODE[b.entry.permission]} for b in removed]})
        return {"throttle_time": 0, "filter_results": results}


def _enum(table: dict[int, Any], code: int, what: str) -> Any:
    found = table.get(code)
    if found is None:
        raise InvalidRequest(f"{what} {code} is not one laketail's ACLs have ({sorted(table)})")
    return found


def _filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter as the ACL store's filter."""
    principal = f.principal_filter
    if principal is not None:
        principal = str(KafkaPrincipal.parse(principal))
    return AclBindingFilter(
        resource_type=_enum(RESOURCE_TYPES, f.resource_type_filter, "resource type"),
        name=f.resource_name_filter,
        pattern_type=_enum(PATTERN_TYPES, getattr(f, "pattern_type_filter", 3), "pattern type"),
        principal=principal,
        host=f.host_filter,
        operation=_enum(OPERATIONS, f.operation, "operation"),
        permission=_enum(PERMISSIONS, f.permission_type, "permission type"),
    )
