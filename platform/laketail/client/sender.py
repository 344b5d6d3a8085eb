"""The producer's sender: a thread that drains ready batches to the gateway and reports.

Role: loop until closed --

1. learn the partition count of topics whose records wait unassigned (a topic that
   does not exist fails its records with ``UNKNOWN_TOPIC_OR_PART``);
2. fail records that waited longer than ``delivery.timeout.ms`` (``_MSG_TIMED_OUT``);
3. once the producer has its producer id (idempotence: the
   :class:`~laketail.client.transaction_manager.TransactionManager` asks for it here),
   drain ready batches, stamp each with its producer id, epoch and sequence, and hand
   it to a small pool of request threads, one batch per partition at a time.

A batch is one request: ``POST /v1/topics/{t}/partitions/{p}/records?acks=..`` with an
Arrow IPC stream (columns ``key``, ``value``, ``headers``, ``timestamp`` in ms), plus
``producer_id``, ``producer_epoch``, ``sequence`` and ``transactional`` for a stamped
batch, sent to the partition's leader when metadata knows it
(:meth:`~laketail.client.metadata.Metadata.leader_url`; any broker would forward it).
The answer's ``base_offset`` gives record *i* the offset ``base_offset + i``. A
retriable error (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, transport, timeout, ...) puts the batch back at the
head of its partition after ``retry.backoff.ms``, with its stamp, while ``retries``
and ``delivery.timeout.ms`` allow (and no transaction is being aborted: then it fails
with ``_PURGE_INFLIGHT``); those that say the leader moved or is gone
(:data:`~laketail.client.metadata.REFRESH_CODES`) also have the topic's leaders asked
for again before the retry. Any other error fails the batch's records, and the
transaction manager hears of every failure. Each record gets exactly one
delivery report, handed to ``report(record, err, offset)``; the producer queues it
for ``poll()``.

Thread-safety: the sender thread and the request threads touch shared state only
through the accumulator and ``report``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pyarrow as pa

from laketail.client.accumulator import PendingRecord, ProducerBatch, RecordAccumulator
from laketail.client.config import ProducerConfig
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.gateway import ARROW_STREAM, Gateway
from laketail.client.message import OFFSET_INVALID
from laketail.client.metadata import REFRESH_CODES, Metadata
from laketail.client.transaction_manager import TransactionManager
from laketail.records import HEADER_TYPE

log = logging.getLogger(__name__)

Report = Callable[[PendingRecord, "KafkaError | None", int], None]

_BATCH_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
    pa.field("timestamp", pa.int64()),
])


def encode_batch(records: list[PendingRecord]) -> bytes:
    """The batch as an Arrow IPC stream in the gateway's produce columns."""
    headers = [
        None if r.headers is None else [{"key": k, "value": v} for k, v in r.headers] for r in records
    ]
    table = pa.Table.from_arrays(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array(headers, HEADER_TYPE),
            pa.array([r.timestamp_ms for r in records], pa.int64()),
        ],
        schema=_BATCH_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _BATCH_SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class Sender:
    """The background half of the producer."""

    def __init__(
        self,
        config: ProducerConfig,
        gateway: Gateway,
        accumulator: RecordAccumulator,
        metadata: Metadata,
        report: Report,
        txn: TransactionManager,
    ) -> None:
        self.config = config
        self.txn = txn
        self.gateway = gateway
        self.accumulator = accumulator
        self.metadata = metadata
        self.report = report
        self.delivery_timeout_s = config.delivery_timeout_ms / 1000.0
        self.backoff_s = config.retry_backoff_ms / 1000.0
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, config.max_in_flight_batches), thread_name_prefix="laketail-producer-request"
        )
        self._thread = threading.Thread(target=self._run, name="laketail-producer-sender", daemon=True)
        self._stopped = threading.Event()
        self._metadata_retry_at: dict[str, float] = {}

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float | None = None) -> None:
        self.accumulator.close()
        self._stopped.set()
        self._thread.join(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the loop -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self.accumulator.closed:
            try:
                now = time.monotonic()
                self._resolve_topics(now)
                for expired in self.accumulator.expire(now, self.delivery_timeout_s):
                    self.fail(expired, local_error("_MSG_TIMED_OUT"), done=False)
                if self.txn.ready(now):
                    batches, next_at = self.accumulator.drain(now)
                else:  # no producer id yet: nothing may be stamped
                    batches, next_at = [], self.txn.retry_at()
                for batch in batches:
                    refused = self.txn.stamp(batch)
                    if refused is not None:
                        self.fail(batch, refused)
                        continue
                    try:
                        self._pool.submit(self._send, batch)
                    except RuntimeError:  # the interpreter is exiting under an unclosed producer
                        return
                if self._metadata_retry_at:
                    retry = min(self._metadata_retry_at.values())
                    next_at = retry if next_at is None else min(next_at, retry)
                self.accumulator.wait(next_at)
            except Exception:  # the sender must outlive any one bad turn
                log.exception("producer %s: sender loop turn failed", self.config.client_id)
                time.sleep(self.backoff_s)

    def _resolve_topics(self, now: float) -> None:
        for topic in self.accumulator.unassigned_topics():
            if self._metadata_retry_at.get(topic, 0.0) > now:
                continue
            try:
                count = self.metadata.lookup(topic)
            except KafkaException as exc:
                log.debug("metadata for %s: %s", topic, exc)
                self._metadata_retry_at[topic] = now + self.backoff_s
                continue
            self._metadata_retry_at.pop(topic, None)
            if count is None:
                err = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,  # type: ignore[attr-defined]
                                 f"Broker: Unknown topic or partition: topic '{topic}' does not exist")
                records = self.accumulator.take_unassigned(topic)
                if records:
                    self.fail(ProducerBatch(topic, -1, now, records), err, done=False)
            else:
                self.accumulator.assign(topic, count)

    # -- one request --------------------------------------------------------------------------------

    def _send(self, batch: ProducerBatch) -> None:
        batch.attempts += 1
        try:
            resp = self.gateway.request(
                "POST",
                f"/v1/topics/{batch.topic}/partitions/{batch.partition}/records",
                params={"acks": self.config.acks, **self.txn.params(batch)},
                content=encode_batch(batch.records),
                headers={"Content-Type": ARROW_STREAM},
                timeout_s=self.config.socket_timeout_ms / 1000.0,
                broker=self.metadata.leader_url(batch.topic, batch.partition),
            )
        except KafkaException as exc:
            self._failed(batch, exc.args[0])
            return
        except Exception as exc:  # a bug must not lose the batch's reports
            log.exception("producer %s: produce request to %s-%s failed", self.config.client_id, batch.topic,
                          batch.partition)
            self._failed(batch, local_error("_FAIL", repr(exc)))
            return
        offsets = (resp.json() or {}).get("offsets") if resp.content else None
        base = OFFSET_INVALID
        for span in offsets or []:
            if span.get("partition") == batch.partition:
                base = span["base_offset"]
        self.accumulator.done(batch)
        for i, record in enumerate(batch.records):
            self.report(record, None, base + i if base >= 0 else OFFSET_INVALID)

    def _failed(self, batch: ProducerBatch, err: KafkaError) -> None:
        now = time.monotonic()
        retry_at = now + self.backoff_s
        in_time = retry_at - batch.first_produced < self.delivery_timeout_s
        may_retry = self.txn.attempt_failed(batch, err)
        if err.code() in REFRESH_CODES:
            self.metadata.invalidate(batch.topic)
        if err.retriable() and batch.attempts <= self.config.retries and in_time and not self.accumulator.closed:
            if may_retry:
                log.debug("retrying %s-%d after %s", batch.topic, batch.partition, err)
                self.accumulator.requeue(batch, retry_at)
                return
            err = local_error("_PURGE_INFLIGHT", f"Local: Purged in flight (the transaction is aborting): {err.str()}")
        if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:  # type: ignore[attr-defined]
            self.metadata.forget(batch.topic)
        self.fail(batch, err)

    def fail(self, batch: ProducerBatch, err: KafkaError, *, done: bool = True, purged: bool = False) -> None:
        """Fail a batch for good: the transaction manager hears of it, each record gets
        its report. ``done`` unmutes its partition (a batch that was drained)."""
        err = self.txn.batch_failed(batch, err, purged=purged)
        if done:
            self.accumulator.done(batch)
        for record in batch.records:
            self.report(record, err, OFFSET_INVALID)
