"""``Producer``: confluent-kafka's producer API over laketail's gateway.

Role: the application-facing third of the producer (with the accumulator and the
sender). ``produce()`` checks a record, picks its partition when the topic's count
is known and appends it to the :class:`~laketail.client.accumulator.RecordAccumulator`;
it never does IO except a first, bounded metadata look-up per topic. The
:class:`~laketail.client.sender.Sender` thread sends batches; its delivery reports
``(err, msg)`` wait in a queue until ``poll()`` or ``flush()`` serves them on the
application's thread, as librdkafka does.

``len(producer)`` is the number of records not yet delivered plus delivery reports not
yet served; ``flush()`` returns it once it reaches 0 or the timeout passes.

Idempotence is on by default (``enable.idempotence``, Kafka 3's default; see
:func:`~laketail.client.config.producer_config` for the settings that turn it off or
conflict with it): a batch retried after a lost answer is not written twice. With
``transactional.id``, the transactional API of confluent-kafka --
``init_transactions()``, ``begin_transaction()``, ``send_offsets_to_transaction()``,
``commit_transaction()``, ``abort_transaction()`` -- makes the records produced and
the consumer offsets sent between begin and commit visible together or not at all
(readers with ``isolation.level=read_committed``). The state and the error rules
live in :mod:`laketail.client.transaction_manager`.
"""

from __future__ import annotations

import logging
import queue
import time
from typing import Any, Callable

import httpx

from laketail.client.accumulator import PendingRecord, RecordAccumulator
from laketail.client.config import ProducerConfig, producer_config
from laketail.client.consumer import ConsumerGroupMetadata
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.gateway import Gateway
from laketail.client.message import TIMESTAMP_CREATE_TIME, Message, TopicPartition, normalize_headers
from laketail.client.metadata import Metadata, cluster_metadata
from laketail.client.sender import Sender
from laketail.client.transaction_manager import Deadline, TransactionManager
from laketail.records import record_size

log = logging.getLogger(__name__)

DeliveryCallback = Callable[["KafkaError | None", Message], None]
#: A queued report: (callback, err, msg); msg None for an ``error_cb`` event.
Report = tuple["Callable | None", "KafkaError | None", "Message | None"]


def _bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be str, bytes or None, not {type(value).__name__}")


def _timeout_s(timeout: float | None) -> float | None:
    """confluent-kafka's timeouts: seconds, with -1 (or None) meaning forever."""
    return None if timeout is None or timeout < 0 else float(timeout)


class Producer:
    """Asynchronous producer with delivery reports, as ``confluent_kafka.Producer``.

    ``Producer(conf, transport=None, **kwargs)``: ``conf`` holds librdkafka property
    names (``bootstrap.servers``, ``acks``, ``linger.ms``, ``batch.size``,
    ``retries``, ``delivery.timeout.ms``, ``client.id``, ``enable.idempotence``,
    ``transactional.id``, ``transaction.timeout.ms``, ...); ``transport`` is an
    optional httpx transport for tests.
    """

    def __init__(self, config: dict[str, Any] | None = None, /, *,
                 transport: httpx.BaseTransport | None = None, **kwargs: Any) -> None:
        self._config: ProducerConfig = producer_config(config, kwargs)
        self._gateway = Gateway.for_client(
            self._config, transport=transport, on_error=self._error_event if self._config.error_cb else None)
        self._metadata = Metadata(self._gateway, self._config.metadata_max_age_ms, self._config.retry_backoff_ms,
                                  auto_create=True)
        self._accumulator = RecordAccumulator(
            linger_ms=self._config.linger_ms,
            batch_size=self._config.batch_size,
            batch_num_messages=self._config.batch_num_messages,
        )
        self._reports: queue.SimpleQueue[Report] = queue.SimpleQueue()
        self._txn = TransactionManager(self._config, self._gateway, on_fatal=self._fatal_event)
        self._sender = Sender(self._config, self._gateway, self._accumulator, self._metadata, self._report, self._txn)
        self._sender.start()
        self._closed = False

    # -- produce ------------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
        *,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Queue one record for ``topic``; its delivery report comes from ``poll()``.

        Raises ``BufferError`` when ``queue.buffering.max.messages`` records wait,
        ``KafkaException`` for a record above ``message.max.bytes`` or a partition the
        topic does not have, ``TypeError`` for a value, key or headers of a wrong type.
        """
        self._check_open()
        if not isinstance(topic, str) or not topic:
            raise TypeError("topic must be a non-empty str")
        self._txn.check_produce()
        value_b = _bytes(value, "value")
        key_b = _bytes(key, "key")
        header_list = normalize_headers(headers)
        size = record_size(key_b, value_b, header_list)
        if size > self._config.message_max_bytes:
            raise KafkaException(KafkaError(
                KafkaError.MSG_SIZE_TOO_LARGE,  # type: ignore[attr-defined]
                f"Broker: Message size too large: {size} bytes > message.max.bytes={self._config.message_max_bytes}",
            ))
        if self._accumulator.pending >= self._config.queue_buffering_max_messages:
            raise BufferError("Local: Queue full")
        count = self._partition_count(topic)
        partition = -1 if partition is None else int(partition)
        if partition >= 0 and count is not None and partition >= count:
            raise KafkaException(local_error("_UNKNOWN_PARTITION", f"Local: Unknown partition {partition} of {topic}"))
        record = PendingRecord(
            topic=topic,
            partition=partition if partition >= 0 else -1,
            key=key_b,
            value=value_b,
            headers=header_list,
            timestamp_ms=int(timestamp) if timestamp else time.time_ns() // 1_000_000,
            on_delivery=on_delivery or callback or self._config.on_delivery,
            produced_at=time.monotonic(),
            size=size,
        )
        self._accumulator.append(record, count)

    def _partition_count(self, topic: str) -> int | None:
        """The cached count; on a miss one bounded look-up, else None (the sender
        learns it later)."""
        hit = self._metadata.cached(topic)
        if hit is not False:
            return hit  # type: ignore[return-value]
        try:
            return self._metadata.lookup(topic, timeout_s=min(5.0, self._config.socket_timeout_ms / 1000.0))
        except KafkaException:
            return None

    def _report(self, record: PendingRecord, err: KafkaError | None, offset: int) -> None:
        """Called by the sender threads: queue one delivery report for ``poll()``."""
        msg = Message(
            topic=record.topic,
            partition=record.partition,
            offset=offset,
            key=record.key,
            value=record.value,
            headers=record.headers,
            error=err,
            timestamp=(TIMESTAMP_CREATE_TIME, record.timestamp_ms),
            latency=time.monotonic() - record.produced_at,
        )
        self._reports.put((record.on_delivery, err, msg))

    def _error_event(self, err: KafkaError) -> None:
        """A client-wide error for ``error_cb``, served by ``poll()`` like a report."""
        self._reports.put((self._config.error_cb, err, None))

    def _fatal_event(self, err: KafkaError) -> None:
        """A fatal error reaches ``error_cb`` as confluent-kafka passes it: the
        underlying error, with ``fatal()`` true."""
        if self._config.error_cb is not None:
            self._error_event(err)

    # -- delivery reports ---------------------------------------------------------------------------

    def poll(self, timeout: float | None = -1) -> int:
        """Serve queued delivery reports (waiting up to ``timeout`` s for the first);
        return how many were served."""
        wait_s = _timeout_s(timeout)
        served = 0
        try:
            item = self._reports.get(timeout=wait_s) if wait_s != 0 else self._reports.get_nowait()
        except queue.Empty:
            return 0
        while True:
            self._serve(*item)
            served += 1
            try:
                item = self._reports.get_nowait()
            except queue.Empty:
                return served

    def _serve(self, callback: Callable | None, err: KafkaError | None, msg: Message | None) -> None:
        if msg is None:  # an error_cb event
            if callback is not None:
                callback(err)
            return
        if callback is None or (err is None and self._config.delivery_report_only_error):
            return
        callback(err, msg)

    def flush(self, timeout: float | None = -1) -> int:
        """Send everything queued now (ignoring ``linger.ms``) and serve delivery reports
        until none are left or ``timeout`` s pass; return ``len(self)``."""
        wait_s = _timeout_s(timeout)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        self._accumulator.begin_flush()
        try:
            while len(self) > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self.poll(0.1 if left is None else min(0.1, left))
        finally:
            self._accumulator.end_flush()
        return len(self)

    def __len__(self) -> int:
        return self._accumulator.pending + self._reports.qsize()

    def __bool__(self) -> bool:
        return True  # a Producer is truthy even when its queue is empty (len() is 0)

    # -- metadata and lifecycle -----------------------------------------------------------------------

    def list_topics(self, topic: str | None = None, timeout: float | None = -1):
        """``ClusterMetadata`` of the cluster (or of one topic)."""
        self._check_open()
        return cluster_metadata(self._gateway, topic, _timeout_s(timeout))

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        raise KafkaException(local_error("_NOT_IMPLEMENTED", "purge() is not available in laketail's client"))

    # -- transactions --------------------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with the cluster: get the producer id and a new
        epoch, which fences any older producer with the same id and aborts its open
        transaction. Once per producer, before any other transactional call;
        ``timeout`` in seconds (None or -1: no limit). A retriable error may be retried."""
        self._check_open()
        self._txn.init_transactions(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: what is produced until commit or abort belongs to it."""
        self._check_open()
        self._txn.begin_transaction()

    def send_offsets_to_transaction(self, positions: list[TopicPartition], group_metadata: ConsumerGroupMetadata,
                                    timeout: float | None = None) -> None:
        """Commit the consumer's ``positions`` (the next offsets to read, as
        ``Consumer.position()`` gives them) to its group if, and only if, the
        transaction commits. ``group_metadata`` is ``consumer.consumer_group_metadata()``:
        a member of an older generation is refused (an abortable error). Negative
        offsets are left out; nothing left is a no-op."""
        self._check_open()
        if not isinstance(group_metadata, ConsumerGroupMetadata):
            raise TypeError("expected group_metadata from Consumer.consumer_group_metadata()")
        if group_metadata.group_id is None:
            raise KafkaException(local_error("_INVALID_ARG", "the consumer group metadata has no group.id"))
        offsets = [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset, "metadata": tp.metadata or ""}
                   for tp in positions if tp.offset >= 0]
        if not offsets:
            self._txn.require_transaction("send_offsets_to_transaction")
            return
        self._txn.send_offsets(offsets, group_metadata.group_id, group_metadata.generation_id,
                               group_metadata.member_id, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit the transaction: its records become visible to
        read_committed consumers and its offsets are committed. A retriable error
        (the flush or the coordinator did not finish in time) may be retried; after
        one that requires an abort, call ``abort_transaction()``."""
        self._check_open()
        deadline = Deadline(timeout)
        self._txn.begin_commit()
        left = self.flush(-1 if deadline.at is None else deadline.left())
        if left:
            raise KafkaException(local_error(
                "_TIMED_OUT", f"Failed to flush all outstanding messages within the API timeout: "
                f"{left} message(s) remaining", retriable=True))
        self._txn.end(True, deadline.left() if deadline.at is not None else None)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records still queued fail with ``_PURGE_QUEUE``, those
        in flight are waited for, then the coordinator writes ABORT markers so that
        read_committed consumers never see them; the sent offsets are dropped."""
        self._check_open()
        deadline = Deadline(timeout)
        self._txn.begin_abort()
        for batch in self._accumulator.purge():
            self._sender.fail(batch, local_error("_PURGE_QUEUE", "Local: Purged in queue"), done=False, purged=True)
        left = self.flush(-1 if deadline.at is None else deadline.left())
        if left:
            raise KafkaException(local_error(
                "_TIMED_OUT", f"Timed out waiting for {left} message(s) in flight to finish", retriable=True))
        self._txn.end(False, deadline.left() if deadline.at is not None else None)

    def close(self, timeout: float | None = -1) -> int:
        """Flush, then stop the sender; returns the records left undelivered."""
        if self._closed:
            return 0
        left = self.flush(timeout)
        self._closed = True
        self._sender.close(timeout_s=5.0)
        self._gateway.close()
        return left

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Producer has been closed")

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
