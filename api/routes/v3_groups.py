"""Confluent v3 consumer groups and lag, plus laketail's time lag.

Under ``/v3/clusters/{cluster_id}/consumer-groups``:

* ``/`` -- ``KafkaConsumerGroupList``; ``/{g}`` -- ``KafkaConsumerGroup``
  (``consumer_group_id``, ``is_simple``, ``partition_assignor``, ``state`` in v3's upper
  case, ``coordinator``, ``consumers``, ``lag_summary``);
* ``/{g}/consumers[/{consumer_id}]`` -- ``KafkaConsumer`` (``consumer_id``,
  ``instance_id`` (Kafka's ``group.instance.id``: null, laketail has no static
  members), ``client_id``, ``assignments``), and
  ``/{g}/consumers/{consumer_id}/assignments`` -- ``KafkaConsumerAssignment``;
* ``/{g}/lags`` -- ``KafkaConsumerLagList`` sorted by lag (largest first), then topic
  and partition, as Confluent sorts it; ``/{g}/lags/{topic}/partitions/{p}`` --
  ``KafkaConsumerLag`` (``current_offset``, ``log_end_offset``,
  ``lag = log_end_offset - current_offset``, ``consumer_id``, ``instance_id``,
  ``client_id``);
* ``/{g}/lag-summary`` -- ``KafkaConsumerGroupLagSummary`` (``max_lag`` and the
  consumer, client, topic and partition it belongs to, ``total_lag``).

laketail adds ``time_lag_ms`` to every lag (how long ago the first unconsumed record
was appended; 0 when caught up) and ``max_time_lag_ms`` to the summary. The numbers
come from :func:`laketail.coordinator.lag.group_lags`: every partition the group
committed or is assigned; ``current_offset`` is -1 where nothing is committed and the
lag then counts from the log start. A group the broker does not know is 404
GROUP_ID_NOT_FOUND (40406); a known group with nothing to measure has an empty lag
list and a zero summary.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api import authz
from laketail.api.deps import PartitionParam, broker_of, check_cluster, json_response
from laketail.api.routes.clusters import cluster_crn, cluster_url, list_metadata
from laketail.api.services import groups_of
from laketail.coordinator.groups import Group, Member
from laketail.coordinator.lag import PartitionLag, group_lags
from laketail.errors import GroupIdNotFound, UnknownMemberId
from laketail.request_processes import broker_id_of
from laketail.security.acl import ResourceType as R

router = APIRouter(tags=["v3 consumer groups"])

PREFIX = "/v3/clusters/{cluster_id}/consumer-groups"

_STATES = {
    "Empty": "EMPTY", "PreparingRebalance": "PREPARING_REBALANCE",
    "CompletingRebalance": "COMPLETING_REBALANCE", "Stable": "STABLE", "Dead": "DEAD",
}


def _seg(name: str | int) -> str:
    return quote(str(name), safe="")


def group_url(request: Request, cluster_id: str, group_id: str) -> str:
    return f"{cluster_url(request, cluster_id)}/consumer-groups/{_seg(group_id)}"


def group_crn(cluster_id: str, group_id: str) -> str:
    return f"{cluster_crn(cluster_id)}/consumer-group={group_id}"


def known_group(request: Request, cluster_id: str, group_id: str) -> Group:
    """The group, or GROUP_ID_NOT_FOUND when neither members nor offsets know it."""
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    group = groups_of(request).describe(group_id)
    if group.state == "Dead":
        raise GroupIdNotFound(f"consumer group '{group_id}' does not exist")
    return group


def group_doc(request: Request, cluster_id: str, group: Group) -> dict:
    broker = broker_of(request)
    url = group_url(request, cluster_id, group.group_id)
    return {
        "kind": "KafkaConsumerGroup",
        "metadata": {"self": url, "resource_name": group_crn(cluster_id, group.group_id)},
        "cluster_id": cluster_id,
        "consumer_group_id": group.group_id,
        "is_simple": groups_of(request).group(group.group_id) is None,
        "partition_assignor": group.protocol or "",
        "state": _STATES.get(group.state, "UNKNOWN"),
        "type": "CLASSIC",
        "is_mixed_consumer_group": False,
        "coordinator": {"related": f"{cluster_url(request, cluster_id)}/brokers/{broker_id_of(broker.broker_id)}"},
        "consumers": {"related": f"{url}/consumers"},
        "lag_summary": {"related": f"{url}/lag-summary"},
    }


def consumer_doc(request: Request, cluster_id: str, group_id: str, member: Member) -> dict:
    url = f"{group_url(request, cluster_id, group_id)}/consumers/{_seg(member.member_id)}"
    return {
        "kind": "KafkaConsumer",
        "metadata": {
            "self": url,
            "resource_name": f"{group_crn(cluster_id, group_id)}/consumer={member.member_id}",
        },
        "cluster_id": cluster_id,
        "consumer_group_id": group_id,
        "consumer_id": member.member_id,
        "instance_id": None,
        "client_id": member.client_id,
        "assignments": {"related": f"{url}/assignments"},
    }


def lag_doc(request: Request, cluster_id: str, lag: PartitionLag) -> dict:
    url = (f"{group_url(request, cluster_id, lag.group_id)}/lags/{_seg(lag.topic)}"
           f"/partitions/{lag.partition}")
    return {
        "kind": "KafkaConsumerLag",
        "metadata": {
            "self": url,
            "resource_name": (f"{group_crn(cluster_id, lag.group_id)}/lag={lag.topic}"
                              f"/partition={lag.partition}"),
        },
        "cluster_id": cluster_id,
        "consumer_group_id": lag.group_id,
        "topic_name": lag.topic,
        "partition_id": lag.partition,
        "current_offset": lag.current_offset,
        "log_end_offset": lag.log_end_offset,
        "lag": lag.lag,
        "consumer_id": lag.consumer_id,
        "instance_id": None,
        "client_id": lag.client_id,
        "time_lag_ms": lag.time_lag_ms,
    }


# -- groups ---------------------------------------------------------------------------------------


@router.get(PREFIX, summary="List consumer groups")
async def list_groups(request: Request, cluster_id: str) -> Response:
    broker = broker_of(request)
    check_cluster(broker, cluster_id)
    return json_response({
        "kind": "KafkaConsumerGroupList",
        "metadata": list_metadata(f"{cluster_url(request, cluster_id)}/consumer-groups"),
        "data": [group_doc(request, cluster_id, g) for g in groups_of(request).list_groups()
                 if authz.may_describe(request, R.GROUP, g.group_id)],
    })


@router.get(PREFIX + "/{group_id}", summary="Describe a consumer group")
async def get_group(request: Request, cluster_id: str, group_id: str) -> Response:
    return json_response(group_doc(request, cluster_id, known_group(request, cluster_id, group_id)))


# -- consumers ------------------------------------------------------------------------------------


def _member(group: Group, consumer_id: str) -> Member:
    member = group.members.get(consumer_id)
    if member is None:
        raise UnknownMemberId(f"consumer '{consumer_id}' is not in consumer group '{group.group_id}'")
    return member


@router.get(PREFIX + "/{group_id}/consumers", summary="List the group's consumers (members)")
async def list_consumers(request: Request, cluster_id: str, group_id: str) -> Response:
    group = known_group(request, cluster_id, group_id)
    return json_response({
        "kind": "KafkaConsumerList",
        "metadata": list_metadata(f"{group_url(request, cluster_id, group_id)}/consumers"),
        "data": [consumer_doc(request, cluster_id, group_id, m)
                 for m in sorted(group.members.values(), key=lambda m: m.member_id)],
    })


@router.get(PREFIX + "/{group_id}/consumers/{consumer_id}", summary="Describe one consumer")
async def get_consumer(request: Request, cluster_id: str, group_id: str, consumer_id: str) -> Response:
    group = known_group(request, cluster_id, group_id)
    return json_response(consumer_doc(request, cluster_id, group_id, _member(group, consumer_id)))


@router.get(PREFIX + "/{group_id}/consumers/{consumer_id}/assignments",
            summary="The partitions assigned to one consumer")
async def list_assignments(request: Request, cluster_id: str, group_id: str, consumer_id: str) -> Response:
    member = _member(known_group(request, cluster_id, group_id), consumer_id)
    base = f"{group_url(request, cluster_id, group_id)}/consumers/{_seg(consumer_id)}/assignments"
    cluster = cluster_url(request, cluster_id)
    data = []
    for topic, partition in member.assignment:
        data.append({
            "kind": "KafkaConsumerAssignment",
            "metadata": {
                "self": f"{base}/{_seg(topic)}/partitions/{partition}",
                "resource_name": (f"{group_crn(cluster_id, group_id)}/consumer={consumer_id}"
                                  f"/assignment={topic}/partition={partition}"),
            },
            "cluster_id": cluster_id,
            "consumer_group_id": group_id,
            "consumer_id": consumer_id,
            "topic_name": topic,
            "partition_id": partition,
            "partition": {"related": f"{cluster}/topics/{_seg(topic)}/partitions/{partition}"},
            "lag": {"related": f"{group_url(request, cluster_id, group_id)}/lags/{_seg(topic)}"
                               f"/partitions/{partition}"},
        })
    return json_response({"kind": "KafkaConsumerAssignmentList", "metadata": list_metadata(base), "data": data})


# -- lag ------------------------------------------------------------------------------------------


async def visible_lags(request: Request, group_id: str) -> list[PartitionLag]:
    """The group's lags, leaving out topics the principal may not Describe: Kafka answers
    an OffsetFetch only with the partitions of topics the caller may Describe."""
    lags = await group_lags(broker_of(request), group_id)
    shown = authz.describable(request, (lag.topic for lag in lags))
    return [lag for lag in lags if lag.topic in shown]


@router.get(PREFIX + "/{group_id}/lags", summary="Lag of every partition the group consumes")
async def list_lags(request: Request, cluster_id: str, group_id: str) -> Response:
    known_group(request, cluster_id, group_id)
    lags = await visible_lags(request, group_id)
    lags.sort(key=lambda lag: (-lag.lag, lag.topic, lag.partition))
    return json_response({
        "kind": "KafkaConsumerLagList",
        "metadata": list_metadata(f"{group_url(request, cluster_id, group_id)}/lags"),
        "data": [lag_doc(request, cluster_id, lag) for lag in lags],
    })


@router.get(PREFIX + "/{group_id}/lags/{topic}/partitions/{partition}", summary="Lag of one partition")
async def get_lag(request: Request, cluster_id: str, group_id: str, topic: str,
                  partition: PartitionParam) -> Response:
    known_group(request, cluster_id, group_id)
    broker = broker_of(request)
    broker.partition_state(topic, partition)  # 404 for a partition that does not exist
    for lag in await group_lags(broker, group_id):
        if lag.topic == topic and lag.partition == partition:
            return json_response(lag_doc(request, cluster_id, lag))
    raise GroupIdNotFound(f"consumer group '{group_id}' has no offset for {topic}-{partition}")


@router.get(PREFIX + "/{group_id}/lag-summary", summary="The group's largest and total lag")
async def get_lag_summary(request: Request, cluster_id: str, group_id: str) -> Response:
    known_group(request, cluster_id, group_id)
    lags = await visible_lags(request, group_id)
    url = group_url(request, cluster_id, group_id)
    worst = min(lags, key=lambda lag: (-lag.lag, lag.topic, lag.partition)) if lags else None
    doc = {
        "kind": "KafkaConsumerGroupLagSummary",
        "metadata": {"self": f"{url}/lag-summary", "resource_name": f"{group_crn(cluster_id, group_id)}/lag-summary"},
        "cluster_id": cluster_id,
        "consumer_group_id": group_id,
        "max_lag_consumer_id": worst.consumer_id if worst else "",
        "max_lag_instance_id": None,
        "max_lag_client_id": worst.client_id if worst else "",
        "max_lag_topic_name": worst.topic if worst else "",
        "max_lag_partition_id": worst.partition if worst else -1,
        "max_lag": worst.lag if worst else 0,
        "total_lag": sum(lag.lag for lag in lags),
        "max_lag_consumer": (
            {"related": f"{url}/consumers/{_seg(worst.consumer_id)}"} if worst and worst.consumer_id else None
        ),
        "max_lag_partition": (
            {"related": f"{cluster_url(request, cluster_id)}/topics/{_seg(worst.topic)}/partitions/{worst.partition}"}
            if worst else None
        ),
        "max_time_lag_ms": max((lag.time_lag_ms for lag in lags), default=0),
    }
    return json_response(doc)
