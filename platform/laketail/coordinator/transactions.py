"""The transaction coordinator: producer ids, transactional ids, two-phase commit.

Role: Kafka's transaction protocol on laketail's logs.

* ``init_producer_id`` -- a producer id (and epoch 0) for an idempotent producer; for a
  ``transactional.id``, the same producer id with the epoch bumped, which fences the
  previous session (its requests now get PRODUCER_FENCED) and aborts its open
  transaction.
* ``add_partitions`` / transactional produce -- the transaction becomes Ongoing and
  remembers every partition it touched (a transactional produce adds its partition
  itself, as the broker-side defence of KIP-890 does).
* ``add_offsets`` -- consumer offsets sent to the transaction; they are committed to
  the group only if the transaction commits.
* ``end(commit)`` -- PrepareCommit/PrepareAbort is written to ``__transaction_state``
  (the point of no return), then a COMMIT/ABORT control row to every touched
  partition, then (on commit) the offsets to ``__consumer_offsets``, then
  CompleteCommit/CompleteAbort. A broker that crashes after the prepare finishes the
  transaction when it starts again (:meth:`recover`).
* ``transaction.timeout.ms`` -- :meth:`tick` aborts transactions left open longer, with
  an epoch bump so the late producer is fenced.

Batch transactions (Spark's exactly-once sink): many sessions enlist under one batch
id of one sink; :meth:`commit_batch` commits exactly the sessions it is given, together,
and remembers the batch id; committing a batch id already committed is a no-op that
aborts the sessions enlisted since (a replayed batch writes nothing twice).

Fault injection (tests only): ``LAKETAIL_FAULT_PAUSE_AFTER_PREPARE_MS``, read once when
the coordinator is built, makes every commit or abort wait that long right after its
PrepareCommit/PrepareAbort is in ``__transaction_state`` and before any marker is
written, so a test can kill the broker at exactly that point. Unset (the default), it
costs nothing.

State lives in the internal compacted topic ``__transaction_state`` (key: the
transactional id, or ``__sink:<id>`` / ``__producer_id_block``), JSON values, cached in
memory and rebuilt from the log at start. Thread-safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import orjson
import pyarrow as pa

from laketail.bounds import INT64_MAX, bounded_int
from laketail.coordinator.offsets import (
    CommittedOffset,
    TopicPartition,
    check_commit,
    partition_for_group,
)
from laketail.errors import (
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTxnState,
    ProducerFenced,
    TransactionalIdNotFound,
    UnknownTopicOrPartition,
)
from laketail.records import build_frame_batch
from laketail.storage.partition_log import ProducerBatch

if TYPE_CHECKING:
    from laketail.broker import Broker

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
PID_BLOCK_KEY = "__producer_id_block"
PID_BLOCK_SIZE = 1000
SINK_PREFIX = "__sink:"
#: See the module docstring: a test-only pause between PREPARE and the markers.
FAULT_PAUSE_AFTER_PREPARE_ENV = "LAKETAIL_FAULT_PAUSE_AFTER_PREPARE_MS"

TxnState = Literal["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"]


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = "Empty"
    partitions: set[TopicPartition] = field(default_factory=set)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    start_ms: int = -1

    def to_json(self) -> bytes:
        return orjson.dumps({
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state,
            "partitions": sorted([t, p] for t, p in self.partitions),
            "offsets": {
                g: [[t, p, c.offset, c.metadata] for (t, p), c in sorted(offs.items())]
                for g, offs in self.offsets.items()
            },
            "start_ms": self.start_ms,
        })

    @classmethod
    def from_json(cls, transactional_id: str, raw: bytes) -> "TxnMetadata":
        doc = orjson.loads(raw)
        return cls(
            transactional_id,
            doc["producer_id"],
            doc["producer_epoch"],
            doc["timeout_ms"],
            doc["state"],
            {(t, p) for t, p in doc["partitions"]},
            {g: {(t, p): CommittedOffset(o, m) for t, p, o, m in offs} for g, offs in doc["offsets"].items()},
            doc["start_ms"],
        )


@dataclass
class SinkState:
    sink_id: str
    committed_batch: int = -1
    enlisted: dict[int, list[str]] = field(default_factory=dict)  # batch id -> transactional ids
    committing: tuple[int, list[str]] | None = None

    def to_json(self) -> bytes:
        return orjson.dumps({
            "committed_batch": self.committed_batch,
            "enlisted": {str(b): ids for b, ids in self.enlisted.items()},
            "committing": list(self.committing) if self.committing else None,
        })

    @classmethod
    def from_json(cls, sink_id: str, raw: bytes) -> "SinkState":
        doc = orjson.loads(raw)
        committing = doc.get("committing")
        return cls(
            sink_id,
            doc["committed_batch"],
            {int(b): ids for b, ids in doc["enlisted"].items()},
            (committing[0], committing[1]) if committing else None,
        )


class TransactionCoordinator:
    def __init__(
        self,
        broker: "Broker",
        *,
        num_partitions: int = 50,
        max_timeout_ms: int = 900_000,
    ) -> None:
        self.broker = broker
        self.num_partitions = num_partitions
        self.max_timeout_ms = max_timeout_ms
        self._txns: dict[str, TxnMetadata] = {}
        self._by_pid: dict[int, str] = {}
        self._sinks: dict[str, SinkState] = {}
        self._next_pid = 0
        self._pid_block_end = 0
        self._lock = asyncio.Lock()
        self._topic_ready = False
        self._pause_after_prepare_s = int(os.environ.get(FAULT_PAUSE_AFTER_PREPARE_ENV) or 0) / 1000

    # -- the log -----------------------------------------------------------------------------

    async def _ensure_topic(self) -> None:
        if self._topic_ready:
            return
        if TXN_TOPIC not in self.broker.list_topics():
            await self.broker.create_topic(
                TXN_TOPIC, self.num_partitions, self.broker.settings.transaction_state_log_replication_factor,
                {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
            )
        self.num_partitions = self.broker.topic(TXN_TOPIC).partitions
        self._topic_ready = True

    async def _write(self, key: str, value: bytes | None) -> None:
        await self._ensure_topic()
        batch = pa.RecordBatch.from_pydict({
            "key": pa.array([key.encode()], pa.binary()),
            "value": pa.array([value], pa.binary()),
            "partition": pa.array([partition_for_group(key, self.num_partitions)], pa.int32()),
        })
        await self.broker.produce(TXN_TOPIC, batch, acks="all")

    async def load(self) -> None:
        """Rebuild from ``__transaction_state`` (latest value per key)."""
        if TXN_TOPIC not in self.broker.list_topics():
            return
        self._topic_ready = True
        self.num_partitions = self.broker.topic(TXN_TOPIC).partitions
        latest: dict[str, bytes | None] = {}
        for partition in range(self.num_partitions):
            async for records in self.broker.read_to_log_end(TXN_TOPIC, partition):
                for key, value in zip(records.column("key").to_pylist(), records.column("value").to_pylist()):
                    latest[key.decode()] = value
        for key, value in latest.items():
            if value is None:
                continue
            if key == PID_BLOCK_KEY:
                end = orjson.loads(value)["end"]
                self._next_pid = self._pid_block_end = end
            elif key.startswith(SINK_PREFIX):
                sink = SinkState.from_json(key[len(SINK_PREFIX):], value)
                self._sinks[sink.sink_id] = sink
            else:
                meta = TxnMetadata.from_json(key, value)
                self._txns[key] = meta
                self._by_pid[meta.producer_id] = key

    async def recover(self) -> None:
        """Finish what a crash interrupted: prepared transactions and batch commits."""
        for meta in list(self._txns.values()):
            if meta.state in ("PrepareCommit", "PrepareAbort"):
                log.info("completing transaction %s (%s) after restart", meta.transactional_id, meta.state)
                await self._complete(meta, meta.state == "PrepareCommit")
        for sink in list(self._sinks.values()):
            if sink.committing is not None:
                batch_id, ids = sink.committing
                await self._finish_batch(sink, batch_id, ids)

    # -- producer ids --------------------------------------------------------------------------------

    async def _new_producer_id(self) -> int:
        if self._next_pid >= self._pid_block_end:
            end = max(self._pid_block_end, self._next_pid) + PID_BLOCK_SIZE
            await self._write(PID_BLOCK_KEY, orjson.dumps({"end": end}))
            self._pid_block_end = end
        pid = self._next_pid
        self._next_pid += 1
        return pid

    async def init_producer_id(
        self,
        transactional_id: str | None = None,
        timeout_ms: int = 60_000,
        expected: tuple[int, int] | None = None,
    ) -> tuple[int, int]:
        """(producer id, epoch) for a new producer session.

        ``expected`` is the (producer id, epoch) a live producer holds when it asks for a
        bump after an abort (Kafka's KIP-360): the bump happens only if that session is
        still the current one, else PRODUCER_FENCED, so a late caller never fences the
        session that replaced it."""
        async with self._lock:
            if expected is not None and transactional_id:
                meta = self._txns.get(transactional_id)
                if meta is not None and (meta.producer_id, meta.producer_epoch) != tuple(expected):
                    raise ProducerFenced(
                        f"'{transactional_id}' is at producer {meta.producer_id} epoch {meta.producer_epoch}, "
                        f"not {expected[0]} epoch {expected[1]}"
                    )
            if not transactional_id:
                return await self._new_producer_id(), 0
            if not 1 <= timeout_ms <= self.max_timeout_ms:
                raise InvalidRequest(
                    f"transaction.timeout.ms={timeout_ms} is outside [1, {self.max_timeout_ms}]"
                )
            meta = self._txns.get(transactional_id)
            if meta is None:
                meta = TxnMetadata(transactional_id, await self._new_producer_id(), 0, timeout_ms)
            else:
                if meta.state == "Ongoing":
                    await self._prepare_and_complete(meta, commit=False)  # the old session's
                elif meta.state in ("PrepareCommit", "PrepareAbort"):
                    await self._complete(meta, meta.state == "PrepareCommit")
                if meta.producer_epoch >= 32766:  # Kafka moves to a new producer id at Short.MAX
                    meta.producer_id = await self._new_producer_id()
                    meta.producer_epoch = 0
                else:
                    meta.producer_epoch += 1
                meta.timeout_ms = timeout_ms
                meta.state = "Empty"
            self._txns[transactional_id] = meta
            self._by_pid[meta.producer_id] = transactional_id
            await self._write(transactional_id, meta.to_json())
            return meta.producer_id, meta.producer_epoch

    def _check(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise TransactionalIdNotFound(f"transactional id '{transactional_id}' is unknown; init it first")
        if meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"producer id {producer_id} is not the one of '{transactional_id}'"
            )
        if producer_epoch < meta.producer_epoch:
            raise ProducerFenced(
                f"'{transactional_id}' epoch {producer_epoch} was fenced by epoch {meta.producer_epoch}"
            )
        if producer_epoch > meta.producer_epoch:
            raise InvalidProducerIdMapping(f"epoch {producer_epoch} of '{transactional_id}' was never issued")
        if meta.state in ("PrepareCommit", "PrepareAbort"):
            raise ConcurrentTransactions(f"'{transactional_id}' is completing its transaction")
        return meta

    # -- a transaction's life -------------------------------------------------------------------------

    def _begin(self, meta: TxnMetadata) -> None:
        if meta.state != "Ongoing":
            meta.state = "Ongoing"
            meta.start_ms = self.broker.clock.now_ms()
            meta.partitions = set()
            meta.offsets = {}

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> None:
        async with self._lock:
            meta = self._check(transactional_id, producer_id, producer_epoch)
            for topic, partition in partitions:
                self.broker.partition_state(topic, partition)  # UNKNOWN_TOPIC_OR_PARTITION
            self._begin(meta)
            if not set(partitions) <= meta.partitions:
                meta.partitions |= set(partitions)
                await self._write(transactional_id, meta.to_json())

    async def check_transactional_produce(self, producer_id: int, producer_epoch: int,
                                          topic: str, partition: int) -> None:
        """Before a transactional append: the producer is current and its transaction
        includes the partition (added here if it was not)."""
        transactional_id = self._by_pid.get(producer_id)
        if transactional_id is None:
            raise InvalidProducerIdMapping(f"producer id {producer_id} has no transactional id")
        await self.add_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)])

    def check_idempotent_produce(self, producer_id: int, producer_epoch: int) -> None:
        """A non-transactional batch from a transactional producer must still be current."""
        transactional_id = self._by_pid.get(producer_id)
        if transactional_id is not None:
            self._check(transactional_id, producer_id, producer_epoch)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                          generation_id: int = -1, member_id: str = "") -> None:
        """Offsets to commit for ``group_id`` if, and only if, the transaction commits."""
        async with self._lock:
            meta = self._check(transactional_id, producer_id, producer_epoch)
            if generation_id >= 0 or member_id:
                self.broker.groups.check_member(group_id, generation_id, member_id)
            # Checked now, not at commit: after PREPARE the commit cannot fail any more,
            # and a refused request must leave the transaction as it was.
            check_commit(self.broker.topic, offsets)
            self._begin(meta)
            meta.offsets.setdefault(group_id, {}).update(offsets)
            await self._write(transactional_id, meta.to_json())

    async def end(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnState:
        async with self._lock:
            meta = self._check(transactional_id, producer_id, producer_epoch)
            if meta.state != "Ongoing":
                if meta.state in ("Empty", "CompleteCommit", "CompleteAbort"):
                    return meta.state  # nothing open: committing or aborting nothing is fine
                raise InvalidTxnState(f"'{transactional_id}' is {meta.state}")
            await self._prepare_and_complete(meta, commit)
            return meta.state

    async def _prepare_and_complete(self, meta: TxnMetadata, commit: bool) -> None:
        meta.state = "PrepareCommit" if commit else "PrepareAbort"
        await self._write(meta.transactional_id, meta.to_json())
        if self._pause_after_prepare_s > 0:
            log.warning("fault injection: %s is %s; pausing %.1fs before its markers",
                        meta.transactional_id, meta.state, self._pause_after_prepare_s)
            await asyncio.sleep(self._pause_after_prepare_s)
        await self._complete(meta, commit)

    async def _complete(self, meta: TxnMetadata, commit: bool) -> None:
        kind = "COMMIT" if commit else "ABORT"
        await asyncio.gather(*(
            self.write_marker(topic, partition, meta.producer_id, meta.producer_epoch, kind)
            for topic, partition in sorted(meta.partitions)
        ))
        if commit:
            for group_id, offsets in meta.offsets.items():
                # A topic deleted since add_offsets must not leave the transaction
                # prepared forever (recover() would fail every start): skip it.
                live = {tp: c for tp, c in offsets.items() if self._partition_exists(*tp)}
                for topic, partition in offsets.keys() - live.keys():
                    log.warning("%s: %s-%d is gone; its offset for group %s is dropped",
                                meta.transactional_id, topic, partition, group_id)
                await self.broker.offsets.commit(group_id, live)
        meta.state = "CompleteCommit" if commit else "CompleteAbort"
        meta.partitions = set()
        meta.offsets = {}
        await self._write(meta.transactional_id, meta.to_json())

    def _partition_exists(self, topic: str, partition: int) -> bool:
        try:
            self.broker.partition_state(topic, partition)
        except UnknownTopicOrPartition:
            return False
        return True

    async def write_marker(self, topic: str, partition: int, producer_id: int, epoch: int, kind: str) -> None:
        if not self._partition_exists(topic, partition):
            return  # the topic was deleted meanwhile
        marker = build_frame_batch(
            timestamps_us=[self.broker.clock.now_ms() * 1000], keys=[None], values=[None],
            producer_id=producer_id, producer_epoch=epoch, transactional=True, control=kind,
        )
        # acks=all: a marker is only written once every in-sync replica has it.
        await self.broker.append(topic, partition, marker, "all",
                                 producer=ProducerBatch(producer_id, epoch, -1, True, kind))

    def tick(self) -> list[str]:
        """Transactions open past ``transaction.timeout.ms``; :meth:`expire` aborts them."""
        now = self.broker.clock.now_ms()
        return [
            m.transactional_id for m in self._txns.values()
            if m.state == "Ongoing" and now - m.start_ms > m.timeout_ms
        ]

    async def expire(self) -> int:
        """Abort timed-out transactions and bump their epoch (fencing the late producer)."""
        expired = self.tick()
        async with self._lock:
            for transactional_id in expired:
                meta = self._txns[transactional_id]
                if meta.state != "Ongoing":
                    continue
                log.info("aborting %s: open longer than transaction.timeout.ms", transactional_id)
                await self._prepare_and_complete(meta, commit=False)
                meta.producer_epoch += 1
                await self._write(transactional_id, meta.to_json())
        return len(expired)

    def describe(self, transactional_id: str) -> TxnMetadata:
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise TransactionalIdNotFound(f"transactional id '{transactional_id}' is unknown")
        return meta

    # -- batch transactions (Spark's sink) -------------------------------------------------------------

    async def enlist(self, sink_id: str, batch_id: int, timeout_ms: int = 60_000) -> tuple[str, int, int]:
        """A fresh transactional session for one writer attempt of ``batch_id``."""
        _check_batch_id(batch_id)
        transactional_id = f"{SINK_PREFIX}{sink_id}:{batch_id}:{uuid.uuid4().hex[:12]}"
        producer_id, epoch = await self.init_producer_id(transactional_id, timeout_ms)
        async with self._lock:
            sink = self._sinks.setdefault(sink_id, SinkState(sink_id))
            sink.enlisted.setdefault(batch_id, []).append(transactional_id)
            await self._write(SINK_PREFIX + sink_id, sink.to_json())
        return transactional_id, producer_id, epoch

    async def commit_batch(self, sink_id: str, batch_id: int, transactional_ids: list[str]) -> bool:
        """Commit exactly ``transactional_ids`` as batch ``batch_id`` (abort the batch's
        other sessions). False, with every session of the batch aborted, when the batch
        id was committed before. A batch nobody enlisted is INVALID_TXN_STATE: committing
        it would only move the sink's committed batch id past batches still to come."""
        _check_batch_id(batch_id)
        async with self._lock:
            sink = self._sinks.setdefault(sink_id, SinkState(sink_id))
            if batch_id <= sink.committed_batch:
                await self._abort_sessions(sink.enlisted.pop(batch_id, []))
                await self._write(SINK_PREFIX + sink_id, sink.to_json())
                return False
            if batch_id not in sink.enlisted:
                raise InvalidTxnState(
                    f"nobody enlisted in batch {batch_id} of '{sink_id}': enlist a session first, "
                    "or abort the batch when it wrote nothing"
                )
            unknown = [t for t in transactional_ids if t not in sink.enlisted.get(batch_id, [])]
            if unknown:
                raise InvalidTxnState(f"sessions {unknown} were not enlisted in batch {batch_id} of '{sink_id}'")
            # A session aborted meanwhile (transaction.timeout.ms) lost its records:
            # the batch must not be reported committed without them.
            lost = [
                t for t in transactional_ids
                if (meta := self._txns.get(t)) is None or meta.state in ("PrepareAbort", "CompleteAbort")
            ]
            if lost:
                raise InvalidTxnState(
                    f"sessions {lost} of batch {batch_id} of '{sink_id}' were aborted "
                    "(transaction.timeout.ms?); abort the batch and write it again"
                )
            sink.committing = (batch_id, list(transactional_ids))
            await self._write(SINK_PREFIX + sink_id, sink.to_json())  # the batch's point of no return
            await self._finish_batch(sink, batch_id, transactional_ids)
            return True

    async def _finish_batch(self, sink: SinkState, batch_id: int, transactional_ids: list[str]) -> None:
        for transactional_id in transactional_ids:
            meta = self._txns.get(transactional_id)
            if meta is None:
                continue
            if meta.state == "Ongoing":
                await self._prepare_and_complete(meta, commit=True)
            elif meta.state in ("PrepareCommit", "PrepareAbort"):
                await self._complete(meta, True)
        others = [t for t in sink.enlisted.get(batch_id, []) if t not in transactional_ids]
        await self._abort_sessions(others)
        sink.committed_batch = max(sink.committed_batch, batch_id)
        sink.committing = None
        for b in [b for b in sink.enlisted if b <= batch_id]:
            del sink.enlisted[b]
        await self._write(SINK_PREFIX + sink.sink_id, sink.to_json())
        for transactional_id in transactional_ids + others:  # sessions are single-use
            await self._forget(transactional_id)

    async def abort_batch(self, sink_id: str, batch_id: int) -> None:
        _check_batch_id(batch_id)
        async with self._lock:
            sink = self._sinks.setdefault(sink_id, SinkState(sink_id))
            ids = sink.enlisted.pop(batch_id, [])
            await self._abort_sessions(ids)
            await self._write(SINK_PREFIX + sink_id, sink.to_json())
            for transactional_id in ids:
                await self._forget(transactional_id)

    async def _abort_sessions(self, transactional_ids: list[str]) -> None:
        for transactional_id in transactional_ids:
            meta = self._txns.get(transactional_id)
            if meta is not None and meta.state == "Ongoing":
                await self._prepare_and_complete(meta, commit=False)

    async def _forget(self, transactional_id: str) -> None:
        meta = self._txns.get(transactional_id)
        if meta is not None and meta.state in ("Empty", "CompleteCommit", "CompleteAbort"):
            # A tombstone keeps __transaction_state small; nobody is ever handed this
            # transactional id again, so its producer id stays unusable.
            del self._txns[transactional_id]
            await self._write(transactional_id, None)

    def sink(self, sink_id: str) -> SinkState:
        return self._sinks.get(sink_id) or SinkState(sink_id)


def _check_batch_id(batch_id: int) -> None:
    """A sink's batch id is Spark's ``batchId``, a non-negative int64 (INVALID_REQUEST)."""
    bounded_int(batch_id, "batch id", 0, INT64_MAX)
