"""Produce and Fetch are the partition leader's, as on Kafka's brokers.

Metadata names each partition's leader (from the cluster image), and a Kafka client
sends a partition's Produce and Fetch there. A request that reaches another broker
(the client's metadata is stale: an election moved the leader) is answered
NOT_LEADER_OR_FOLLOWER for that partition, which makes the client refresh its
metadata and retry at the new leader; Fetch v12 also carries the leader it knows
(``current_leader``, KIP-595's hint). The HTTP routes forward such requests to the
leader instead (§8); the Kafka listener answers as Kafka does, so clients learn where
to go rather than paying a forward on every request.

:class:`LeaderGate` wraps the Produce handler of
:class:`~laketail.kafka.apis.KafkaApis`: it takes the partitions this broker does not
lead out of the request, lets the handler answer the rest, and adds the refusals to
its answer. Fetch asks it per partition (``fetch_refusal``), since a fetch session's
partitions need not be in the request; a refused partition is an error, so that fetch
answers at once rather than long-polling the rest. A partition the cluster image gives
this broker (an election it has not opened its replica for yet) and an unknown one go
to the handler, which answers them as before. A broker that leads everything (alone, the common case)
costs one lookup per partition. ``acks=0`` produce is never refused: that client reads
no answer, so the broker forwards it as the REST path does. Produce v10+ answers carry
KIP-951's hints: each refused partition's ``current_leader`` and the leaders'
``node_endpoints``; Fetch v16 answers carry the same ``node_endpoints`` (the fetch handler
adds them, :meth:`LeaderGate.endpoints_of`).

With request processes (:mod:`laketail.kafka.siblings`) a partition a sibling process
leads is this broker's: it goes to the handler, which hands its append to the sibling
or reads it from the sibling's files; the hints name brokers as clients see them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from laketail.cluster.metadata import NO_LEADER
from laketail.kafka.protocol import Request

if TYPE_CHECKING:
    from laketail.kafka.apis import KafkaApis, Session

NOT_LEADER_OR_FOLLOWER = 6
Handler = Callable[[Request, "Session"], Awaitable[Any]]


class LeaderGate:
    """Refuses Produce and Fetch partitions led elsewhere (see the module docstring).
    Stateless; event loop thread only."""

    def __init__(self, apis: "KafkaApis") -> None:
        self.broker = apis.broker
        self.brokers = apis.brokers
        self.siblings = apis.siblings

    def leader_elsewhere(self, topic: str, partition: int) -> tuple[int, int] | None:
        """``(leader id, leader epoch)`` when another broker leads the partition (or none
        does), None when this broker leads it, is about to, or does not know it."""
        if self.broker.leads(topic, partition):
            return None
        try:
            state = self.broker.partition_state(topic, partition)
        except Exception:  # noqa: BLE001 - unknown topic or partition: the handler answers it
            return None
        if state.leader == self.broker.broker_id or (state.leader == NO_LEADER and not state.replicas):
            return None  # elected here a moment ago, or a broker without a cluster image
        if self.siblings.is_sibling(state.leader):
            return None  # another request process of this broker: the handler reaches it
        return self.siblings.outward(state.leader), state.leader_epoch

    def produce(self, handler: Handler) -> Handler:
        async def gated(request: Request, session: "Session") -> Any:
            body = request.body
            if body.acks == 0:
                return await handler(request, session)
            refused: dict[str, list[dict]] = {}
            kept = []
            for topic in body.topic_data:
                parts = []
                for part in topic.partition_data:
                    if self.leader_elsewhere(topic.name, part.index) is None:
                        parts.append(part)
                    else:
                        refused.setdefault(topic.name, []).append(
                            {"index": part.index, "error_code": NOT_LEADER_OR_FOLLOWER, "base_offset": -1,
                             "log_start_offset": -1, "record_errors": [],
                             "error_message": "this broker does not lead the partition"})
                if parts:
                    kept.append(dataclasses.replace(topic, partition_data=tuple(parts)))
            if not refused:
                return self._leader_hints(await handler(request, session))
            answer: dict = {"responses": [], "throttle_time": 0}
            if kept:
                answer = await handler(_with_body(request, dataclasses.replace(body, topic_data=tuple(kept))),
                                       session)
            return self._leader_hints(_merge(answer, refused, "responses", "name", "partition_responses"))

        return gated

    def _leader_hints(self, answer: dict | None) -> dict | None:
        """KIP-951 (Produce v10+, tagged fields older versions do not write): every
        partition answered NOT_LEADER_OR_FOLLOWER, refused here or by the replica, names
        its leader and epoch as the cluster image has them (-1 when it has none), and the
        answer lists those leaders' endpoints on this listener, as Kafka's
        ``KafkaApis.handleProduceRequest`` does, so the client retries there without
        waiting for a Metadata round trip."""
        if answer is None:
            return None
        leaders: set[int] = set()
        for topic in answer["responses"]:
            for part in topic["partition_responses"]:
                if part["error_code"] != NOT_LEADER_OR_FOLLOWER:
                    continue
                try:
                    state = self.broker.partition_state(topic["name"], part["index"])
                    leader, epoch = self.siblings.outward(state.leader), state.leader_epoch
                except Exception:  # noqa: BLE001 - a partition the image lacks: no hint
                    leader, epoch = NO_LEADER, -1
                part["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
                leaders.add(leader)
        if leaders:
            answer["node_endpoints"] = self.endpoints_of(leaders)
        return answer

    def endpoints_of(self, leaders: set[int]) -> list[dict]:
        """KIP-951's ``node_endpoints``: where ``leaders`` listen on this listener (the
        ones Metadata would list; none for a broker it would not)."""
        return [{"node_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                for b in self.brokers() if b["node_id"] in leaders]

    def fetch_refusal(self, topic: str, partition: int) -> dict | None:
        """A Fetch partition's answer fields when another broker leads it (with Fetch
        v12's ``current_leader``), None when this broker answers it. Asked per partition
        of the fetch context (a fetch session's partitions are not in the request), after
        the Read check, as Kafka's ``KafkaApis`` authorizes before it reads."""
        elsewhere = self.leader_elsewhere(topic, partition)
        if elsewhere is None:
            return None
        return {"error_code": NOT_LEADER_OR_FOLLOWER,
                "current_leader": {"leader_id": elsewhere[0], "leader_epoch": elsewhere[1]}}


def _with_body(request: Request, body: Any) -> Request:
    return dataclasses.replace(request, body=body)


def _merge(answer: dict, refused: dict[str, list[dict]], key: str, name: str, parts: str) -> dict:
    """``answer`` with the refused partitions added under their topics."""
    topics = {t[name]: t for t in answer[key]}
    for topic, entries in refused.items():
        if topic in topics:
            topics[topic][parts] = list(topics[topic][parts]) + entries
        else:
            answer[key].append({name: topic, parts: entries})
    return answer
