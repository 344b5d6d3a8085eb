"""Kafka's transaction APIs over the broker's transaction coordinator.

InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn call
``Broker.transactions`` -- the :class:`~laketail.coordinator.transactions.TransactionCoordinator`
the ``/v1/producers`` and ``/v1/transactions`` routes call -- so a transactional id has
one producer id and one epoch whichever protocol its producers speak: a Kafka producer's
InitProducerId fences a REST session of the same id, and the other way round. The
transactional records themselves go through Produce (:mod:`laketail.kafka.apis`), whose
batches carry the transactional bit and reach the same coordinator through
``Broker.produce``.

How Kafka's requests map onto the coordinator:

* AddPartitionsToTxn v0-3 (the client's versions; v4+ is KIP-890's broker-to-broker
  batch) -> ``add_partitions``;
* AddOffsetsToTxn -> ``add_offsets`` with no offsets: it opens the transaction and
  names the group (Kafka adds the group's ``__consumer_offsets`` partition);
* TxnOffsetCommit -> ``add_offsets`` with the offsets and the consumer's generation and
  member id: they reach the group only if the transaction commits;
* EndTxn -> ``end``; the markers are written before the answer (Kafka answers after
  PrepareCommit and writes them after), so a read_committed consumer sees the records
  as soon as the producer's commit returns.

Errors are the coordinator's, translated where Kafka's clients expect another code:
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for the versions before KIP-588 (InitProducerId
< v4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn < v2) and always for TxnOffsetCommit
and Produce, as Kafka's broker answers; an unknown transactional id is
INVALID_PRODUCER_ID_MAPPING (TRANSACTIONAL_ID_NOT_FOUND is only DescribeTransactions').

Authorization (Kafka's ``AclAuthorizer`` table): Write on the transactional id for all
five; AddPartitionsToTxn also Write on each topic; AddOffsetsToTxn and TxnOffsetCommit
Read on the group, TxnOffsetCommit Read on each topic.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from laketail.coordinator.offsets import CommittedOffset
from laketail.errors import TransactionalIdNotFound, UnknownTopicOrPartition
from laketail.kafka.apis import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ApiPart,
    Session,
    error_code,
)
from laketail.kafka.protocol import Request, ms
from laketail.security.acl import AclOperation, ResourceType

Op, R = AclOperation, ResourceType
INVALID_PRODUCER_EPOCH = 47
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90

#: api key -> the first version that knows PRODUCER_FENCED (KIP-588); older ones get
#: INVALID_PRODUCER_EPOCH. TxnOffsetCommit (28) never answers it.
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 1 << 15}


def txn_error_code(exc: BaseException, request: Request) -> int:
    """Kafka's code for an exception of the transaction coordinator, for this request."""
    if isinstance(exc, TransactionalIdNotFound):
        return INVALID_PRODUCER_ID_MAPPING
    code = error_code(exc)
    if code == PRODUCER_FENCED and request.api_version < _FENCED_SINCE.get(request.api_key, 0):
        return INVALID_PRODUCER_EPOCH
    return code


class TransactionApis(ApiPart):
    """The five transaction APIs of one Kafka listener (see the module docstring).
    Stateless; event loop thread only."""

    @property
    def handlers(self) -> dict[int, Callable[[Request, Session], Awaitable[dict]]]:
        return {22: self.init_producer_id, 24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn,
                26: self.end_txn, 28: self.txn_offset_commit}

    def _txn_denied(self, session: Session, transactional_id: str) -> int:
        """0, or the code answered when the principal may not Write the transactional id
        or this broker does not coordinate transactions."""
        if not self._allowed(session, Op.WRITE, R.TRANSACTIONAL_ID, transactional_id):
            return TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return self.coordinator_error()

    async def init_producer_id(self, request: Request, session: Session) -> dict:
        body = request.body
        out = {"throttle_time": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
        transactional_id = body.transactional_id
        if transactional_id is not None:
            if code := self._txn_denied(session, transactional_id):
                return {**out, "error_code": code}
            if not transactional_id:  # Kafka: null is idempotent, empty is a bad request
                return {**out, "error_code": INVALID_REQUEST}
            timeout_ms = ms(body.transaction_timeout)
            if not 1 <= timeout_ms <= self.broker.transactions.max_timeout_ms:
                return {**out, "error_code": INVALID_TRANSACTION_TIMEOUT}
        else:
            if not self.authorizer.authorize(session.principal, session.host, Op.IDEMPOTENT_WRITE, R.CLUSTER):
                return {**out, "error_code": CLUSTER_AUTHORIZATION_FAILED}
            timeout_ms = ms(body.transaction_timeout)
        expected = None
        pid, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        if pid >= 0 and epoch >= 0:  # KIP-360: a live producer asks for a bump of its own session
            expected = (pid, epoch)
        try:
            producer_id, producer_epoch = await self.broker.transactions.init_producer_id(
                transactional_id, timeout_ms, expected)
        except Exception as exc:  # noqa: BLE001 - answered as the request's error code
            return {**out, "error_code": txn_error_code(exc, request)}
        return {**out, "producer_id": producer_id, "producer_epoch": producer_epoch}

    async def add_partitions_to_txn(self, request: Request, session: Session) -> dict:
        body = request.body
        wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        codes: dict[tuple[str, int], int] = {}
        if code := self._txn_denied(session, body.v3_and_below_transactional_id):
            codes = {tp: code for tp in wanted}
        else:
            # Kafka: any partition refused fails the whole request; the others are
            # OPERATION_NOT_ATTEMPTED (nothing was added)
            for topic in {t for t, _ in wanted}:
                if not self._allowed(session, Op.WRITE, R.TOPIC, topic):
                    codes.update({tp: TOPIC_AUTHORIZATION_FAILED for tp in wanted if tp[0] == topic})
            for tp in wanted:
                if tp not in codes:
                    try:
                        self.broker.check_partition(*tp)
                    except UnknownTopicOrPartition as exc:
                        codes[tp] = exc.kafka_code
            if codes:
                codes = {tp: codes.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
            else:
                try:
                    await self.broker.transactions.add_partitions(
                        body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                        body.v3_and_below_producer_epoch, wanted)
                    code = 0
                except Exception as exc:  # noqa: BLE001 - every partition gets the request's code
                    code = txn_error_code(exc, request)
                codes = {tp: code for tp in wanted}
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), code in codes.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
        return {"throttle_time": 0, "results_by_topic_v3_and_below": [
            {"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]}

    async def add_offsets_to_txn(self, request: Request, session: Session) -> dict:
        body = request.body
        if code := self._txn_denied(session, body.transactional_id):
            return {"throttle_time": 0, "error_code": code}
        if not self._allowed(session, Op.READ, R.GROUP, body.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
        try:
            await self.broker.transactions.add_offsets(
                body.transactional_id, body.producer_id, body.producer_epoch, body.group_id, {})
        except Exception as exc:  # noqa: BLE001 - answered as the request's error code
            return {"throttle_time": 0, "error_code": txn_error_code(exc, request)}
        return {"throttle_time": 0, "error_code": 0}

    async def txn_offset_commit(self, request: Request, session: Session) -> dict:
        body = request.body
        wanted = [(t.name, p) for t in body.topics for p in t.partitions]
        codes: dict[tuple[str, int], int] = {}
        if code := self._txn_denied(session, body.transactional_id):
            codes = {(t, p.partition_index): code for t, p in wanted}
        elif not self._allowed(session, Op.READ, R.GROUP, body.group_id):
            codes = {(t, p.partition_index): GROUP_AUTHORIZATION_FAILED for t, p in wanted}
        else:
            denied = {t for t, _ in wanted if not self._allowed(session, Op.READ, R.TOPIC, t)}
            codes = {(t, p.partition_index): TOPIC_AUTHORIZATION_FAILED for t, p in wanted if t in denied}
            offsets = {(t, p.partition_index): CommittedOffset(p.committed_offset, p.committed_metadata or "",
                                                               self.broker.clock.now_ms())
                       for t, p in wanted if t not in denied}
            if offsets:
                try:
                    await self.broker.transactions.add_offsets(
                        body.transactional_id, body.producer_id, body.producer_epoch, body.group_id, offsets,
                        generation_id=getattr(body, "generation_id", -1), member_id=getattr(body, "member_id", ""))
                    code = 0
                except Exception as exc:  # noqa: BLE001 - all or nothing
                    code = txn_error_code(exc, request)
                codes.update({tp: code for tp in offsets})
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), code in codes.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
        return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def end_txn(self, request: Request, session: Session) -> dict:
        body = request.body
        if code := self._txn_denied(session, body.transactional_id):
            return {"throttle_time": 0, "error_code": code}
        try:
            await self.broker.transactions.end(body.transactional_id, body.producer_id, body.producer_epoch,
                                               commit=body.committed)
        except Exception as exc:  # noqa: BLE001 - answered as the request's error code
            return {"throttle_time": 0, "error_code": txn_error_code(exc, request)}
        return {"throttle_time": 0, "error_code": 0}

