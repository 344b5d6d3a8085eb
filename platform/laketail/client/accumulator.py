"""The producer's record accumulator: per-partition batches between ``produce()`` and the sender.

Role: ``produce()`` only appends here; the sender thread drains batches that are
ready. Kafka's rules, as its Java client and librdkafka apply them:

* A record goes to a partition chosen like Kafka: the explicit one; else the murmur2
  of its key (:func:`laketail.partitioner.partition_for_key`); else the topic's
  sticky partition, which moves on once the batch it fills is drained or full.
  A topic whose partition count is not known yet keeps its records *unassigned*, in
  order, until the sender has the count (:meth:`assign`); later records of that topic
  queue behind them so no key is reordered.
* A batch is ready when it holds ``batch.size`` bytes or ``batch.num.messages``
  records, when its oldest record has waited ``linger.ms``, when a newer batch
  queues behind it, or while someone flushes.
* One batch per partition is in flight at a time (the partition is *muted* until its
  batch is done), so a retried batch goes back to the head of its queue and records
  keep their order, as with Kafka's ``max.in.flight.requests.per.connection=1``.
* :attr:`pending` counts records appended and not yet done (delivered or failed).
* :meth:`purge` drops everything not in a request (``abort_transaction()``).

Thread-safety: every method takes the accumulator's condition; the API thread(s) and
the sender thread share it. The sender waits on it (:meth:`wait`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from laketail.partitioner import StickyPartitioner, partition_for_key

TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class PendingRecord:
    """One produced record waiting for its delivery report."""

    topic: str
    partition: int  # -1 until assigned
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp_ms: int
    on_delivery: Callable | None
    produced_at: float  # monotonic seconds
    size: int


@dataclass
class ProducerBatch:
    """Records for one partition, sent as one request.

    An idempotent producer stamps a batch once, when it is first sent, with its
    producer id, epoch and base sequence; every retry sends the same stamp, which is
    how the broker recognises it. ``maybe_written`` records that an attempt ended
    without an answer (the broker may have appended it).
    """

    topic: str
    partition: int
    created: float
    records: list[PendingRecord] = field(default_factory=list)
    size: int = 0
    attempts: int = 0
    retry_at: float = 0.0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False
    maybe_written: bool = False

    @property
    def stamped(self) -> bool:
        return self.base_sequence >= 0

    @property
    def first_produced(self) -> float:
        return self.records[0].produced_at


class RecordAccumulator:
    """Batches per partition, ready-batch draining, and the count of pending records."""

    def __init__(self, *, linger_ms: float, batch_size: int, batch_num_messages: int,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic  # the clock batches are aged by (the sender passes the same ``now``)
        self.linger_s = max(0.0, linger_ms / 1000.0)
        self.batch_size = max(1, batch_size)
        self.batch_num_messages = max(1, batch_num_messages)
        self._cond = threading.Condition()
        self._batches: dict[TopicPartitionKey, deque[ProducerBatch]] = {}
        self._unassigned: dict[str, list[PendingRecord]] = {}
        self._muted: set[TopicPartitionKey] = set()
        self._sticky: dict[str, int] = {}
        self._stickies: dict[str, StickyPartitioner] = {}
        self._flushing = 0
        self._closed = False
        self._changed = False  # set by every change, cleared by drain(): no lost wake-ups
        self.pending = 0

    # -- appending (API thread) -------------------------------------------------------------------

    def append(self, record: PendingRecord, partition_count: int | None) -> None:
        """Queue one record; ``partition_count`` None means the count is not known yet."""
        with self._cond:
            self.pending += 1
            if partition_count is None or record.topic in self._unassigned:
                self._unassigned.setdefault(record.topic, []).append(record)
            else:
                self._place(record, partition_count)
            self._notify()

    def _notify(self) -> None:
        self._changed = True
        self._cond.notify_all()

    def _place(self, record: PendingRecord, count: int) -> None:
        if record.partition < 0:
            if record.key is not None:
                record.partition = partition_for_key(record.key, count)
            else:
                record.partition = self._sticky_partition(record.topic, count)
        key = (record.topic, record.partition)
        queue = self._batches.setdefault(key, deque())
        batch = queue[-1] if queue else None
        # A batch that was sent once (a retry waiting at the head of the queue) is closed:
        # its retries must carry exactly the records, and sequence numbers, of the first try.
        if batch is None or batch.attempts or batch.base_sequence >= 0 or self._full(batch) or (
            batch.records and batch.size + record.size > self.batch_size
        ):
            batch = ProducerBatch(record.topic, record.partition, self.monotonic())
            queue.append(batch)
        batch.records.append(record)
        batch.size += record.size
        if self._full(batch) and self._sticky.get(record.topic) == record.partition:
            del self._sticky[record.topic]

    def _sticky_partition(self, topic: str, count: int) -> int:
        current = self._sticky.get(topic)
        if current is None or current >= count:
            sticky = self._stickies.setdefault(topic, StickyPartitioner())
            current = self._sticky[topic] = sticky.next_batch(count)
        return current

    def _full(self, batch: ProducerBatch) -> bool:
        return batch.size >= self.batch_size or len(batch.records) >= self.batch_num_messages

    # -- metadata (sender thread) -----------------------------------------------------------------

    def unassigned_topics(self) -> list[str]:
        with self._cond:
            return list(self._unassigned)

    def assign(self, topic: str, partition_count: int) -> None:
        """Place the topic's unassigned records now that its partition count is known."""
        with self._cond:
            for record in self._unassigned.pop(topic, []):
                self._place(record, partition_count)
            self._notify()

    def take_unassigned(self, topic: str) -> list[PendingRecord]:
        """Remove (to fail them) the topic's unassigned records."""
        with self._cond:
            records = self._unassigned.pop(topic, [])
            self.pending -= len(records)
            return records

    # -- draining (sender thread) -----------------------------------------------------------------

    def drain(self, now: float) -> tuple[list[ProducerBatch], float | None]:
        """Ready batches of unmuted partitions (now muted), and when the next one may
        become ready (None: nothing is waiting)."""
        ready: list[ProducerBatch] = []
        next_at: float | None = None
        with self._cond:
            self._changed = False
            for key, queue in self._batches.items():
                if not queue or key in self._muted:
                    continue
                batch = queue[0]
                due = batch.retry_at if batch.attempts else batch.created + self.linger_s
                if batch.attempts == 0 and (self._flushing or len(queue) > 1 or self._full(batch)):
                    due = now
                if due <= now:
                    queue.popleft()
                    self._muted.add(key)
                    ready.append(batch)
                    if self._sticky.get(batch.topic) == batch.partition:
                        del self._sticky[batch.topic]
                else:
                    next_at = due if next_at is None else min(next_at, due)
        return ready, next_at

    def requeue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch to retry back at the head of its partition's queue."""
        with self._cond:
            batch.retry_at = retry_at
            self._batches.setdefault((batch.topic, batch.partition), deque()).appendleft(batch)
            self._muted.discard((batch.topic, batch.partition))
            self._notify()

    def done(self, batch: ProducerBatch) -> None:
        """The batch was delivered or failed for good: unmute its partition."""
        with self._cond:
            self._muted.discard((batch.topic, batch.partition))
            self.pending -= len(batch.records)
            self._notify()

    def expire(self, now: float, timeout_s: float) -> list[ProducerBatch]:
        """Remove and return queued (not in-flight) batches whose oldest record is older
        than ``timeout_s``; a topic's unassigned records come back as one batch with
        partition -1."""
        expired: list[ProducerBatch] = []
        with self._cond:
            for topic, records in list(self._unassigned.items()):
                keep = [r for r in records if now - r.produced_at < timeout_s]
                old = [r for r in records if now - r.produced_at >= timeout_s]
                if old:
                    expired.append(ProducerBatch(topic, -1, now, old))
                if keep:
                    self._unassigned[topic] = keep
                else:
                    del self._unassigned[topic]
            for key, queue in self._batches.items():
                if key in self._muted:
                    continue
                while queue and now - queue[0].first_produced >= timeout_s:
                    expired.append(queue.popleft())
            self.pending -= sum(len(b.records) for b in expired)
        return expired

    def purge(self) -> list[ProducerBatch]:
        """Remove and return every batch not in a request right now (queued, lingering
        or waiting to be retried) and every unassigned record (as partition -1
        batches): what ``abort_transaction()`` drops."""
        purged: list[ProducerBatch] = []
        with self._cond:
            for topic, records in self._unassigned.items():
                purged.append(ProducerBatch(topic, -1, self.monotonic(), records))
            self._unassigned.clear()
            for queue in self._batches.values():  # in-flight batches are never queued
                purged.extend(queue)
                queue.clear()
            self._sticky.clear()
            self.pending -= sum(len(b.records) for b in purged)
            self._notify()
        return purged

    # -- waiting ------------------------------------------------------------------------------------

    def wait(self, until: float | None) -> None:
        """Block the sender until something changes or ``until`` (monotonic) passes."""
        with self._cond:
            if self._closed or self._changed:
                return
            timeout = None if until is None else max(0.0, until - self.monotonic())
            if timeout is None or timeout > 0:
                self._cond.wait(timeout if timeout is not None else 1.0)

    def wake(self) -> None:
        with self._cond:
            self._notify()

    def begin_flush(self) -> None:
        with self._cond:
            self._flushing += 1
            self._notify()

    def end_flush(self) -> None:
        with self._cond:
            self._flushing -= 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._notify()

    @property
    def closed(self) -> bool:
        return self._closed

    def snapshot(self) -> dict[str, Any]:
        """Counts for debugging: pending records, queued batches, muted partitions."""
        with self._cond:
            return {
                "pending": self.pending,
                "batches": sum(len(q) for q in self._batches.values()),
                "unassigned": sum(len(r) for r in self._unassigned.values()),
                "in_flight": len(self._muted),
            }
