"""Confluent v3 replicas, reassignments and broker configs: the ``related`` links that
the cluster, broker, topic and partition documents advertise.

* ``/topics/{t}/partitions/{p}/replicas`` (``KafkaReplicaList``) and
  ``.../replicas/{broker_id}`` (``KafkaReplica``), from the cluster image: the
  partition's replicas, which one leads, which are in sync;
* ``/brokers/{id}/partition-replicas``: every replica a broker holds;
* ``/topics/-/partitions/-/reassignment`` and ``/topics/{t}/partitions/-/reassignment``
  (``KafkaReassignmentList``): always empty, laketail does not reassign partitions yet
  (a partition's own ``reassignment`` is not advertised: Confluent answers it 404 when
  no reassignment is under way, which is always here);
* ``/brokers/{id}/configs`` (``KafkaBrokerConfigList``) and ``/configs/{name}``: the
  broker's settings under Kafka's keys (another broker's are asked of its gateway);
* ``/broker-configs`` (``KafkaClusterConfigList``): cluster-wide dynamic broker configs,
  of which laketail has none (an empty list).

Read-only; each route checks the cluster id first (404 for another cluster).
"""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.deps import broker_of, check_cluster, json_response
from laketail.api.routes.clusters import cluster_crn, cluster_url, list_metadata, live_brokers
from laketail.api.routes.v3_topics import topic_url
from laketail.api.services import cluster_of
from laketail.broker import PartitionState
from laketail.config import _BROKER_KEYS, SENSITIVE_BROKER_KEYS, BrokerSettings
from laketail.errors import BrokerNotAvailable, InvalidConfig, UnknownTopicOrPartition
from laketail.request_processes import broker_id_of, broker_ids_of

router = APIRouter(tags=["v3 replicas and broker configs"])

CLUSTER = "/v3/clusters/{cluster_id}"


def _replica_doc(request: Request, cid: str, state: PartitionState, broker_id: int) -> dict:
    """The replica ``broker_id`` holds, as clients see brokers (``broker_id_of``): it
    leads when any of its request processes leads, is in sync when any of them is."""
    url = f"{topic_url(request, cid, state.topic)}/partitions/{state.partition}/replicas/{broker_id}"
    return {
        "kind": "KafkaReplica",
        "metadata": {
            "self": url,
            "resource_name": (f"{cluster_crn(cid)}/topic={state.topic}/partition={state.partition}"
                              f"/replica={broker_id}"),
        },
        "cluster_id": cid,
        "topic_name": state.topic,
        "partition_id": state.partition,
        "broker_id": broker_id,
        "is_leader": broker_id == broker_id_of(state.leader),
        "is_in_sync": broker_id in broker_ids_of(state.isr),
        "broker": {"related": f"{cluster_url(request, cid)}/brokers/{broker_id}"},
    }


def _replica_list(self_url: str, docs: list[dict]) -> Response:
    return json_response({"kind": "KafkaReplicaList", "metadata": list_metadata(self_url), "data": docs})


@router.get(CLUSTER + "/topics/{topic}/partitions/{partition}/replicas", summary="List a partition's replicas")
async def list_replicas(request: Request, cluster_id: str, topic: str, partition: int) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    state = broker.partition_state(topic, partition)
    return _replica_list(
        f"{topic_url(request, cluster_id, topic)}/partitions/{partition}/replicas",
        [_replica_doc(request, cluster_id, state, b) for b in broker_ids_of(state.replicas)],
    )


@router.get(CLUSTER + "/topics/{topic}/partitions/{partition}/replicas/{broker_id}",
            summary="Describe one replica of a partition")
async def get_replica(request: Request, cluster_id: str, topic: str, partition: int, broker_id: int) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    state = broker.partition_state(topic, partition)
    if broker_id not in broker_ids_of(state.replicas):
        raise UnknownTopicOrPartition(f"broker {broker_id} holds no replica of {topic}-{partition}")
    return json_response(_replica_doc(request, cluster_id, state, broker_id))


@router.get(CLUSTER + "/brokers/{broker_id}/partition-replicas", summary="List the replicas a broker holds")
async def list_broker_replicas(request: Request, cluster_id: str, broker_id: int) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    _live(broker, broker_id)
    docs = []
    for topic in broker.list_topics(include_internal=True):
        for state in broker.partition_states(topic):
            if broker_id in broker_ids_of(state.replicas):
                docs.append(_replica_doc(request, cluster_id, state, broker_id))
    return _replica_list(f"{cluster_url(request, cluster_id)}/brokers/{broker_id}/partition-replicas", docs)


# -- reassignments ------------------------------------------------------------------------


def _no_reassignments(self_url: str) -> Response:
    return json_response({"kind": "KafkaReassignmentList", "metadata": list_metadata(self_url), "data": []})


@router.get(
    CLUSTER + "/topics/-/partitions/-/reassignment", summary="List reassignments (none: laketail does not reassign)"
)
async def list_all_reassignments(request: Request, cluster_id: str) -> Response:
    check_cluster(broker_of(request), cluster_id)
    return _no_reassignments(f"{cluster_url(request, cluster_id)}/topics/-/partitions/-/reassignment")


@router.get(CLUSTER + "/topics/{topic}/partitions/-/reassignment", summary="List a topic's reassignments (none)")
async def list_topic_reassignments(request: Request, cluster_id: str, topic: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    broker.topic(topic)
    return _no_reassignments(f"{topic_url(request, cluster_id, topic)}/partitions/-/reassignment")


# -- broker configs -----------------------------------------------------------------------


def _live(broker, broker_id: int):
    for b in live_brokers(broker):  # a request process's own member id is no broker's
        if b.broker_id == broker_id:
            return b
    raise BrokerNotAvailable(f"broker {broker_id} is not alive in this cluster")


def broker_config_entries(settings: BrokerSettings) -> list[tuple[str, str | None, bool]]:
    """``(kafka key, value, is_default)`` of every broker setting, first key of each."""
    defaults = BrokerSettings()
    seen, out = set(), []
    for key, attr in _BROKER_KEYS.items():
        if attr in seen:
            continue  # log.dir is log.dirs' alias
        seen.add(attr)
        value = getattr(settings, attr)
        text = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        if key in SENSITIVE_BROKER_KEYS:
            text = None  # as Kafka shows a password config: no value, is_sensitive
        out.append((key, text, value == getattr(defaults, attr)))
    return out


def _broker_config_doc(request: Request, cid: str, broker_id: int, name: str, value, is_default: bool) -> dict:
    url = f"{cluster_url(request, cid)}/brokers/{broker_id}/configs/{name}"
    source = "DEFAULT_CONFIG" if is_default else "STATIC_BROKER_CONFIG"
    return {
        "kind": "KafkaBrokerConfig",
        "metadata": {"self": url, "resource_name": f"{cluster_crn(cid)}/broker={broker_id}/config={name}"},
        "cluster_id": cid,
        "broker_id": broker_id,
        "name": name,
        "value": value,
        "is_default": is_default,
        "is_read_only": True,
        "is_sensitive": name in SENSITIVE_BROKER_KEYS,
        "source": source,
        "synonyms": [{"name": name, "value": value, "source": source}],
    }


async def _configs_of(request: Request, cluster_id: str, broker_id: int) -> list[dict]:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    _live(broker, broker_id)
    # Only that broker knows its settings; of a broker with request processes, its first
    # process (whose member id is the broker id) answers. Asked of another process of the
    # broker while the first is not registered, this one answers.
    registration = cluster_of(request).image.brokers.get(broker_id)
    if broker_id != broker.broker_id and (registration is not None or broker_id != broker_id_of(broker.broker_id)):
        # through the peer's inter-broker listener, with the cluster secret (the node's client)
        base = registration.peer_url if registration is not None else _live(broker, broker_id).url
        url = f"{base.rstrip('/')}/v3/clusters/{cluster_id}/brokers/{broker_id}/configs"
        try:
            resp = await cluster_of(request).http.get(url, timeout=5.0)
            resp.raise_for_status()
            return resp.json()["data"]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise BrokerNotAvailable(f"broker {broker_id} did not give its configs: {exc}") from exc
    return [_broker_config_doc(request, cluster_id, broker_id, *entry)
            for entry in broker_config_entries(broker.settings)]


@router.get(CLUSTER + "/brokers/{broker_id}/configs", summary="List a broker's configs")
async def list_broker_configs(request: Request, cluster_id: str, broker_id: int) -> Response:
    docs = await _configs_of(request, cluster_id, broker_id)
    return json_response({
        "kind": "KafkaBrokerConfigList",
        "metadata": list_metadata(f"{cluster_url(request, cluster_id)}/brokers/{broker_id}/configs"),
        "data": docs,
    })


@router.get(CLUSTER + "/brokers/{broker_id}/configs/{name}", summary="Get one broker config")
async def get_broker_config(request: Request, cluster_id: str, broker_id: int, name: str) -> Response:
    for doc in await _configs_of(request, cluster_id, broker_id):
        if doc["name"] == name:
            return json_response(doc)
    raise InvalidConfig(f"unknown broker config '{name}'")


@router.get(CLUSTER + "/broker-configs", summary="List cluster-wide dynamic broker configs (none)")
async def list_cluster_configs(request: Request, cluster_id: str) -> Response:
    check_cluster(broker_of(request), cluster_id)
    return json_response({
        "kind": "KafkaClusterConfigList",
        "metadata": list_metadata(f"{cluster_url(request, cluster_id)}/broker-configs"),
        "data": [],
    })


__all__ = ["router", "broker_config_entries"]
