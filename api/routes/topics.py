"""Confluent REST Proxy v2 metadata: topics, partitions, their offsets, brokers.

Shapes are v2's: ``GET /topics`` is a list of names (internal topics left out, as
Kafka's AdminClient lists them); a topic is ``{name, configs, partitions}``; a
partition is ``{partition, leader, replicas: [{broker, leader, in_sync}]}``; partition
offsets are ``{beginning_offset, end_offset}`` where the end is what a consumer can read
to: the last stable offset under ``isolation_level=read_committed`` (the default), the
high watermark under ``read_uncommitted`` (they differ only while a transaction is open).
Responses are ``application/vnd.kafka.v2+json``.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from laketail.api import authz
from laketail.api.deps import PartitionParam, broker_of, json_response
from laketail.api.encoding import V2_JSON, v2_accept
from laketail.api.routes.clusters import live_brokers
from laketail.broker import PartitionState
from laketail.request_processes import broker_id_of, broker_ids_of
from laketail.security.acl import ResourceType as R

router = APIRouter(tags=["v2 topics"], dependencies=[Depends(v2_accept)])  # GET: 406 as Confluent


def _partition(state: PartitionState) -> dict:
    """Brokers as clients see them: a request process as its broker (``broker_id_of``)."""
    leader, in_sync = broker_id_of(state.leader), broker_ids_of(state.isr)
    return {
        "partition": state.partition,
        "leader": leader,
        "replicas": [
            {"broker": b, "leader": b == leader, "in_sync": b in in_sync}
            for b in broker_ids_of(state.replicas)
        ],
    }


def _v2(doc) -> Response:
    return json_response(doc, media_type=V2_JSON)


@router.get("/topics", summary="List topic names")
async def list_topics(request: Request) -> Response:
    return _v2([t for t in broker_of(request).list_topics(include_internal=False)
                if authz.may_describe(request, R.TOPIC, t)])


@router.get("/topics/{topic}", summary="Describe a topic: configs and partitions")
async def get_topic(request: Request, topic: str) -> Response:
    broker = broker_of(request)
    config = broker.topic_config(topic).to_kafka()
    partitions = [_partition(s) for s in broker.partition_states(topic)]
    damage = await broker.table_damage(topic)
    for doc in partitions:  # laketail's own field, only where the table is damaged
        if doc["partition"] in damage:
            doc["damaged"] = damage[doc["partition"]]
    return _v2({"name": topic, "configs": config, "partitions": partitions})


@router.get("/topics/{topic}/partitions", summary="List a topic's partitions")
async def list_partitions(
    request: Request,
    topic: str,
    allow_auto_topic_creation: bool = Query(
        False, description="laketail: create the topic first when it does not exist and the broker's "
        "auto.create.topics.enable is set (Kafka's MetadataRequest field; the Python producer sets it)"),
) -> Response:
    broker = broker_of(request)
    if allow_auto_topic_creation:
        if broker.would_auto_create(topic):
            authz.check_may_auto_create(request, topic)  # Kafka: Create on the cluster or the topic
        await broker.topic_for_produce(topic)
    return _v2([_partition(s) for s in broker.partition_states(topic)])


@router.get("/topics/{topic}/partitions/{partition}", summary="Describe one partition")
async def get_partition(request: Request, topic: str, partition: PartitionParam) -> Response:
    return _v2(_partition(broker_of(request).partition_state(topic, partition)))


@router.get(
    "/topics/{topic}/partitions/{partition}/offsets",
    summary="A partition's beginning (log start) and end (last stable offset, or high watermark "
    "for read_uncommitted) offsets",
)
async def get_offsets(
    request: Request,
    topic: str,
    partition: PartitionParam,
    isolation_level: Literal["read_committed", "read_uncommitted"] = Query("read_committed"),
) -> Response:
    state = await broker_of(request).partition_state_async(topic, partition)
    end = state.last_stable_offset if isolation_level == "read_committed" else state.high_watermark
    return _v2({"beginning_offset": state.log_start_offset, "end_offset": end})


@router.get("/brokers", tags=["v2 brokers"], summary="List broker ids")
async def list_brokers(request: Request) -> Response:
    return _v2({"brokers": [b.broker_id for b in live_brokers(broker_of(request))]})
