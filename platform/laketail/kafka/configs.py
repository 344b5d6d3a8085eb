"""Kafka's config APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

They call what v3's ``/topics/{t}/configs`` routes call: ``Broker.describe_configs``
and ``Broker.alter_topic_configs``; broker configs are the broker's settings under
Kafka's keys, read-only as on v3's ``/brokers/{id}/configs``.

* DescribeConfigs v1-4: TOPIC (2) and BROKER (4) resources; a broker resource names this
  broker's id (or is empty). Broker configs are static in laketail: every one is
  read-only, and AlterConfigs / IncrementalAlterConfigs on a broker answer INVALID_REQUEST.
* AlterConfigs v0-2 replaces a topic's whole set of overrides (Kafka's legacy
  semantics: a key left out returns to its default); IncrementalAlterConfigs v0-1 sets
  (0), deletes (1), appends to (2) or subtracts from (3) one key at a time; APPEND and
  SUBTRACT apply to list configs (``cleanup.policy``) only. ``validate_only`` checks
  everything and writes nothing; a resource with one bad key changes nothing.

Authorization, as Kafka's ``AclAuthorizer``: DescribeConfigs needs DescribeConfigs, the
two Alter APIs AlterConfigs, on the topic or (broker resources) the cluster.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from laketail.catalog import check_not_internal
from laketail.config import _BROKER_KEYS, SENSITIVE_BROKER_KEYS, TOPIC_CONFIGS, BrokerSettings
from laketail.errors import InvalidConfig, InvalidRequest
from laketail.kafka.apis import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    ApiPart,
    Session,
    error_code,
    error_message,
)
from laketail.kafka.protocol import Request
from laketail.request_processes import broker_id_of
from laketail.security.acl import (
    AclOperation,
    ResourceType,
)

Op, R = AclOperation, ResourceType
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


class ConfigApis(ApiPart):
    """The three config APIs of one Kafka listener (see the module docstring).
    Stateless; event loop thread only."""

    @property
    def handlers(self) -> dict[int, Callable[[Request, Session], Awaitable[dict]]]:
        return {32: self.describe_configs, 33: self.alter_configs, 44: self.incremental_alter_configs}

    def _resource_denied(self, session: Session, rtype: int, name: str, op: AclOperation) -> dict | None:
        """The error of a config resource the request may not touch, or None."""
        if rtype == TOPIC_RESOURCE:
            if not self._allowed(session, op, R.TOPIC, name):
                return {"error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": None}
        elif rtype == BROKER_RESOURCE:
            if not self._allowed(session, op, R.CLUSTER):
                return {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
            me = broker_id_of(self.broker.broker_id)  # the configured broker.id, whichever request process
            if name not in ("", str(me)):
                return {"error_code": INVALID_REQUEST,
                        "error_message": f"this is broker {me}; ask broker {name} for its configs"}
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
                out.update(error_code=error_code(exc), error_message=error_message(exc))
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
            return {**out, "error_code": error_code(exc), "error_message": error_message(exc)}
        return out
