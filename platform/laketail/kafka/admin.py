"""Kafka's admin APIs for configs, groups, the cluster and ACLs.

Each calls what the v3 routes call: ``Broker.describe_configs`` and
``Broker.alter_topic_configs`` (topic configs), the broker's settings (broker configs,
read-only as on v3), ``GroupCoordinator.delete`` and ``OffsetStore.delete`` (groups and
their offsets), and the :class:`~laketail.security.authorizer.Authorizer`'s ACL store
(``matching``, ``create``, ``delete``, with its audit lines).

* DescribeConfigs v1-4: TOPIC (2) and BROKER (4) resources; a broker resource names this
  broker's id (or is empty). Broker configs are static in laketail: every one is
  read-only, and AlterConfigs / IncrementalAlterConfigs on a broker answer INVALID_REQUEST.
* AlterConfigs v0-2 replaces a topic's whole set of overrides (Kafka's legacy
  semantics: a key left out returns to its default); IncrementalAlterConfigs v0-1 sets
  (0), deletes (1), appends to (2) or subtracts from (3) one key at a time; APPEND and
  SUBTRACT apply to list configs (``cleanup.policy``) only. ``validate_only`` checks
  everything and writes nothing.
* DeleteGroups v0-2, OffsetDelete v0: NON_EMPTY_GROUP while the group has members;
  OffsetDelete refuses (GROUP_SUBSCRIBED_TO_TOPIC) a topic a member is subscribed to.
* DescribeCluster v0-1: the brokers Metadata lists (this one); the controller endpoint
  type (2) is UNSUPPORTED_ENDPOINT_TYPE.
* DescribeAcls, CreateAcls, DeleteAcls v1-3: SECURITY_DISABLED when no authorizer is
  configured. Resource types, pattern types, operations and permissions are Kafka's
  int8 codes; laketail has no DELEGATION_TOKEN or USER resources (INVALID_REQUEST).

Authorization, as Kafka's ``AclAuthorizer`` per API: DescribeConfigs DescribeConfigs
and the Alter APIs AlterConfigs, on the topic or (broker resources) the cluster;
DeleteGroups Delete on each group; OffsetDelete Delete on the group and Read on each
topic; DescribeAcls Describe on the cluster, CreateAcls and DeleteAcls Alter on the
cluster; DescribeCluster needs nothing, its authorized operations need Describe on the
cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from laketail.catalog import check_not_internal
from laketail.config import _BROKER_KEYS, SENSITIVE_BROKER_KEYS, TOPIC_CONFIGS, BrokerSettings
from laketail.errors import InvalidConfig, InvalidRequest, LaketailError, SecurityDisabled
from laketail.kafka.acl_codes import (
    CODE,
    NOT_ASKED,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    authorized_operations,
)
from laketail.kafka.apis import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    NOT_COORDINATOR,
    TOPIC_AUTHORIZATION_FAILED,
    Session,
    error_code,
)
from laketail.kafka.protocol import Request
from laketail.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
)
from laketail.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from laketail.kafka.apis import KafkaApis

Op, R = AclOperation, ResourceType
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNSUPPORTED_ENDPOINT_TYPE = 119
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4

# DescribeConfigs: ConfigSource and ConfigType codes
_SOURCES = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}
_BOOLEAN, _STRING, _INT, _LONG, _LIST = 1, 2, 3, 5, 7
_INT_CONFIGS = frozenset({"segment.bytes", "max.message.bytes", "min.insync.replicas"})
_LIST_CONFIGS = frozenset({"cleanup.policy"})
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _config_type(name: str) -> int:
    spec = TOPIC_CONFIGS.get(name)
    if spec is None:
        return 0
    if name in _LIST_CONFIGS:
        return _LIST
    if spec.type is bool:
        return _BOOLEAN
    if spec.type is int:
        return _INT if name in _INT_CONFIGS else _LONG
    return _STRING


def broker_configs(settings: BrokerSettings) -> list[tuple[str, str | None, bool, bool]]:
    """``(kafka key, value, is_default, is_sensitive)`` of every broker setting (the
    first key of aliases), as v3's ``/brokers/{id}/configs`` shows them."""
    defaults = BrokerSettings()
    seen, out = set(), []
    for key, attr in _BROKER_KEYS.items():
        if attr in seen:
            continue
        seen.add(attr)
        value = getattr(settings, attr)
        text = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        sensitive = key in SENSITIVE_BROKER_KEYS
        out.append((key, None if sensitive else text, value == getattr(defaults, attr), sensitive))
    return out


def _message(exc: BaseException) -> str | None:
    return exc.message if isinstance(exc, LaketailError) else None


class AdminApis:
    """Configs, groups, cluster and ACL admin APIs of one Kafka listener (see the module
    docstring). Stateless; event loop thread only."""

    def __init__(self, apis: "KafkaApis") -> None:
        self.broker = apis.broker
        self.authorizer = apis.authorizer
        self.coordinates = apis.coordinates
        self.brokers = apis.brokers

    @property
    def handlers(self) -> dict[int, Callable[[Request, Session], Awaitable[dict]]]:
        return {29: self.describe_acls, 30: self.create_acls, 31: self.delete_acls, 32: self.describe_configs,
                33: self.alter_configs, 42: self.delete_groups, 44: self.incremental_alter_configs,
                47: self.offset_delete, 60: self.describe_cluster}

    def _allowed(self, session: Session, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return self.authorizer.authorize(session.principal, session.host, op, rtype, name)

    # -- configs ---------------------------------------------------------------------------------

    def _resource_denied(self, session: Session, rtype: int, name: str, op: AclOperation) -> dict | None:
        """The error of a config resource the request may not touch, or None."""
        if rtype == TOPIC_RESOURCE:
            if not self._allowed(session, op, R.TOPIC, name):
                return {"error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": None}
        elif rtype == BROKER_RESOURCE:
            if not self._allowed(session, op, R.CLUSTER):
                return {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
            if name not in ("", str(self.broker.broker_id)):
                return {"error_code": INVALID_REQUEST,
                        "error_message": f"this is broker {self.broker.broker_id}; ask broker {name} for its configs"}
        else:
            return {"error_code": INVALID_REQUEST,
                    "error_message": f"config resource type {rtype} is not served (TOPIC 2, BROKER 4)"}
        return None

    async def describe_configs(self, request: Request, session: Session) -> dict:
        body = request.body
        results = []
        for res in body.resources:
            out: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
                                   "resource_name": res.resource_name, "configs": []}
            denied = self._resource_denied(session, res.resource_type, res.resource_name, Op.DESCRIBE_CONFIGS)
            if denied:
                results.append({**out, **denied})
                continue
            wanted = set(res.configuration_keys) if res.configuration_keys else None  # null or []: all
            try:
                out["configs"] = [c for c in self._configs(res.resource_type, res.resource_name, body)
                                  if wanted is None or c["name"] in wanted]
            except Exception as exc:  # noqa: BLE001 - answered as the resource's error code
                out.update(error_code=error_code(exc), error_message=_message(exc))
            results.append(out)
        return {"throttle_time": 0, "results": results}

    def _configs(self, rtype: int, name: str, body: Any) -> list[dict]:
        synonyms = getattr(body, "include_synonyms", False)
        docs = getattr(body, "include_documentation", False)
        out = []
        if rtype == TOPIC_RESOURCE:
            for e in self.broker.describe_configs(name):  # UNKNOWN_TOPIC_OR_PARTITION
                source = _SOURCES.get(e.source, 0)
                out.append({"name": e.name, "value": e.value, "read_only": e.read_only, "is_default": e.is_default,
                            "config_source": source, "is_sensitive": e.sensitive, "config_type": _config_type(e.name),
                            "documentation": e.doc if docs else None,
                            "synonyms": [{"name": e.name, "value": e.value, "source": source}] if synonyms else []})
        else:
            for key, value, is_default, sensitive in broker_configs(self.broker.settings):
                source = _SOURCES["DEFAULT_CONFIG" if is_default else "STATIC_BROKER_CONFIG"]
                out.append({"name": key, "value": value, "read_only": True, "is_default": is_default,
                            "config_source": source, "is_sensitive": sensitive, "config_type": 0,
                            "documentation": None,
                            "synonyms": [{"name": key, "value": value, "source": source}] if synonyms else []})
        return out

    async def alter_configs(self, request: Request, session: Session) -> dict:
        body = request.body
        responses = []
        for res in body.resources:
            new: dict[str, str] = {c.name: c.value for c in res.configs}

            def replace(current: dict[str, str], new: dict[str, str] = new) -> tuple[dict[str, str], list[str]]:
                return new, sorted(set(current) - set(new))

            responses.append(await self._alter(session, res.resource_type, res.resource_name, body.validate_only,
                                               replace))
        return {"throttle_time": 0, "responses": responses}

    async def incremental_alter_configs(self, request: Request, session: Session) -> dict:
        body = request.body
        responses = []
        for res in body.resources:
            ops = [(c.name, c.config_operation, c.value) for c in res.configs]

            def apply(current: dict[str, str], ops: list = ops, name: str = res.resource_name,
                      ) -> tuple[dict[str, str], list[str]]:
                return self._incremental(name, ops)

            responses.append(await self._alter(session, res.resource_type, res.resource_name, body.validate_only,
                                               apply))
        return {"throttle_time": 0, "responses": responses}

    def _incremental(self, topic: str, ops: list[tuple[str, int, str | None]]) -> tuple[dict[str, str], list[str]]:
        """(configs to set, keys to delete) for IncrementalAlterConfigs' operations."""
        if len({name for name, _, _ in ops}) != len(ops):
            raise InvalidRequest("a config key appears more than once in one resource")
        effective = {e.name: e.value for e in self.broker.describe_configs(topic)}
        to_set: dict[str, str] = {}
        to_delete: list[str] = []
        for name, op, value in ops:
            if op == SET:
                if value is None:
                    raise InvalidConfig(f"SET {name} needs a value")
                to_set[name] = value
            elif op == DELETE:
                to_delete.append(name)
            elif op in (APPEND, SUBTRACT):
                if name not in _LIST_CONFIGS:
                    raise InvalidConfig(f"{name} is not a list config: APPEND and SUBTRACT apply to "
                                        f"{', '.join(sorted(_LIST_CONFIGS))}")
                items = [v for v in effective.get(name, "").split(",") if v]
                given = [v for v in (value or "").split(",") if v]
                if op == APPEND:
                    items += [v for v in given if v not in items]
                else:
                    items = [v for v in items if v not in given]
                to_set[name] = ",".join(items)
            else:
                raise InvalidRequest(f"config operation {op} is not one of SET 0, DELETE 1, APPEND 2, SUBTRACT 3")
        return to_set, to_delete

    async def _alter(self, session: Session, rtype: int, name: str, validate_only: bool,
                     change: Callable[[dict[str, str]], tuple[dict[str, str], list[str]]]) -> dict:
        out: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": name}
        denied = self._resource_denied(session, rtype, name, Op.ALTER_CONFIGS)
        if denied:
            return {**out, **denied}
        if rtype == BROKER_RESOURCE:
            return {**out, "error_code": INVALID_REQUEST,
                    "error_message": "broker configs are static in laketail: set them in laketail.toml"}
        try:
            check_not_internal(name, "alter the configs of")
            current = dict(self.broker.topic(name).configs)  # UNKNOWN_TOPIC_OR_PARTITION
            to_set, to_delete = change(current)
            # every check alter_topic_configs makes, before anything is written
            merged = {**current, **self.broker.catalog.normalise_configs(to_set)}
            for key in to_delete:
                if key not in TOPIC_CONFIGS:
                    raise InvalidConfig(f"unknown topic config '{key}'")
                merged.pop(key, None)
            self.broker.settings.topic_config(merged)
            if not validate_only:
                await self.broker.alter_topic_configs(name, to_set, to_delete)
        except Exception as exc:  # noqa: BLE001 - answered as the resource's error code
            return {**out, "error_code": error_code(exc), "error_message": _message(exc)}
        return out

    # -- groups ----------------------------------------------------------------------------------

    async def delete_groups(self, request: Request, session: Session) -> dict:
        results = []
        for group_id in request.body.groups_names:
            if not self._allowed(session, Op.DELETE, R.GROUP, group_id):
                code = GROUP_AUTHORIZATION_FAILED
            elif not self.coordinates():
                code = NOT_COORDINATOR
            else:
                try:
                    await self.broker.groups.delete(group_id)
                    code = 0
                except Exception as exc:  # noqa: BLE001 - answered as the group's error code
                    code = error_code(exc)
            results.append({"group_id": group_id, "error_code": code})
        return {"throttle_time": 0, "results": results}

    async def offset_delete(self, request: Request, session: Session) -> dict:
        body = request.body

        def answer(top: int, codes: dict[tuple[str, int], int]) -> dict:
            return {"throttle_time": 0, "error_code": top, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                 "error_code": codes.get((t.name, p.partition_index), 0)}
                                                for p in t.partitions]} for t in body.topics]}

        if not self._allowed(session, Op.DELETE, R.GROUP, body.group_id):
            return answer(GROUP_AUTHORIZATION_FAILED, {})
        if not self.coordinates():
            return answer(NOT_COORDINATOR, {})
        group = self.broker.groups.describe(body.group_id)
        if group.state == "Dead":
            return answer(69, {})  # GROUP_ID_NOT_FOUND
        subscribed = {t for m in group.members.values() for t in m.topics}
        codes: dict[tuple[str, int], int] = {}
        doomed = []
        for t in body.topics:
            code = 0
            if not self._allowed(session, Op.READ, R.TOPIC, t.name):
                code = TOPIC_AUTHORIZATION_FAILED
            elif t.name in subscribed:
                code = GROUP_SUBSCRIBED_TO_TOPIC
            for p in t.partitions:
                codes[(t.name, p.partition_index)] = code
                if code == 0:
                    doomed.append((t.name, p.partition_index))
        try:
            await self.broker.groups.offsets.delete(body.group_id, doomed)
        except Exception as exc:  # noqa: BLE001 - the deletion is one append
            return answer(error_code(exc), {})
        return answer(0, codes)

    # -- cluster ---------------------------------------------------------------------------------

    async def describe_cluster(self, request: Request, session: Session) -> dict:
        body = request.body
        out: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
                               "cluster_id": self.broker.cluster_id or "", "controller_id": self.broker.broker_id,
                               "brokers": [{k if k != "node_id" else "broker_id": v for k, v in b.items()}
                                           for b in self.brokers()],
                               "cluster_authorized_operations": NOT_ASKED}
        if getattr(body, "endpoint_type", 1) != 1:
            return {**out, "error_code": UNSUPPORTED_ENDPOINT_TYPE, "brokers": [],
                    "error_message": "only the brokers endpoint type (1) is served"}
        if body.include_cluster_authorized_operations:
            allowed = self.authorizer.authorize(session.principal, session.host, Op.DESCRIBE, R.CLUSTER,
                                                CLUSTER_NAME, audit_denied=False)
            out["cluster_authorized_operations"] = authorized_operations(
                self.authorizer, session.principal, session.host, R.CLUSTER) if allowed else 0
        return out

    # -- ACLs ------------------------------------------------------------------------------------

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
                code, message = error_code(exc), _message(exc)
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
                results.append({"error_code": error_code(exc), "error_message": _message(exc), "matching_acls": []})
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
