"""Confluent v3 clusters: ``GET /v3/clusters`` and ``GET /v3/clusters/{cluster_id}``.

A laketail deployment is one cluster whose id is made on first start and kept in the
catalog (``broker.cluster_id``). Resources carry v3's ``kind`` and ``metadata``
(``self`` URL and ``resource_name`` CRN) and link related collections with
``{"related": url}``.
"""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.deps import broker_of, check_cluster, json_response
from laketail.broker import Broker, BrokerInfo
from laketail.errors import BrokerNotAvailable
from laketail.request_processes import broker_id_of

router = APIRouter(tags=["v3 clusters"])


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def cluster_url(request: Request, cluster_id: str) -> str:
    return f"{base_url(request)}/v3/clusters/{cluster_id}"


def cluster_crn(cluster_id: str) -> str:
    return f"crn:///kafka={cluster_id}"


def list_metadata(self_url: str) -> dict:
    return {"self": self_url, "next": None}


def live_brokers(broker: Broker) -> list[BrokerInfo]:
    """The live brokers as clients see them, by id: the request processes of a broker
    (cluster members ``broker.id + k * PROCESS_ID_STRIDE``) are that one broker, shown
    with the first process's address (its member id is the broker id) or, while that
    one is not live, another's (they share the client listeners)."""
    shown: dict[int, BrokerInfo] = {}
    for b in broker.brokers():  # by member id: each broker's first process before the others
        shown.setdefault(broker_id_of(b.broker_id), dataclasses.replace(b, broker_id=broker_id_of(b.broker_id)))
    return [shown[b] for b in sorted(shown)]


def cluster_doc(request: Request) -> dict:
    broker = broker_of(request)
    cid = broker.cluster_id
    url = cluster_url(request, cid)
    controller = broker_id_of(broker.controller_id if broker.controller_id >= 0 else broker.broker_id)
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": url, "resource_name": cluster_crn(cid)},
        "cluster_id": cid,
        "controller": {"related": f"{url}/brokers/{controller}"},
        "brokers": {"related": f"{url}/brokers"},
        "broker_configs": {"related": f"{url}/broker-configs"},
        "consumer_groups": {"related": f"{url}/consumer-groups"},
        "topics": {"related": f"{url}/topics"},
        "partition_reassignments": {"related": f"{url}/topics/-/partitions/-/reassignment"},
    }


@router.get("/v3/clusters", summary="List clusters (laketail is one)")
async def list_clusters(request: Request) -> Response:
    return json_response({
        "kind": "KafkaClusterList",
        "metadata": list_metadata(f"{base_url(request)}/v3/clusters"),
        "data": [cluster_doc(request)],
    })


@router.get("/v3/clusters/{cluster_id}", summary="Describe the cluster")
async def get_cluster(request: Request, cluster_id: str) -> Response:
    check_cluster(broker_of(request), cluster_id)
    return json_response(cluster_doc(request))


def _broker_doc(request: Request, cid: str, b) -> dict:
    url = f"{cluster_url(request, cid)}/brokers/{b.broker_id}"
    return {
        "kind": "KafkaBroker",
        "metadata": {"self": url, "resource_name": f"{cluster_crn(cid)}/broker={b.broker_id}"},
        "cluster_id": cid,
        "broker_id": b.broker_id,
        "host": b.host,
        "port": b.port,
        "rack": None,
        "url": b.url,  # laketail: the advertised gateway URL (scheme included)
        "configs": {"related": f"{url}/configs"},
        "partition_replicas": {"related": f"{url}/partition-replicas"},
    }


@router.get("/v3/clusters/{cluster_id}/brokers", summary="List the live brokers")
async def list_brokers(request: Request, cluster_id: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    return json_response({
        "kind": "KafkaBrokerList",
        "metadata": list_metadata(f"{cluster_url(request, cluster_id)}/brokers"),
        "data": [_broker_doc(request, cluster_id, b) for b in live_brokers(broker)],
    })


@router.get("/v3/clusters/{cluster_id}/brokers/{broker_id}", summary="Describe a broker")
async def get_broker(request: Request, cluster_id: str, broker_id: int) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    for b in live_brokers(broker):  # a request process's own member id is no broker's: 404
        if b.broker_id == broker_id:
            return json_response(_broker_doc(request, cluster_id, b))
    raise BrokerNotAvailable(f"broker {broker_id} is not alive in this cluster")
