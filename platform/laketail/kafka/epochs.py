"""OffsetForLeaderEpoch (API 23): where a leader epoch ended, so clients validate positions.

After a leader change a consumer (librdkafka, Kafka's Java client, KIP-320) asks the new
leader where the leader epoch of the last record it read ended; an end offset below its
position means the log was truncated under it (an unclean election), and it resets
rather than skip or re-read silently. The answer comes from the leader's replica: its
leader epochs with the offset each began at (``PartitionLog.epochs``, noted by
``assign_epoch`` on election and by every appended frame) and its log end offset, read
through ``Broker.epoch_history`` (from a sibling request process that leads the
partition, its ``epochs`` over its inter-broker listener: :mod:`laketail.kafka.siblings`).

:func:`epoch_end_offset` is the rule of Kafka's ``LeaderEpochFileCache.endOffsetFor``:

* the latest epoch ends at the log end offset;
* an older epoch the log knows, or one between two it knows, is answered as the largest
  known epoch at or below it, ending where the next known epoch starts;
* an epoch older than every one the log knows is answered as itself, ending where the
  oldest known epoch starts;
* an epoch newer than the latest (or -1) is UNDEFINED: ``(-1, -1)``.

Per partition, as Kafka's broker: TOPIC_AUTHORIZATION_FAILED without Describe on the
topic (a consumer, ``replica_id`` -1; another replica id needs ClusterAction on the
cluster), UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER off the leader, and
``current_leader_epoch`` (the leader epoch the client's metadata knows; -1: unchecked)
older than the leader's FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (the client
refreshes its metadata and asks again). Versions 2-4: the ones carrying
``current_leader_epoch``, which every client that validates sends.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from laketail.cluster.node import INTERNAL
from laketail.kafka.apis import TOPIC_AUTHORIZATION_FAILED, ApiPart, Session, error_code
from laketail.kafka.leadership import NOT_LEADER_OR_FOLLOWER
from laketail.kafka.protocol import Request
from laketail.security.acl import AclOperation, ResourceType

Op, R = AclOperation, ResourceType
CLUSTER_AUTHORIZATION_FAILED = 31
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 76
CONSUMER_REPLICA_ID = -1
UNDEFINED = (-1, -1)


def epoch_end_offset(epochs: list[tuple[int, int]], requested: int, log_end_offset: int) -> tuple[int, int]:
    """``(epoch, end offset)`` Kafka answers for ``requested`` given the log's leader
    epochs ``(epoch, start offset)`` oldest first (see the module docstring)."""
    if requested < 0 or not epochs:
        return UNDEFINED
    if requested == epochs[-1][0]:
        return requested, log_end_offset
    later = next((i for i, (epoch, _) in enumerate(epochs) if epoch > requested), None)
    if later is None:
        return UNDEFINED  # newer than any epoch this log had
    if later == 0:
        return requested, epochs[0][1]
    return epochs[later - 1][0], epochs[later][1]


class EpochApis(ApiPart):
    """OffsetForLeaderEpoch for one Kafka listener. Stateless; event loop thread only."""

    @property
    def handlers(self) -> dict[int, Callable[[Request, Session], Awaitable[dict]]]:
        return {23: self.offset_for_leader_epoch}

    async def offset_for_leader_epoch(self, request: Request, session: Session) -> dict:
        body = request.body
        replica_id = getattr(body, "replica_id", CONSUMER_REPLICA_ID)
        cluster_denied = replica_id != CONSUMER_REPLICA_ID and not self._allowed(session, Op.CLUSTER_ACTION,
                                                                                 R.CLUSTER)
        topics = []
        for topic in body.topics:
            if cluster_denied:
                denied = CLUSTER_AUTHORIZATION_FAILED
            else:
                denied = 0 if self._allowed(session, Op.DESCRIBE, R.TOPIC, topic.topic) else TOPIC_AUTHORIZATION_FAILED
            topics.append({"topic": topic.topic, "partitions": list(await asyncio.gather(*(
                self._partition(topic.topic, p.partition, p.current_leader_epoch, p.leader_epoch, denied)
                for p in topic.partitions)))})
        return {"throttle_time": 0, "topics": topics}

    async def _partition(self, topic: str, partition: int, current: int, requested: int, denied: int) -> dict:
        out = {"error_code": denied, "partition": partition, "leader_epoch": -1, "end_offset": -1}
        if denied:
            return out
        try:
            state = self.broker.partition_state(topic, partition)
            if not self.broker.leads(topic, partition):
                if not self.siblings.is_sibling(state.leader):
                    return {**out, "error_code": NOT_LEADER_OR_FOLLOWER}
                leader_epoch, epochs, log_end_offset = await self._sibling_epochs(topic, partition)
            else:
                leader_epoch = state.leader_epoch
                epochs, log_end_offset = self.broker.epoch_history(topic, partition)
            if current >= 0 and current != leader_epoch:
                return {**out, "error_code": FENCED_LEADER_EPOCH if current < leader_epoch
                        else UNKNOWN_LEADER_EPOCH}
        except Exception as exc:  # noqa: BLE001 - unknown topic or partition, answered per partition
            return {**out, "error_code": error_code(exc)}
        epoch, end = epoch_end_offset(epochs, requested, log_end_offset)
        return {**out, "leader_epoch": epoch, "end_offset": end}

    async def _sibling_epochs(self, topic: str, partition: int) -> tuple[int, list[tuple[int, int]], int]:
        """``(leader epoch, epochs, log end offset)`` of a partition a sibling request
        process leads, asked of it (one local hop)."""
        resp = await self.broker.cluster.call_leader(topic, partition, "GET",
                                                     f"{INTERNAL}/partitions/{topic}/{partition}/epochs")
        doc: Any = resp.json()
        return doc["leader_epoch"], [(e, o) for e, o in doc["epochs"]], doc["log_end_offset"]
