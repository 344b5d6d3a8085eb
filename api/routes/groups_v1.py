"""laketail's ``/v1`` group protocol: Kafka's consumer-group requests over HTTP.

What the Python client (``laketail.client.Consumer``) speaks; the semantics are the
group coordinator's (:mod:`laketail.coordinator.groups`), which computes the
assignment itself, so a member needs no assignor of its own:

* ``POST /v1/groups/{g}/join`` ``{member_id ("" when new), client_id, topics, strategies,
  session_timeout_ms, rebalance_timeout_ms, owned: [{topic, partition}]}`` ->
  ``{generation_id, member_id, leader_id, protocol, members}`` (``members`` only for the
  leader). It blocks until the rebalance completes, up to the rebalance timeout.
* ``POST /v1/groups/{g}/sync`` ``{generation_id, member_id}`` -> ``{assignment}``.
* ``POST /v1/groups/{g}/heartbeat`` ``{generation_id, member_id}`` -> ``{}``, or 409
  REBALANCE_IN_PROGRESS (40905: rejoin), 409 ILLEGAL_GENERATION (40904), 404
  UNKNOWN_MEMBER_ID (40405).
* ``POST /v1/groups/{g}/leave`` ``{member_id}`` -> 204.
* ``POST /v1/groups/{g}/commit`` ``{generation_id (-1: standalone), member_id,
  offsets: [{topic, partition, offset, metadata?}]}`` -> ``{}``. ``offset`` is Kafka's
  committed offset, the next offset to read (no +1: that is only v2's convention).
* ``POST /v1/groups/{g}/committed`` ``{partitions}`` -> ``{offsets: [{topic, partition,
  offset (-1 when none), metadata}]}``.
* ``POST /v1/groups/{g}/offsets/delete`` ``{partitions}`` -> ``{deleted: [{topic,
  partition}]}`` (Kafka's OffsetDelete: those that had an offset; 409
  GROUP_SUBSCRIBED_TO_TOPIC, nothing deleted, while a member is subscribed to one).
* ``GET /v1/groups`` -> ``{groups: [{group_id, state, protocol, members (a count)}]}``;
  ``GET /v1/groups/{g}`` -> ``{group_id, state, generation_id, protocol, leader_id,
  members: [{member_id, client_id, client_host, assignment}]}`` (state ``Dead`` for a
  group nobody knows, as Kafka describes one).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from laketail.api import authz
from laketail.api.deps import CommittedOffsetValue, Int32, broker_of, json_response
from laketail.api.services import groups_of
from laketail.coordinator.groups import Group
from laketail.coordinator.offsets import CommittedOffset
from laketail.security.acl import AclOperation as Op
from laketail.security.acl import ResourceType as R

router = APIRouter(tags=["v1 groups"])


class TopicPartitionModel(BaseModel):
    topic: str
    partition: Int32


class JoinRequest(BaseModel):
    member_id: str = ""
    client_id: str = "laketail"
    topics: list[str]
    strategies: list[str] = Field(default_factory=lambda: ["range", "cooperative-sticky"])
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    owned: list[TopicPartitionModel] | None = None


class MemberRequest(BaseModel):
    generation_id: int
    member_id: str


class LeaveRequest(BaseModel):
    member_id: str


class OffsetModel(BaseModel):
    topic: str
    partition: Int32
    offset: CommittedOffsetValue
    metadata: str | None = None


class CommitRequest(BaseModel):
    generation_id: int = -1
    member_id: str = ""
    offsets: list[OffsetModel]


class CommittedRequest(BaseModel):
    partitions: list[TopicPartitionModel]


def _tps(partitions: list[tuple[str, int]]) -> list[dict]:
    return [{"topic": t, "partition": p} for t, p in partitions]


@router.post("/v1/groups/{group}/join", summary="Join (or rejoin) the group; blocks until the rebalance completes")
async def join(request: Request, group: str, body: JoinRequest) -> Response:
    client = request.client
    result = await groups_of(request).join(
        group, body.member_id,
        topics=body.topics,
        strategies=body.strategies,
        client_id=body.client_id,
        client_host=client.host if client else "",
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=body.rebalance_timeout_ms,
        owned=None if body.owned is None else [(o.topic, o.partition) for o in body.owned],
    )
    return json_response({
        "generation_id": result.generation_id,
        "member_id": result.member_id,
        "leader_id": result.leader_id,
        "protocol": result.protocol,
        "members": result.members,
    })


@router.post("/v1/groups/{group}/sync", summary="This member's assignment for its generation")
async def sync(request: Request, group: str, body: MemberRequest) -> Response:
    assignment = groups_of(request).sync(group, body.generation_id, body.member_id)
    return json_response({"assignment": _tps(assignment)})


@router.post("/v1/groups/{group}/heartbeat", summary="Stay in the group (409 40905: rejoin)")
async def heartbeat(request: Request, group: str, body: MemberRequest) -> Response:
    groups_of(request).heartbeat(group, body.generation_id, body.member_id)
    return json_response({})


@router.post("/v1/groups/{group}/leave", status_code=204, summary="Leave the group")
async def leave(request: Request, group: str, body: LeaveRequest) -> Response:
    groups_of(request).leave(group, body.member_id)
    return Response(status_code=204)


@router.post("/v1/groups/{group}/commit", summary="Commit offsets (each the next offset to read)")
async def commit(request: Request, group: str, body: CommitRequest) -> Response:
    for t in {o.topic for o in body.offsets}:
        authz.check(request, Op.READ, R.TOPIC, t)  # OffsetCommit: Read on each topic
    broker = broker_of(request)
    now_ms = broker.clock.now_ms()
    offsets = {(o.topic, o.partition): CommittedOffset(o.offset, o.metadata or "", now_ms) for o in body.offsets}
    await groups_of(request).commit(group, offsets, generation_id=body.generation_id, member_id=body.member_id)
    return json_response({})


@router.post("/v1/groups/{group}/committed", summary="The group's committed offsets for some partitions")
async def committed(request: Request, group: str, body: CommittedRequest) -> Response:
    for t in {p.topic for p in body.partitions}:
        authz.check(request, Op.DESCRIBE, R.TOPIC, t)  # OffsetFetch: Describe on each topic
    found = groups_of(request).committed(group, [(p.topic, p.partition) for p in body.partitions])
    return json_response({"offsets": [
        {"topic": t, "partition": p, "offset": c.offset if c else -1, "metadata": c.metadata if c else ""}
        for (t, p), c in found.items()
    ]})


@router.post("/v1/groups/{group}/offsets/delete", summary="Delete a group's committed offsets (OffsetDelete)")
async def delete_offsets(request: Request, group: str, body: CommittedRequest) -> Response:
    for t in {p.topic for p in body.partitions}:
        authz.check(request, Op.READ, R.TOPIC, t)  # OffsetDelete: Read on each topic
    deleted = await groups_of(request).delete_offsets(group, [(p.topic, p.partition) for p in body.partitions])
    return json_response({"deleted": _tps(deleted)})


@router.get("/v1/groups", summary="List consumer groups")
async def list_groups(request: Request) -> Response:
    return json_response({"groups": [
        {"group_id": g.group_id, "state": g.state, "protocol": g.protocol or "", "members": len(g.members)}
        for g in groups_of(request).list_groups()
        if authz.may_describe(request, R.GROUP, g.group_id)
    ]})


def group_doc(group: Group) -> dict:
    return {
        "group_id": group.group_id,
        "state": group.state,
        "generation_id": group.generation_id,
        "protocol": group.protocol or "",
        "leader_id": group.leader_id or "",
        "members": [
            {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
             "assignment": _tps(m.assignment)}
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ],
    }


@router.get("/v1/groups/{group}", summary="Describe a consumer group: state, members, assignments")
async def describe_group(request: Request, group: str) -> Response:
    return json_response(group_doc(groups_of(request).describe(group)))
