"""Confluent v3 topic admin: topics, their partitions and their configs.

``/v3/clusters/{cluster_id}/topics``: list (``KafkaTopicList``), create (201, body
``{topic_name, partitions_count?, replication_factor?, configs?: [{name, value}],
validate_only?}``; an existing name is 409 TOPIC_ALREADY_EXISTS); ``/topics/{t}``:
describe, delete (204), PATCH ``{partitions_count}``: more partitions (Confluent Cloud's
"Update Partition Count", ``PATCH /kafka/v3/clusters/{cluster_id}/topics/{topic_name}``,
200 with the ``KafkaTopic``; Kafka's CreatePartitions, so a count that is not larger is
400 INVALID_PARTITIONS). ``/topics/{t}/partitions[/{p}]``: ``KafkaPartition``.
``/topics/{t}/configs``: list (``KafkaTopicConfigList``); ``/configs/{name}``: get,
set (PUT ``{"value"}``, 204), reset to default (DELETE, 204); ``/configs:alter``:
several SET / DELETE operations at once (204). Every path checks the cluster id.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from laketail.api import authz
from laketail.api.deps import broker_of, check_cluster, json_response
from laketail.api.routes.clusters import cluster_crn, cluster_url, list_metadata
from laketail.broker import ConfigEntry
from laketail.config import TOPIC_CONFIGS, validate_topic_overrides
from laketail.errors import InvalidConfig
from laketail.request_processes import broker_id_of
from laketail.security.acl import AclOperation as Op
from laketail.security.acl import ResourceType as R

router = APIRouter(tags=["v3 topics"])

ConfigValue = str | int | float | bool | None


class ConfigData(BaseModel):
    name: str
    value: ConfigValue = None


class CreateTopicRequest(BaseModel):
    topic_name: str
    partitions_count: int | None = Field(None, description="default: the broker's num.partitions")
    replication_factor: int | None = Field(
        None, description="default: the broker's default.replication.factor"
    )
    configs: list[ConfigData] = Field(default_factory=list)
    validate_only: bool = False


class UpdatePartitionCountRequest(BaseModel):
    partitions_count: int = Field(description="the new number of partitions: only ever more")
    validate_only: bool = Field(False, description="laketail's: check, change nothing (CreatePartitions' flag)")


class UpdateConfigRequest(BaseModel):
    value: ConfigValue = None


class AlterConfigData(BaseModel):
    name: str
    value: ConfigValue = None
    operation: Literal["SET", "DELETE", "set", "delete"] | None = None


class AlterConfigsRequest(BaseModel):
    data: list[AlterConfigData]
    validate_only: bool = False


def _str(value: ConfigValue) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def topic_url(request: Request, cluster_id: str, topic: str) -> str:
    return f"{cluster_url(request, cluster_id)}/topics/{topic}"


def topic_doc(request: Request, cluster_id: str, info) -> dict:
    url = topic_url(request, cluster_id, info.name)
    return {
        "kind": "KafkaTopic",
        "metadata": {"self": url, "resource_name": f"{cluster_crn(cluster_id)}/topic={info.name}"},
        "cluster_id": cluster_id,
        "topic_name": info.name,
        "is_internal": bool(info.internal),
        "replication_factor": info.replication_factor,
        "partitions_count": info.partitions,
        "partitions": {"related": f"{url}/partitions"},
        "configs": {"related": f"{url}/configs"},
        "partition_reassignments": {"related": f"{url}/partitions/-/reassignment"},
        "authorized_operations": [],
    }


def partition_doc(request: Request, cluster_id: str, topic: str, partition: int, leader: int) -> dict:
    """Confluent's ``KafkaPartition``; ``leader`` links the leading replica
    (``replicas/{broker_id}``; null while the partition has no leader)."""
    url = f"{topic_url(request, cluster_id, topic)}/partitions/{partition}"
    leader = broker_id_of(leader)  # a request process's member id as its broker's
    return {
        "kind": "KafkaPartition",
        "metadata": {
            "self": url,
            "resource_name": f"{cluster_crn(cluster_id)}/topic={topic}/partition={partition}",
        },
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "leader": {"related": f"{url}/replicas/{leader}"} if leader >= 0 else None,
        "replicas": {"related": f"{url}/replicas"},
    }


def config_doc(request: Request, cluster_id: str, topic: str, entry: ConfigEntry) -> dict:
    url = f"{topic_url(request, cluster_id, topic)}/configs/{entry.name}"
    return {
        "kind": "KafkaTopicConfig",
        "metadata": {
            "self": url,
            "resource_name": f"{cluster_crn(cluster_id)}/topic={topic}/config={entry.name}",
        },
        "cluster_id": cluster_id,
        "topic_name": topic,
        "name": entry.name,
        "value": entry.value,
        "is_default": entry.is_default,
        "is_read_only": entry.read_only,
        "is_sensitive": entry.sensitive,
        "source": entry.source,
        "synonyms": [{"name": entry.name, "value": entry.value, "source": entry.source}],
    }


# -- topics -----------------------------------------------------------------------------


@router.get("/v3/clusters/{cluster_id}/topics", summary="List topics")
async def list_topics(request: Request, cluster_id: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    return json_response({
        "kind": "KafkaTopicList",
        "metadata": list_metadata(f"{cluster_url(request, cluster_id)}/topics"),
        "data": [topic_doc(request, cluster_id, broker.topic(name)) for name in broker.list_topics()
                 if authz.may_describe(request, R.TOPIC, name)],
    })


@router.post("/v3/clusters/{cluster_id}/topics", status_code=201, summary="Create a topic")
async def create_topic(request: Request, cluster_id: str, body: CreateTopicRequest) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    if not authz.may(request, Op.CREATE, R.CLUSTER):  # CreateTopics: Create on the cluster or the topic
        authz.check(request, Op.CREATE, R.TOPIC, body.topic_name)
    configs = {}
    for item in body.configs:
        value = _str(item.value)
        if value is None:
            raise InvalidConfig(f"config '{item.name}' needs a value")
        configs[item.name] = value
    info = await broker.create_topic(
        body.topic_name,
        body.partitions_count,
        body.replication_factor,
        configs,
        validate_only=body.validate_only,
    )
    return json_response(topic_doc(request, cluster_id, info), status=201)


@router.get("/v3/clusters/{cluster_id}/topics/{topic}", summary="Describe a topic")
async def get_topic(request: Request, cluster_id: str, topic: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    return json_response(topic_doc(request, cluster_id, broker.topic(topic)))


@router.delete(
    "/v3/clusters/{cluster_id}/topics/{topic}", status_code=204,
    summary="Delete a topic (its Delta table and hot logs too)",
)
async def delete_topic(request: Request, cluster_id: str, topic: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    await broker.delete_topic(topic)
    return Response(status_code=204)


@router.patch("/v3/clusters/{cluster_id}/topics/{topic}", summary="Increase a topic's partition count")
async def update_partition_count(
    request: Request, cluster_id: str, topic: str, body: UpdatePartitionCountRequest
) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    info = await broker.create_partitions(topic, body.partitions_count, validate_only=body.validate_only)
    return json_response(topic_doc(request, cluster_id, info))


# -- partitions ---------------------------------------------------------------------------


@router.get("/v3/clusters/{cluster_id}/topics/{topic}/partitions", summary="List partitions")
async def list_partitions(request: Request, cluster_id: str, topic: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    states = broker.partition_states(topic)
    return json_response({
        "kind": "KafkaPartitionList",
        "metadata": list_metadata(f"{topic_url(request, cluster_id, topic)}/partitions"),
        "data": [partition_doc(request, cluster_id, topic, s.partition, s.leader) for s in states],
    })


@router.get(
    "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}",
    summary="Describe a partition",
)
async def get_partition(request: Request, cluster_id: str, topic: str, partition: int) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    state = broker.partition_state(topic, partition)  # 404 for an unknown partition
    return json_response(partition_doc(request, cluster_id, topic, partition, state.leader))


# -- configs ------------------------------------------------------------------------------


def _entry(broker, topic: str, name: str) -> ConfigEntry:
    for entry in broker.describe_configs(topic):
        if entry.name == name:
            return entry
    raise InvalidConfig(f"unknown topic config '{name}'")


@router.get("/v3/clusters/{cluster_id}/topics/{topic}/configs", summary="List a topic's configs")
async def list_configs(request: Request, cluster_id: str, topic: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    return json_response({
        "kind": "KafkaTopicConfigList",
        "metadata": list_metadata(f"{topic_url(request, cluster_id, topic)}/configs"),
        "data": [config_doc(request, cluster_id, topic, e) for e in broker.describe_configs(topic)],
    })


@router.post(
    "/v3/clusters/{cluster_id}/topics/{topic}/configs:alter", status_code=204,
    summary="Set and reset several configs at once (all or nothing)",
)
async def alter_configs(request: Request, cluster_id: str, topic: str, body: AlterConfigsRequest) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    info = broker.topic(topic)
    to_set: dict[str, str] = {}
    to_delete: list[str] = []
    for item in body.data:
        if (item.operation or "SET").upper() == "DELETE":
            if item.name not in TOPIC_CONFIGS:
                raise InvalidConfig(f"unknown topic config '{item.name}'")
            to_delete.append(item.name)
        else:
            value = _str(item.value)
            if value is None:
                raise InvalidConfig(f"config '{item.name}' needs a value to SET")
            to_set[item.name] = value
    merged = dict(info.configs)
    merged.update(validate_topic_overrides(to_set))
    for name in to_delete:
        merged.pop(name, None)
    broker.settings.topic_config(merged)  # every value checked before anything changes
    if not body.validate_only:
        await broker.alter_topic_configs(topic, to_set, to_delete)
    return Response(status_code=204)


@router.get("/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}", summary="Get one config")
async def get_config(request: Request, cluster_id: str, topic: str, name: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    return json_response(config_doc(request, cluster_id, topic, _entry(broker, topic, name)))


@router.put(
    "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}", status_code=204,
    summary="Set one config",
)
async def update_config(
    request: Request, cluster_id: str, topic: str, name: str, body: UpdateConfigRequest
) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    value = _str(body.value)
    if value is None:
        raise InvalidConfig(f"config '{name}' needs a value")
    await broker.alter_topic_configs(topic, {name: value})
    return Response(status_code=204)


@router.delete(
    "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}", status_code=204,
    summary="Reset one config to its default",
)
async def reset_config(request: Request, cluster_id: str, topic: str, name: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    await broker.alter_topic_configs(topic, delete=[name])
    return Response(status_code=204)
