"""The transaction admin APIs of ``kafka-transactions.sh`` (KIP-664): ListTransactions,
DescribeTransactions and DescribeProducers.

* ListTransactions v0-1 lists the transactional ids the transaction coordinator
  (``TransactionCoordinator.list_transactions``) knows, with their producer id and
  state, filtered as Kafka's ``TransactionStateManager`` filters: by state (a state
  Kafka does not know is echoed in ``unknown_state_filters``), by producer id, and (v1)
  by ``duration_filter``: only transactions started at least that many milliseconds ago
  (one that never started, start -1, passes, as in Kafka).
* DescribeTransactions v0 answers per transactional id its state, timeout, start time
  (-1 when none is open), producer id and epoch and the partitions of the open
  transaction (TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know).
* DescribeProducers v0 answers, on the partition's leader, the producer state of its
  log (``Broker.producers``): each idempotent or transactional producer's epoch, last
  sequence, last timestamp and the first offset of its open transaction (-1 for
  none); NOT_LEADER_OR_FOLLOWER on another broker, UNKNOWN_TOPIC_OR_PARTITION. The
  coordinator epoch is -1 (laketail's markers carry none).

The first two are the coordinator's (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
elsewhere, as every coordinator API). Authorization, as Kafka's ``AclAuthorizer``:
Describe on each transactional id (ListTransactions leaves out the ones denied,
DescribeTransactions answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and lists only the
topics the principal may Describe); DescribeProducers Read on each topic.
"""

from __future__ import annotations

import datetime
from typing import Awaitable, Callable

from laketail.errors import LaketailError
from laketail.kafka.apis import (
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ApiPart,
    Session,
    error_code,
    error_message,
)
from laketail.kafka.leadership import NOT_LEADER_OR_FOLLOWER
from laketail.kafka.protocol import Request
from laketail.security.acl import AclOperation, ResourceType

Op, R = AclOperation, ResourceType
#: every state Kafka's ListTransactions filters on (laketail's coordinator uses the first six)
KAFKA_TXN_STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                              "CompleteAbort", "Dead", "PrepareEpochFence"})


def _timestamp(at_ms: int) -> datetime.datetime:
    """Kafka's i64 milliseconds as kio's timezone-aware timestamp (-1 stays -1)."""
    return datetime.datetime.fromtimestamp(at_ms / 1000, tz=datetime.timezone.utc)


class TransactionAdminApis(ApiPart):
    """ListTransactions, DescribeTransactions, DescribeProducers (see the module
    docstring). Stateless; event loop thread only."""

    @property
    def handlers(self) -> dict[int, Callable[[Request, Session], Awaitable[dict]]]:
        return {61: self.describe_producers, 65: self.describe_transactions, 66: self.list_transactions}

    async def list_transactions(self, request: Request, session: Session) -> dict:
        body = request.body
        out: dict = {"throttle_time": 0, "error_code": 0, "unknown_state_filters": [], "transaction_states": []}
        if code := self.coordinator_error():
            return {**out, "error_code": code}
        states = set(body.state_filters)
        pids = set(body.producer_id_filters)
        duration_ms = getattr(body, "duration_filter", -1)
        now_ms = self.broker.clock.now_ms()
        listed = []
        for meta in self.broker.transactions.list_transactions():
            if (states and meta.state not in states) or (pids and meta.producer_id not in pids):
                continue
            if duration_ms >= 0 and now_ms - meta.start_ms < duration_ms:
                continue
            if not self.authorizer.authorize(session.principal, session.host, Op.DESCRIBE, R.TRANSACTIONAL_ID,
                                             meta.transactional_id, audit_denied=False):
                continue
            listed.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                           "transaction_state": meta.state})
        return {**out, "unknown_state_filters": sorted(states - KAFKA_TXN_STATES), "transaction_states": listed}

    async def describe_transactions(self, request: Request, session: Session) -> dict:
        coordinator = self.coordinator_error()
        answers = []
        for transactional_id in request.body.transactional_ids:
            out: dict = {"error_code": 0, "transactional_id": transactional_id, "transaction_state": "",
                         "transaction_timeout": 0, "transaction_start_time": _timestamp(-1), "producer_id": -1,
                         "producer_epoch": -1, "topics": []}
            if not self._allowed(session, Op.DESCRIBE, R.TRANSACTIONAL_ID, transactional_id):
                answers.append({**out, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
                continue
            if coordinator:
                answers.append({**out, "error_code": coordinator})
                continue
            try:
                meta = self.broker.transactions.describe(transactional_id)
            except LaketailError as exc:
                answers.append({**out, "error_code": exc.kafka_code})
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(meta.partitions):
                by_topic.setdefault(topic, []).append(partition)
            answers.append({**out, "transaction_state": meta.state, "transaction_timeout": meta.timeout_ms,
                            "transaction_start_time": _timestamp(meta.start_ms), "producer_id": meta.producer_id,
                            "producer_epoch": meta.producer_epoch, "topics": [
                                {"topic": t, "partitions": ps} for t, ps in by_topic.items()
                                if self.authorizer.authorize(session.principal, session.host, Op.DESCRIBE,
                                                             R.TOPIC, t, audit_denied=False)]})
        return {"throttle_time": 0, "transaction_states": answers}

    async def describe_producers(self, request: Request, session: Session) -> dict:
        topics = []
        for topic in request.body.topics:
            allowed = self._allowed(session, Op.READ, R.TOPIC, topic.name)
            topics.append({"name": topic.name, "partitions": [
                self._producers(topic.name, p) if allowed else
                {"partition_index": p, "error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": None,
                 "active_producers": []}
                for p in topic.partition_indexes]})
        return {"throttle_time": 0, "topics": topics}

    def _producers(self, topic: str, partition: int) -> dict:
        out: dict = {"partition_index": partition, "error_code": 0, "error_message": None, "active_producers": []}
        try:
            self.broker.check_partition(topic, partition)
            if not self.broker.leads(topic, partition):
                return {**out, "error_code": NOT_LEADER_OR_FOLLOWER,
                        "error_message": "this broker does not lead the partition"}
            producers = self.broker.producers(topic, partition)
        except Exception as exc:  # noqa: BLE001 - unknown topic or partition, answered per partition
            return {**out, "error_code": error_code(exc), "error_message": error_message(exc)}
        return {**out, "active_producers": [
            {"producer_id": pid, "producer_epoch": entry.epoch,
             "last_sequence": entry.batches[-1].last_seq if entry.batches else -1,
             "last_timestamp": entry.last_timestamp_ms if entry.batches else -1, "coordinator_epoch": -1,
             "current_txn_start_offset": -1 if entry.txn_first_offset is None else entry.txn_first_offset}
            for pid, entry in sorted(producers.items())]}
