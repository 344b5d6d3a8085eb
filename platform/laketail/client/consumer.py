"""``Consumer``: confluent-kafka's consumer API over laketail's gateway.

Role: the application-facing part of the consumer. It owns

* the :class:`~laketail.client.fetcher.Fetcher` (positions, prefetched records),
* the :class:`~laketail.client.coordinator.ConsumerCoordinator` (group membership on
  a background thread; created by ``subscribe()``),
* the *mailbox*: rebalance events, error events and commit callbacks that ``poll()``
  and ``consume()`` serve on the application's thread, before any record.

Offsets follow Kafka: a committed offset is the next offset to read, so committing a
``Message`` stores ``message.offset() + 1``; ``offsets=[TopicPartition]`` are stored
as given. Each record ``poll()`` returns is *stored* (``enable.auto.offset.store``)
as its offset + 1; ``commit()`` without arguments and auto-commit commit the stored
offsets of the assignment. On a revocation the stored offsets of the revoked
partitions are committed once ``on_revoke`` returns, when ``enable.auto.commit`` is
on; a lost assignment commits nothing. ``close()`` revokes, commits (auto-commit) and leaves the group.

Rebalance callbacks are ``on_assign(consumer, partitions)`` and friends; when a
callback does not call ``assign()`` / ``unassign()`` (or the incremental variants)
itself, the consumer applies the change after it returns, as confluent-kafka does.
Thread-safety: one application thread, as with confluent-kafka.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import httpx

from laketail.client.config import ConsumerConfig, parse
from laketail.client.coordinator import ConsumerCoordinator, RebalanceEvent
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.fetcher import Fetcher
from laketail.client.gateway import Gateway
from laketail.client.message import OFFSET_INVALID, OFFSET_STORED, Message, TopicPartition
from laketail.client.metadata import Metadata, cluster_metadata
from laketail.errors import InvalidRequest
from laketail.topic_pattern import TopicPattern

log = logging.getLogger(__name__)

TP = tuple[str, int]
Callback = Callable[["Consumer", list[TopicPartition]], None]


def _timeout_s(timeout: float | None) -> float | None:
    return None if timeout is None or timeout < 0 else float(timeout)


def _after(message: Message, action: str) -> tuple[TP, int]:
    """A record's partition and the offset after it. As librdkafka, a message carrying an
    error is refused with _INVALID_ARG (an end-of-partition event is no record to resume after)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if message.error() is not None or topic is None or partition is None or offset is None:
        raise KafkaException(local_error("_INVALID_ARG", f"Cannot {action} offsets for a message with an error"))
    return (topic, partition), offset + 1


class ConsumerGroupMetadata:
    """The consumer's group identity (for ``send_offsets_to_transaction``)."""

    def __init__(self, group_id: str | None, generation_id: int, member_id: str) -> None:
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = None

    def __repr__(self) -> str:
        return f"ConsumerGroupMetadata({self.group_id}, {self.generation_id}, {self.member_id!r})"


class Consumer:
    """A group consumer, as ``confluent_kafka.Consumer``.

    ``Consumer(conf, transport=None, **kwargs)``: ``conf`` holds librdkafka property
    names (``group.id``, ``bootstrap.servers``, ``auto.offset.reset``,
    ``enable.auto.commit``, ``isolation.level``, ``session.timeout.ms``,
    ``max.poll.interval.ms``, ``partition.assignment.strategy``, ...).
    """

    def __init__(self, config: dict[str, Any] | None = None, /, *,
                 transport: httpx.BaseTransport | None = None, **kwargs: Any) -> None:
        self._config: ConsumerConfig = parse(ConsumerConfig, config, kwargs)
        self._gateway = Gateway.for_client(
            self._config, transport=transport, on_error=self._error_event if self._config.error_cb else None)
        self._cond = threading.Condition()
        self._mailbox: deque[RebalanceEvent | Message | Callable[[], None]] = deque()
        self._metadata = Metadata(self._gateway, self._config.metadata_max_age_ms, self._config.retry_backoff_ms)
        self._fetcher = Fetcher(self._config, self._gateway, self._metadata, self._cond, self._committed_offsets)
        self._coordinator: ConsumerCoordinator | None = None
        self._callbacks: dict[str, Callback | None] = {}
        self._stored: dict[TP, tuple[int, str | None]] = {}
        self._commit_lock = threading.Lock()
        self._committer: ThreadPoolExecutor | None = None
        self._last_poll = time.monotonic()
        self._in_callback = False
        self._callback_applied = False
        self._closed = False

    # -- subscription -------------------------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callback | None = None, on_revoke: Callback | None = None,
                  on_lost: Callback | None = None) -> None:
        """Join the group for ``topics`` (``^regex`` for patterns)."""
        self._check_open()
        if not self._config.group_id:
            raise KafkaException(local_error("_INVALID_ARG", 'Consumer group "group.id" must be configured'))
        if not isinstance(topics, (list, tuple)) or not topics:
            raise TypeError("expected a non-empty list of topic names")
        for topic in topics:
            if isinstance(topic, str) and topic.startswith("^"):
                try:
                    TopicPattern(topic)  # refused here, not later in the background thread
                except InvalidRequest as exc:
                    raise KafkaException(local_error("_INVALID_ARG", str(exc))) from None
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        if self._config.allow_auto_create_topics:
            self._auto_create([t for t in topics if not t.startswith("^")])  # never for a pattern
        if self._coordinator is None:
            self._coordinator = ConsumerCoordinator(
                self._config, self._gateway, self._cond, self._post, self._auto_commit, lambda: self._last_poll,
            )
        self._coordinator.subscribe(list(topics))

    def _auto_create(self, topics: list[str]) -> None:
        """The metadata look-up of Kafka's consumer with allow.auto.create.topics: the
        broker creates what is missing (when its auto.create.topics.enable says so); a
        failure is logged, never raised (the subscription waits for the topic)."""
        for topic in topics:
            try:
                self._gateway.get_json(f"/topics/{topic}/partitions", params={"allow_auto_topic_creation": "true"},
                                       timeout_s=self._config.socket_timeout_ms / 1000.0)
            except KafkaException as exc:
                log.debug("auto-creating %s on subscribe: %s", topic, exc)

    def unsubscribe(self) -> None:
        """Revoke the assignment and leave the group."""
        self._check_open()
        self._leave_group()

    def _leave_group(self) -> None:
        coordinator = self._coordinator
        if coordinator is None:
            return
        self._drain_rebalances()
        owned = sorted(coordinator.owned)
        if owned:
            partitions = [TopicPartition(t, p) for t, p in owned]
            self._run_rebalance(RebalanceEvent("revoke", partitions, coordinator.cooperative))
        coordinator.stop(leave=True)
        self._coordinator = None
        self._fetcher.assign({})

    # -- assignment -------------------------------------------------------------------------------------

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Consume exactly these partitions, from their offsets (``OFFSET_INVALID`` /
        ``OFFSET_STORED``: the committed offset, else ``auto.offset.reset``)."""
        self._check_open()
        self._fetcher.assign(self._starts(partitions))
        self._callback_applied = self._in_callback

    def unassign(self) -> None:
        self._check_open()
        self._fetcher.assign({})
        self._callback_applied = self._in_callback

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        self._fetcher.add(self._starts(partitions))
        self._callback_applied = self._in_callback

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        self._fetcher.remove([(tp.topic, tp.partition) for tp in partitions])
        self._callback_applied = self._in_callback

    @staticmethod
    def _starts(partitions: list[TopicPartition]) -> dict[TP, int]:
        return {(tp.topic, tp.partition): (OFFSET_INVALID if tp.offset == OFFSET_STORED else tp.offset)
                for tp in partitions}

    def assignment(self) -> list[TopicPartition]:
        self._check_open()
        return [TopicPartition(t, p) for t, p in self._fetcher.assignment()]

    # -- consuming --------------------------------------------------------------------------------------

    def poll(self, timeout: float | None = -1) -> Message | None:
        """The next record or event (a Message whose ``error()`` is set), or None after
        ``timeout`` seconds (-1: wait forever)."""
        batch = self._consume(1, timeout)
        return batch[0] if batch else None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Up to ``num_messages`` records and events, waiting up to ``timeout`` s for the first."""
        if not 0 < num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 1 and 1000000 (1M)")
        return self._consume(num_messages, timeout)

    def _consume(self, n: int, timeout: float | None) -> list[Message]:
        self._check_open()
        wait_s = _timeout_s(timeout)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            self._last_poll = time.monotonic()
            events = self._serve_mailbox(n)
            if events:
                return events
            out = self._fetcher.take(n)
            if out:
                if self._config.enable_auto_offset_store:
                    for msg in out:
                        if msg.error() is None:
                            position, after = _after(msg, "store")
                            self._stored[position] = (after, None)
                return out
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            with self._cond:
                if not self._mailbox:
                    self._cond.wait(0.2 if left is None else min(0.2, left))
            self._fetcher.kick()

    # -- the mailbox (application thread) -------------------------------------------------------------

    def _error_event(self, err: KafkaError) -> None:
        """A client-wide error for ``error_cb``, served by ``poll()``."""
        callback = self._config.error_cb
        if callback is not None:  # registered only when it is (``Gateway.for_client``)
            self._post(lambda: callback(err))

    def _post(self, item: RebalanceEvent | Message | Callable[[], None]) -> None:
        with self._cond:
            self._mailbox.append(item)
            self._cond.notify_all()

    def _serve_mailbox(self, n: int) -> list[Message]:
        """Run rebalance events and callbacks; return error events (up to ``n``)."""
        events: list[Message] = []
        while len(events) < n:
            with self._cond:
                if not self._mailbox:
                    break
                item = self._mailbox.popleft()
            if isinstance(item, RebalanceEvent):
                self._run_rebalance(item)
            elif isinstance(item, Message):
                events.append(item)
            else:
                item()
        return events

    def _drain_rebalances(self) -> None:
        with self._cond:
            items = list(self._mailbox)
            self._mailbox.clear()
        for item in items:
            if isinstance(item, RebalanceEvent):
                self._run_rebalance(item)
            else:
                self._post(item)

    def _run_rebalance(self, event: RebalanceEvent) -> None:
        """Run the application's callback for ``event``, then apply it unless the
        callback did; the coordinator waits for ``event.done``."""
        try:
            callback = self._callbacks.get(event.kind)
            if event.kind == "lost" and callback is None:
                callback = self._callbacks.get("revoke")
            self._in_callback, self._callback_applied = True, False
            try:
                if callback is not None:
                    callback(self, list(event.partitions))
            finally:
                self._in_callback = False
            if event.kind == "revoke" and self._config.enable_auto_commit:
                self._commit_revoked(event.partitions)
            if not self._callback_applied:
                self._apply(event)
            if event.kind != "assign":
                for tp in event.partitions:
                    self._stored.pop((tp.topic, tp.partition), None)
        finally:
            event.done.set()

    def _apply(self, event: RebalanceEvent) -> None:
        if event.kind == "assign":
            if event.cooperative:
                self._fetcher.add(self._starts(event.partitions))
            else:
                self._fetcher.assign(self._starts(event.partitions))
        elif event.cooperative:
            self._fetcher.remove([(tp.topic, tp.partition) for tp in event.partitions])
        else:
            self._fetcher.assign({})

    def _commit_revoked(self, partitions: list[TopicPartition]) -> None:
        try:
            self._commit_now(None, {(tp.topic, tp.partition) for tp in partitions})
        except KafkaException as exc:
            log.info("commit on revoke failed: %s", exc)

    # -- offsets ---------------------------------------------------------------------------------------

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit ``message.offset() + 1``, or ``offsets`` as given, or the stored
        offsets of the assignment. Synchronous: returns the committed partitions and
        raises ``KafkaException`` on failure. Asynchronous: returns None; the outcome
        goes to ``on_commit``."""
        self._check_open()
        if message is not None and offsets is not None:
            raise TypeError("Commit: only one of 'message' or 'offsets' may be given")
        if message is not None:
            (topic, partition), after = _after(message, "commit")
            to_commit = [TopicPartition(topic, partition, after)]
        elif offsets is not None:
            to_commit = list(offsets)
        else:
            to_commit = None  # the stored offsets, read when the commit is sent
            if not self._stored_for(None):
                err = local_error("_NO_OFFSET")
                if asynchronous:
                    self._commit_done(err, [])
                    return None
                raise KafkaException(err)
        if not asynchronous:
            return self._commit_now(to_commit)
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="laketail-commit")
        self._committer.submit(self._commit_async, to_commit)
        return None

    def _commit_async(self, offsets: list[TopicPartition] | None) -> None:
        try:
            self._commit_done(None, self._commit_now(offsets))
        except KafkaException as exc:
            self._commit_done(exc.args[0], offsets or [])

    def _commit_done(self, err: KafkaError | None, offsets: list[TopicPartition]) -> None:
        callback = self._config.on_commit
        if callback is not None:
            self._post(lambda: callback(err, offsets))

    def _commit_now(self, offsets: list[TopicPartition] | None,
                    partitions: set[TP] | None = None) -> list[TopicPartition]:
        """One synchronous commit, serialised with every other commit.

        ``offsets`` None commits the stored offsets (of ``partitions``, else of the
        assignment) as they are when the commit goes out, read under the commit lock:
        an automatic commit that waited behind the application's newer one then cannot
        move the group's offsets back. Nothing stored: nothing is sent, [] returned."""
        if not self._config.group_id:
            raise KafkaException(local_error("_INVALID_ARG", 'Consumer group "group.id" must be configured'))
        with self._commit_lock:
            if offsets is None:
                offsets = self._stored_for(partitions)
                if not offsets:
                    return []
            generation, member = self._coordinator.identity() if self._coordinator else (-1, "")
            body = {
                "generation_id": generation,
                "member_id": member,
                "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset,
                             "metadata": tp.metadata or ""} for tp in offsets],
            }
            try:
                self._gateway.post_json(f"/v1/groups/{self._config.group_id}/commit", body)
            except KafkaException as exc:
                for tp in offsets:
                    tp.error = exc.args[0]
                raise
        return [TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]

    def _auto_commit(self) -> None:
        """Called by the coordinator thread every ``auto.commit.interval.ms``."""
        self._commit_now(None)

    def _stored_for(self, partitions: set[TP] | None) -> list[TopicPartition]:
        """The stored offsets of ``partitions``, else of the assignment."""
        wanted = set(self._fetcher.assignment()) if partitions is None else partitions
        return [TopicPartition(t, p, o, m) for (t, p), (o, m) in list(self._stored.items()) if (t, p) in wanted]

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        """Store ``message.offset() + 1`` (or ``offsets`` as given) for the next commit."""
        self._check_open()
        if (message is None) == (offsets is None):
            raise TypeError("store_offsets needs exactly one of 'message' or 'offsets'")
        if message is not None:
            position, after = _after(message, "store")
            self._stored[position] = (after, None)
        else:
            for tp in offsets or []:
                self._stored[(tp.topic, tp.partition)] = (tp.offset, tp.metadata)

    def _committed_offsets(self, tps: list[TP]) -> dict[TP, int | None]:
        """The group's committed offsets (None where nothing is committed)."""
        answer = self._gateway.post_json(
            f"/v1/groups/{self._config.group_id}/committed",
            {"partitions": [{"topic": t, "partition": p} for t, p in tps]},
        )
        return {(o["topic"], o["partition"]): (o["offset"] if o["offset"] is not None and o["offset"] >= 0 else None)
                for o in answer["offsets"]}

    def committed(self, partitions: list[TopicPartition], timeout: float | None = -1) -> list[TopicPartition]:
        """The group's committed offsets (``OFFSET_INVALID`` where none)."""
        self._check_open()
        if not self._config.group_id:
            raise KafkaException(local_error("_INVALID_ARG", 'Consumer group "group.id" must be configured'))
        answer = self._gateway.post_json(
            f"/v1/groups/{self._config.group_id}/committed",
            {"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]},
            timeout_s=_timeout_s(timeout),
        )
        found = {(o["topic"], o["partition"]): o for o in answer["offsets"]}
        out = []
        for tp in partitions:
            o = found.get((tp.topic, tp.partition)) or {}
            offset = o.get("offset")
            out.append(TopicPartition(tp.topic, tp.partition,
                                      offset if offset is not None and offset >= 0 else OFFSET_INVALID,
                                      o.get("metadata") or None))
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The offset of the next record ``poll()`` will return (``OFFSET_INVALID`` if unknown)."""
        self._check_open()
        out = []
        for tp in partitions:
            pos = self._fetcher.position((tp.topic, tp.partition))
            out.append(TopicPartition(tp.topic, tp.partition, OFFSET_INVALID if pos is None else pos))
        return out

    def seek(self, partition: TopicPartition) -> None:
        """Continue ``partition`` at ``partition.offset`` (or a logical offset)."""
        self._check_open()
        self._fetcher.seek((partition.topic, partition.partition), partition.offset)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._fetcher.set_paused([(tp.topic, tp.partition) for tp in partitions], True)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._fetcher.set_paused([(tp.topic, tp.partition) for tp in partitions], False)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        """(low, high): the log start offset and the end offset the consumer can read to."""
        self._check_open()
        if cached:
            return self._fetcher.watermarks((partition.topic, partition.partition))
        path = f"/v1/topics/{partition.topic}/partitions/{partition.partition}/offsets"
        marks = []
        for spec in ("earliest", "latest"):
            params = {"timestamp": spec, "isolation_level": self._config.isolation_level}
            answer = self._gateway.get_json(path, params=params, timeout_s=_timeout_s(timeout),
                                            broker=self._metadata.leader_url(partition.topic, partition.partition))
            marks.append(int(answer["offset"]))
        return marks[0], marks[1]

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = -1) -> list[TopicPartition]:
        """For each partition, the first offset whose timestamp is at or after
        ``partition.offset`` (ms); -1 when there is none."""
        self._check_open()
        out = []
        for tp in partitions:
            answer = self._gateway.get_json(
                f"/v1/topics/{tp.topic}/partitions/{tp.partition}/offsets",
                params={"timestamp": tp.offset, "isolation_level": self._config.isolation_level},
                timeout_s=_timeout_s(timeout), broker=self._metadata.leader_url(tp.topic, tp.partition),
            )
            out.append(TopicPartition(tp.topic, tp.partition, int(answer["offset"])))
        return out

    # -- metadata and lifecycle -------------------------------------------------------------------------

    def list_topics(self, topic: str | None = None, timeout: float | None = -1):
        self._check_open()
        return cluster_metadata(self._gateway, topic, _timeout_s(timeout))

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        self._check_open()
        generation, member = self._coordinator.identity() if self._coordinator else (-1, "")
        return ConsumerGroupMetadata(self._config.group_id, generation, member)

    def memberid(self) -> str | None:
        self._check_open()
        return self._coordinator.identity()[1] or None if self._coordinator else None

    def close(self) -> None:
        """Revoke (running ``on_revoke``), commit the stored offsets when auto-commit is
        on, leave the group and release everything. Further calls raise RuntimeError."""
        if self._closed:
            return
        try:
            self._leave_group()
            if self._config.enable_auto_commit and self._config.group_id:
                try:
                    self._auto_commit()
                except KafkaException as exc:
                    log.info("commit on close failed: %s", exc)
            if self._committer is not None:
                self._committer.shutdown(wait=True)
            with self._cond:
                callbacks = [i for i in self._mailbox if callable(i) and not isinstance(i, (Message, RebalanceEvent))]
                self._mailbox.clear()
            for callback in callbacks:
                callback()
        finally:
            self._closed = True
            self._fetcher.close()
            self._gateway.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
