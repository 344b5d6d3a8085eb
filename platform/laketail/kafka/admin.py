"""Kafka's group, topic and cluster admin APIs: DeleteGroups, OffsetDelete,
CreatePartitions, DescribeCluster.

* DeleteGroups v0-2 calls ``GroupCoordinator.delete``: NON_EMPTY_GROUP while the group
  has members; its offsets are tombstoned and the group forgotten.
* OffsetDelete v0 tombstones a group's offsets (``OffsetStore.delete``), refusing
  (GROUP_SUBSCRIBED_TO_TOPIC) a topic a member is subscribed to.
* CreatePartitions v0-3 calls ``Broker.create_partitions`` (the controller adds the
  partitions, as v3's ``PATCH .../partitions_count`` does): INVALID_PARTITIONS for a
  count not above the topic's or past the partition limits, UNKNOWN_TOPIC_OR_PARTITION
  for a topic that does not exist, INVALID_REQUEST for a topic named twice and for
  explicit replica assignments (not served, as in CreateTopics); ``validate_only``
  checks and adds nothing.
* DescribeCluster v0-1: the brokers Metadata lists and the controller; the controller
  endpoint type (2) is UNSUPPORTED_ENDPOINT_TYPE.

Authorization, as Kafka's ``AclAuthorizer``: DeleteGroups Delete on each group;
OffsetDelete Delete on the group and Read on each topic; CreatePartitions Alter on each
topic; DescribeCluster needs nothing,
its authorized operations (KIP-430) need Describe on the cluster.

The config APIs are in :mod:`laketail.kafka.configs`, the ACL APIs in
:mod:`laketail.kafka.acls`.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from laketail.kafka.acl_codes import (
    NOT_ASKED,
    authorized_operations,
)
from laketail.kafka.apis import (
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    ApiPart,
    Session,
    error_code,
    error_message,
)
from laketail.kafka.protocol import Request
from laketail.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
)

Op, R = AclOperation, ResourceType
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNSUPPORTED_ENDPOINT_TYPE = 119


class AdminApis(ApiPart):
    """The group and cluster admin APIs of one Kafka listener (see the module docstring).
    Stateless; event loop thread only."""

    @property
    def handlers(self) -> dict[int, Callable[[Request, Session], Awaitable[dict]]]:
        return {37: self.create_partitions, 42: self.delete_groups, 47: self.offset_delete,
                60: self.describe_cluster}

    async def delete_groups(self, request: Request, session: Session) -> dict:
        results = []
        for group_id in request.body.groups_names:
            code = GROUP_AUTHORIZATION_FAILED if not self._allowed(session, Op.DELETE, R.GROUP, group_id) else (
                self.coordinator_error())
            if not code:
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
        if code := self.coordinator_error():
            return answer(code, {})
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

    # -- topics ----------------------------------------------------------------------------------

    async def create_partitions(self, request: Request, session: Session) -> dict:
        body = request.body
        names = [t.name for t in body.topics]
        results = []
        for t in body.topics:
            out: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
            if names.count(t.name) > 1:
                out.update(error_code=INVALID_REQUEST, error_message="Duplicate topic in request.")
            elif not self._allowed(session, Op.ALTER, R.TOPIC, t.name):
                out["error_code"] = TOPIC_AUTHORIZATION_FAILED
            elif t.assignments is not None:
                out.update(error_code=INVALID_REQUEST, error_message="explicit replica assignments are not served")
            else:
                try:
                    await self.broker.create_partitions(t.name, t.count, validate_only=body.validate_only)
                except Exception as exc:  # noqa: BLE001 - answered as the topic's error code
                    out.update(error_code=error_code(exc), error_message=error_message(exc))
            results.append(out)
        return {"throttle_time": 0, "results": results}

    # -- cluster ---------------------------------------------------------------------------------

    async def describe_cluster(self, request: Request, session: Session) -> dict:
        body = request.body
        out: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
                               "cluster_id": self.broker.cluster_id or "", "controller_id": self.controller_id(),
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
