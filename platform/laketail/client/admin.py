"""``AdminClient``: confluent-kafka's admin API over laketail's gateway.

Role: topic and config admin through Confluent's v3 endpoints (the cluster id comes
from ``GET /v3/clusters``), groups through laketail's ``/v1/groups`` and v3's lags.
Like confluent-kafka, the asynchronous operations return futures
(``concurrent.futures.Future``) keyed by what they act on -- ``{topic: Future}``,
``{ConfigResource: Future}``, ``{group_id: Future}`` -- resolved by a small pool of
background threads; a failed one raises ``KafkaException`` from ``result()``.
``list_topics()`` answers at once with ``ClusterMetadata``.

laketail keeps topic configs only: ``ConfigResource`` of any other type fails with
``_NOT_IMPLEMENTED``. ``alter_configs`` replaces a topic's whole set of overrides
(unlisted ones return to their defaults, as Kafka's AlterConfigs does);
``incremental_alter_configs`` applies SET / DELETE / APPEND / SUBTRACT one property
at a time, in one request.

The request and result types are importable from here, as from ``confluent_kafka.admin``.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import httpx

from laketail.client.admin_types import (
    AlterConfigOpType,
    BrokerMetadata,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ListConsumerGroupsResult,
    MemberAssignment,
    MemberDescription,
    NewPartitions,
    NewTopic,
    PartitionMetadata,
    ResourceType,
    TopicMetadata,
)
from laketail.client.config import AdminConfig, parse
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.gateway import Gateway
from laketail.client.message import OFFSET_INVALID, TopicPartition
from laketail.client.metadata import cluster_metadata

__all__ = [
    "AdminClient", "AlterConfigOpType", "BrokerMetadata", "ClusterMetadata", "ConfigEntry",
    "ConfigResource", "ConfigSource", "ConsumerGroupDescription", "ConsumerGroupListing",
    "ConsumerGroupState", "ConsumerGroupTopicPartitions", "ListConsumerGroupsResult",
    "MemberAssignment", "MemberDescription", "NewPartitions", "NewTopic", "PartitionMetadata", "ResourceType",
    "TopicMetadata", "KafkaError", "KafkaException", "TopicPartition",
]


def _timeout_s(*timeouts: float | None) -> float | None:
    positive = [t for t in timeouts if t is not None and t > 0]
    return max(positive) if positive else None


def _tps(items: list[dict]) -> list[TopicPartition]:
    return [TopicPartition(i["topic"], i["partition"]) for i in items]


class AdminClient:
    """Administrative operations on a laketail cluster, as ``confluent_kafka.admin.AdminClient``."""

    def __init__(self, conf: dict[str, Any] | None = None, /, *,
                 transport: httpx.BaseTransport | None = None, **kwargs: Any) -> None:
        self._config: AdminConfig = parse(AdminConfig, conf, kwargs)
        self._gateway = Gateway.for_client(self._config, transport=transport)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="laketail-admin")

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        return self._pool.submit(fn, *args)

    # -- topics -------------------------------------------------------------------------------------

    def create_topics(self, new_topics: list[NewTopic], operation_timeout: float = 0,
                      request_timeout: float = -1, validate_only: bool = False) -> dict[str, Future]:
        """``{topic: Future}``; each result is None once the topic exists."""
        timeout = _timeout_s(operation_timeout, request_timeout)
        return {t.topic: self._submit(self._create_topic, t, validate_only, timeout) for t in new_topics}

    def _create_topic(self, topic: NewTopic, validate_only: bool, timeout: float | None) -> None:
        body: dict[str, Any] = {"topic_name": topic.topic, "validate_only": validate_only}
        if topic.num_partitions is not None and topic.num_partitions > 0:
            body["partitions_count"] = topic.num_partitions
        if topic.replication_factor is not None and topic.replication_factor > 0:
            body["replication_factor"] = topic.replication_factor
        body["configs"] = [{"name": k, "value": str(v)} for k, v in topic.config.items()]
        self._gateway.post_json(self._gateway.v3("/topics"), body, timeout_s=timeout)

    def create_partitions(self, new_partitions: list[NewPartitions], operation_timeout: float = 0,
                          request_timeout: float = -1, validate_only: bool = False) -> dict[str, Future]:
        """``{topic: Future}``; each result is None once the topic has its new count
        (``PATCH .../topics/{t}`` with ``partitions_count``; INVALID_PARTITIONS unless it grows)."""
        timeout = _timeout_s(operation_timeout, request_timeout)
        return {p.topic: self._submit(self._create_partitions, p, validate_only, timeout) for p in new_partitions}

    def _create_partitions(self, request: NewPartitions, validate_only: bool, timeout: float | None) -> None:
        if request.replica_assignment is not None:
            raise KafkaException(local_error(
                "_INVALID_ARG", "laketail assigns the replicas of new partitions: give no replica_assignment"))
        body = {"partitions_count": request.new_total_count, "validate_only": validate_only}
        self._gateway.request("PATCH", self._gateway.v3(f"/topics/{request.topic}"), json=body, timeout_s=timeout)

    def delete_topics(self, topics: list[str], operation_timeout: float = 0,
                      request_timeout: float = -1) -> dict[str, Future]:
        """``{topic: Future}``; each result is None once the topic is gone."""
        timeout = _timeout_s(operation_timeout, request_timeout)
        return {t: self._submit(self._delete_topic, t, timeout) for t in topics}

    def _delete_topic(self, topic: str, timeout: float | None) -> None:
        self._gateway.request("DELETE", self._gateway.v3(f"/topics/{topic}"), timeout_s=timeout)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return cluster_metadata(self._gateway, topic, _timeout_s(timeout))

    # -- configs ------------------------------------------------------------------------------------

    def describe_configs(self, resources: list[ConfigResource], request_timeout: float = -1,
                         **kwargs: Any) -> dict[ConfigResource, Future]:
        """``{resource: Future}``; each result is ``{name: ConfigEntry}``."""
        timeout = _timeout_s(request_timeout)
        return {r: self._submit(self._describe, r, timeout) for r in resources}

    def _describe(self, resource: ConfigResource, timeout: float | None) -> dict[str, ConfigEntry]:
        self._check_topic_resource(resource)
        docs = self._gateway.get_json(self._gateway.v3(f"/topics/{resource.name}/configs"), timeout_s=timeout)
        out = {}
        for d in docs["data"]:
            source = ConfigSource.__members__.get(d.get("source") or "", ConfigSource.UNKNOWN_CONFIG)
            out[d["name"]] = ConfigEntry(
                d["name"], d.get("value"), source=source, is_read_only=d.get("is_read_only", False),
                is_default=d.get("is_default", False), is_sensitive=d.get("is_sensitive", False),
            )
        return out

    @staticmethod
    def _check_topic_resource(resource: ConfigResource) -> None:
        if resource.restype != ResourceType.TOPIC:
            raise KafkaException(local_error(
                "_NOT_IMPLEMENTED", f"laketail keeps topic configs only, not {resource.restype.name}"))

    def alter_configs(self, resources: list[ConfigResource], request_timeout: float = -1,
                      validate_only: bool = False, **kwargs: Any) -> dict[ConfigResource, Future]:
        """Replace each topic's overrides by ``set_config``; results are None."""
        timeout = _timeout_s(request_timeout)
        return {r: self._submit(self._alter, r, validate_only, timeout) for r in resources}

    def _alter(self, resource: ConfigResource, validate_only: bool, timeout: float | None) -> None:
        current = self._describe(resource, timeout)
        ops = [{"name": k, "value": str(v), "operation": "SET"} for k, v in resource.set_config_dict.items()]
        ops += [
            {"name": name, "operation": "DELETE"}
            for name, entry in current.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and name not in resource.set_config_dict
        ]
        self._apply(resource, ops, validate_only, timeout)

    def incremental_alter_configs(self, resources: list[ConfigResource], request_timeout: float = -1,
                                  validate_only: bool = False, **kwargs: Any) -> dict[ConfigResource, Future]:
        """Apply each resource's ``incremental_configs``; results are None."""
        timeout = _timeout_s(request_timeout)
        return {r: self._submit(self._alter_incremental, r, validate_only, timeout) for r in resources}

    def _alter_incremental(self, resource: ConfigResource, validate_only: bool, timeout: float | None) -> None:
        self._check_topic_resource(resource)
        current: dict[str, ConfigEntry] | None = None
        ops = []
        for entry in resource.incremental_configs:
            op = entry.incremental_operation or AlterConfigOpType.SET
            if op == AlterConfigOpType.DELETE:
                ops.append({"name": entry.name, "operation": "DELETE"})
                continue
            value = "" if entry.value is None else str(entry.value)
            if op in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
                current = current if current is not None else self._describe(resource, timeout)
                have = [v for v in (current[entry.name].value or "").split(",") if v] if entry.name in current else []
                given = [v for v in value.split(",") if v]
                items = have + [v for v in given if v not in have] if op == AlterConfigOpType.APPEND \
                    else [v for v in have if v not in given]
                value = ",".join(items)
            ops.append({"name": entry.name, "value": value, "operation": "SET"})
        self._apply(resource, ops, validate_only, timeout)

    def _apply(self, resource: ConfigResource, ops: list[dict], validate_only: bool, timeout: float | None) -> None:
        if not ops:
            return
        self._gateway.post_json(
            self._gateway.v3(f"/topics/{resource.name}/configs:alter"),
            {"data": ops, "validate_only": validate_only}, timeout_s=timeout,
        )

    # -- consumer groups ------------------------------------------------------------------------------

    def list_consumer_groups(self, request_timeout: float = -1, states: set | None = None,
                             types: set | None = None, **kwargs: Any) -> Future:
        """One Future of ``ListConsumerGroupsResult``; ``states`` filters by
        ``ConsumerGroupState``."""
        return self._submit(self._list_groups, set(states or ()), _timeout_s(request_timeout))

    def _list_groups(self, states: set, timeout: float | None) -> ListConsumerGroupsResult:
        docs = self._gateway.get_json("/v1/groups", timeout_s=timeout)["groups"]
        valid = []
        for d in docs:
            state = ConsumerGroupState.of(d.get("state"))
            if states and state not in states:
                continue
            members = d.get("members") or 0
            members = len(members) if isinstance(members, list) else int(members)
            simple = not d.get("protocol") and members == 0
            valid.append(ConsumerGroupListing(d["group_id"], simple, state))
        return ListConsumerGroupsResult(valid=valid, errors=[])

    def describe_consumer_groups(self, group_ids: list[str], request_timeout: float = -1,
                                 **kwargs: Any) -> dict[str, Future]:
        """``{group_id: Future}`` of ``ConsumerGroupDescription``."""
        timeout = _timeout_s(request_timeout)
        return {g: self._submit(self._describe_group, g, timeout) for g in group_ids}

    def _describe_group(self, group_id: str, timeout: float | None) -> ConsumerGroupDescription:
        d = self._gateway.get_json(f"/v1/groups/{group_id}", timeout_s=timeout)
        members = [
            MemberDescription(m["member_id"], m.get("client_id", ""), m.get("client_host", ""),
                              MemberAssignment(_tps(m.get("assignment", []))))
            for m in d.get("members", [])
        ]
        simple = not d.get("protocol") and not members
        return ConsumerGroupDescription(
            d["group_id"], simple, members, d.get("protocol") or "", ConsumerGroupState.of(d.get("state")),
        )

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                    require_stable: bool = False, request_timeout: float = -1,
                                    **kwargs: Any) -> dict[str, Future]:
        """``{group_id: Future}`` of ``ConsumerGroupTopicPartitions`` with the committed
        offsets (``OFFSET_INVALID`` where none); one request, as confluent-kafka takes."""
        requests = list_consumer_group_offsets_request
        if len(requests) != 1:
            raise ValueError("Currently we support listing offsets for a single consumer group only")
        timeout = _timeout_s(request_timeout)
        return {r.group_id: self._submit(self._group_offsets, r, timeout) for r in requests}

    def _group_offsets(self, request: ConsumerGroupTopicPartitions,
                       timeout: float | None) -> ConsumerGroupTopicPartitions:
        wanted = request.topic_partitions
        if wanted is None:
            lags = self._gateway.get_json(self._gateway.v3(f"/consumer-groups/{request.group_id}/lags"),
                                          timeout_s=timeout)
            wanted = [TopicPartition(d["topic_name"], d["partition_id"]) for d in lags.get("data", [])]
        if not wanted:
            return ConsumerGroupTopicPartitions(request.group_id, [])
        body = {"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in wanted]}
        answer = self._gateway.post_json(f"/v1/groups/{request.group_id}/committed", body, timeout_s=timeout)
        out = []
        for o in answer["offsets"]:
            offset = o["offset"] if o["offset"] is not None and o["offset"] >= 0 else OFFSET_INVALID
            out.append(TopicPartition(o["topic"], o["partition"], offset, o.get("metadata")))
        return ConsumerGroupTopicPartitions(request.group_id, sorted(out))

    def alter_consumer_group_offsets(self, alter_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                     request_timeout: float = -1, **kwargs: Any) -> dict[str, Future]:
        """Commit offsets for an empty group; ``{group_id: Future}`` of the request back."""
        timeout = _timeout_s(request_timeout)
        return {r.group_id: self._submit(self._alter_offsets, r, timeout) for r in alter_consumer_group_offsets_request}

    def _alter_offsets(self, request: ConsumerGroupTopicPartitions,
                       timeout: float | None) -> ConsumerGroupTopicPartitions:
        offsets = [
            {"topic": tp.topic, "partition": tp.partition, "offset": tp.offset, "metadata": tp.metadata or ""}
            for tp in request.topic_partitions or []
        ]
        self._gateway.post_json(
            f"/v1/groups/{request.group_id}/commit",
            {"generation_id": -1, "member_id": "", "offsets": offsets}, timeout_s=timeout,
        )
        return ConsumerGroupTopicPartitions(request.group_id, list(request.topic_partitions or []))

    # -- lifecycle ------------------------------------------------------------------------------------

    def poll(self, timeout: float = -1) -> int:
        """Nothing to serve: futures resolve on their own (kept for API parity)."""
        return 0

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._gateway.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

