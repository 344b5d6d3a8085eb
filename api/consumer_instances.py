"""Broker-side consumers: the stateful consumer instances of Confluent REST Proxy v2.

Role: a REST client cannot hold a Kafka consumer, so the broker holds one for it. A
:class:`ConsumerInstance` is what a ``KafkaConsumer`` inside Confluent's REST Proxy
is: a member of its group (the coordinator's join / sync / heartbeat, driven by the
instance's own requests and by the background task of :class:`ConsumerInstances`),
a position per assigned partition, auto commit, and ``poll`` (:meth:`records`),
which reads round-robin over the assigned partitions through ``broker.fetch``.
:class:`ConsumerInstances` holds every instance of the broker by group and name and
destroys those idle past ``consumer.instance.timeout.ms`` (they leave their group).
An instance's settings and the errors only instances raise are in
:mod:`laketail.coordinator.instance_config`.

Offsets, in the broker's vocabulary: a *position* is the next offset the instance
returns for a partition; a committed offset is the next offset the group will read.
v2's explicit commit names the last record processed, so :meth:`commit` stores
``offset + 1``; a commit without offsets stores the positions ("everything
consumed").

Two modes, as in Kafka's consumer, mutually exclusive (ILLEGAL_STATE, 40903):

* ``subscribe(topics | pattern)`` -- group management: the coordinator assigns the
  partitions (``range`` first, as Kafka's default ``[range, cooperative-sticky]``);
  the instance rejoins when the coordinator says so (REBALANCE_IN_PROGRESS,
  ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) or when its pattern matches other topics.
  Positions of partitions it keeps survive a rebalance; with auto commit on, the
  positions are committed before every rejoin (Kafka's commit on revocation).
* ``assign(partitions)`` -- manual assignment, no membership; commits are
  standalone (generation -1), which the coordinator takes only while the group
  has no members.

A partition the instance has no position for starts at the group's committed
offset, else per ``auto.offset.reset``: ``earliest`` (log start offset), ``latest``
(the end a consumer can read to) or ``none`` (NO_OFFSET_FOR_PARTITION from
:meth:`records`, as Kafka's ``poll`` throws it). A position outside the log (after
retention, or a seek past the end) is reset the same way.

Time: idle expiry and the auto commit interval use the broker's clock (``now``);
long-poll deadlines use the event loop's own clock, and a poll waits at most its
``timeout``, the instance's ``consumer.request.timeout.ms`` and ``LONG_POLL_MAX_MS``.

A position moves only past records a poll returns (and control records), never past a
record the instance's format cannot decode: the poll stops there, as Kafka's consumer
does, so a commit of the positions covers only records returned.

Thread-safety: event loop thread only; an asyncio lock per instance serialises changes
of positions (one fetch round, one commit, one seek, close) but is never held while a
poll waits for records, so no operation waits behind a long poll; membership changes
land between awaits.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable, Literal

import pyarrow as pa
import pyarrow.compute as pc

from laketail.api.fetch_body import data_rows
from laketail.coordinator.instance_config import (
    MUTUALLY_EXCLUSIVE,
    ConsumerInstanceExists,
    ConsumerInstanceNotFound,
    IllegalConsumerState,
    InstanceConfig,
    InvalidConsumerConfig,
)
from laketail.coordinator.offsets import CommittedOffset, TopicPartition
from laketail.errors import (
    IllegalGeneration,
    InvalidGroupId,
    InvalidRequest,
    LaketailError,
    NoOffsetForPartition,
    OffsetOutOfRange,
    RebalanceInProgress,
    RecordDeserializationError,
    UnknownMemberId,
    UnknownTopicOrPartition,
)
from laketail.topic_pattern import TopicPattern

if TYPE_CHECKING:
    from laketail.api.services import Services
    from laketail.broker import Broker
    from laketail.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)

#: Kafka consumer defaults the instances use (a v2 create request cannot set them).
SESSION_TIMEOUT_MS = 45_000
MAX_POLL_INTERVAL_MS = 300_000
AUTO_COMMIT_INTERVAL_MS = 5_000
MAX_POLL_RECORDS = 500
STRATEGIES = ("range", "cooperative-sticky")
#: Confluent's ``consumer.request.max.bytes``: the most one records response carries.
MAX_RESPONSE_BYTES = 67_108_864
#: The longest a records request waits, whatever its ``timeout`` and the instance's
#: ``consumer.request.timeout.ms`` say: the ``request.timeout.ms`` (30 s) Confluent's
#: proxy gives its consumers (kafka-rest ``KafkaConsumerManager``).
LONG_POLL_MAX_MS = 30_000
#: Turns one partition's fetched rows into response pieces; raises
#: RECORD_DESERIALIZATION_ERROR (with the record's offset) for a record it cannot return.
Encoder = Callable[[str, pa.Table], Any]
#: How often the background task heartbeats and expires idle instances.
TICK_S = 0.1
#: The longest one wait for new records lasts before membership is looked at again.
WAIT_SLICE_S = 0.25
#: How often a read_committed instance looks again at a partition an open
#: transaction holds back.
STALLED_POLL_S = 0.05


def _rows_as_they_are(topic: str, rows: pa.Table) -> pa.Table:
    return rows


def _payload_bytes(records: pa.Table) -> int:
    """Key + value bytes (what v2's ``max_bytes`` bounds)."""
    total = 0
    for name in ("key", "value"):
        column = records.column(name)
        if column.null_count < len(column):
            total += pc.sum(pc.binary_length(column)).as_py() or 0
    return total


# -- one instance --------------------------------------------------------------------------------


class ConsumerInstance:
    """One broker-side consumer (see the module docstring)."""

    def __init__(self, registry: "ConsumerInstances", group_id: str, instance_id: str,
                 config: InstanceConfig, client_host: str = "") -> None:
        self._registry = registry
        self._broker = registry.broker
        self._groups = registry.services.groups
        self._offsets = registry.services.offsets
        self.group_id = group_id
        self.instance_id = instance_id
        self.client_id = instance_id
        self.client_host = client_host
        self.config = config
        #: Who created it (set by the route); only this principal may use it.
        self.owner: KafkaPrincipal | None = None
        #: Whether the owner may Describe a topic (set by the route with authorization on):
        #: a pattern matches only those, as Kafka's metadata answer lists only those.
        self.may_describe: Callable[[str], bool] | None = None
        now = self._broker.clock.monotonic()
        self.last_used = now
        self.closed = False
        self._lock = asyncio.Lock()
        self._topics: list[str] = []
        self._pattern: TopicPattern | None = None
        self._manual = False
        self.assignment: list[TopicPartition] = []
        self._assigned: set[TopicPartition] = set()
        self.member_id = ""
        self.generation_id = -1
        self._rejoin = False
        self._join_task: asyncio.Task | None = None
        self._retry_at = 0.0
        self._positions: dict[TopicPartition, int] = {}
        self._cursor = 0
        self._last_auto_commit = now

    # -- state -----------------------------------------------------------------------------

    def touch(self) -> None:
        self.last_used = self._broker.clock.monotonic()

    @property
    def subscribed(self) -> bool:
        return bool(self._topics) or self._pattern is not None

    def subscription(self) -> list[str]:
        """The topics subscribed to (for a pattern: those it matches now)."""
        self.touch()
        return list(self._topics)

    def positions(self) -> dict[TopicPartition, int]:
        return dict(self._positions)

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        """New assignment; positions of the partitions kept survive, others go."""
        self._assigned = set(partitions)
        self.assignment = sorted(self._assigned)
        self._positions = {tp: p for tp, p in self._positions.items() if tp in self._assigned}

    # -- subscription and assignment -------------------------------------------------------

    def check_subscription(self, topics: list[str] | None, pattern: str | None) -> None:
        """Raise what :meth:`subscribe` would refuse the request with (before anything,
        such as an auto-created topic, is done for it)."""
        if self._manual or (topics is not None and pattern is not None):
            raise IllegalConsumerState(MUTUALLY_EXCLUSIVE)
        if topics is None and pattern is None:
            raise InvalidRequest("a subscription needs 'topics' or 'topic_pattern'")

    async def subscribe(self, topics: list[str] | None = None, pattern: str | None = None) -> None:
        self.touch()
        self.check_subscription(topics, pattern)
        if pattern is not None:
            self._pattern = TopicPattern(pattern)  # RE2: linear time; INVALID_REQUEST if refused
            wanted = self._matching_topics()
        else:
            self._pattern = None
            wanted = sorted(set(topics or []))
            if not wanted:
                await self.unsubscribe()  # Kafka: subscribing to nothing is unsubscribing
                return
        if wanted != self._topics or not self.member_id:
            self._topics = wanted
            self._rejoin = True
            self._ensure_membership()

    def _matching_topics(self) -> list[str]:
        assert self._pattern is not None
        visible = self.may_describe
        return [t for t in self._broker.list_topics(include_internal=False)
                if self._pattern.fullmatch(t) and (visible is None or visible(t))]

    async def unsubscribe(self) -> None:
        """Leave the group (committing first with auto commit) and drop every partition."""
        self.touch()
        async with self._lock:
            await self._leave()
            self._topics, self._pattern, self._manual = [], None, False
            self._set_assignment([])

    async def assign(self, partitions: list[TopicPartition]) -> None:
        self.touch()
        if self.subscribed:
            raise IllegalConsumerState(MUTUALLY_EXCLUSIVE)
        for topic, partition in partitions:
            self._broker.partition_state(topic, partition)  # 404 for what does not exist
        async with self._lock:
            self._manual = bool(partitions)
            self._set_assignment(list(dict.fromkeys(partitions)))

    # -- membership ------------------------------------------------------------------------

    def _ensure_membership(self) -> None:
        """Start a (re)join when one is due and none is in flight."""
        if self._join_task is not None or self.closed or not self.subscribed:
            return
        if self._rejoin or not self.member_id:
            self._join_task = asyncio.get_running_loop().create_task(
                self._join(), name=f"laketail-instance-join-{self.group_id}-{self.instance_id}"
            )

    async def _join(self) -> None:
        try:
            while not self.closed and self.subscribed and (self._rejoin or not self.member_id):
                self._rejoin = False
                if self.member_id and self.config.auto_commit_enable:
                    await self._commit_positions_quietly("before rejoining")
                session = min(max(SESSION_TIMEOUT_MS, self._groups.min_session_timeout_ms),
                              self._groups.max_session_timeout_ms)
                result = await self._groups.join(
                    self.group_id, self.member_id, topics=list(self._topics), strategies=STRATEGIES,
                    client_id=self.client_id, client_host=self.client_host,
                    session_timeout_ms=session, rebalance_timeout_ms=MAX_POLL_INTERVAL_MS,
                    owned=list(self.assignment),
                )
                self.member_id = result.member_id
                try:
                    partitions = self._groups.sync(self.group_id, result.generation_id, self.member_id)
                except (RebalanceInProgress, IllegalGeneration):
                    self._rejoin = True
                    continue
                self.generation_id = result.generation_id
                if self.closed or not self.subscribed:
                    break  # unsubscribed or destroyed while the join was in flight
                self._set_assignment(partitions)
            if (self.closed or not self.subscribed) and self.member_id:
                self._leave_now()
        except UnknownMemberId:
            self._lost()
        except asyncio.CancelledError:
            raise
        except LaketailError as exc:
            log.warning("consumer instance %s/%s could not join: %s", self.group_id, self.instance_id, exc)
            self._rejoin = True
            self._retry_at = self._broker.clock.monotonic() + 1.0
        finally:
            self._join_task = None

    def _lost(self) -> None:
        """The coordinator no longer knows this member: its partitions are lost."""
        self.member_id, self.generation_id = "", -1
        self._set_assignment([])

    def maintain(self) -> None:
        """Heartbeat, follow the pattern, rejoin when told to (called every tick)."""
        if self.closed or not self.subscribed:
            return
        if self._pattern is not None:
            wanted = self._matching_topics()
            if wanted != self._topics:
                self._topics = wanted
                self._rejoin = True
        if self._join_task is None and self.member_id and not self._rejoin:
            try:
                self._groups.heartbeat(self.group_id, self.generation_id, self.member_id)
            except (RebalanceInProgress, IllegalGeneration):
                self._rejoin = True
            except UnknownMemberId:
                self._lost()
        if self._broker.clock.monotonic() >= self._retry_at:
            self._ensure_membership()

    async def _settle(self) -> None:
        """Let a join in flight finish (bounded by consumer.request.timeout.ms)."""
        self._ensure_membership()
        task = self._join_task
        if task is not None:
            await asyncio.wait({task}, timeout=self.config.request_timeout_ms / 1000.0)

    async def _leave(self) -> None:
        if self.member_id and self.config.auto_commit_enable:
            await self._commit_positions_quietly("before leaving")
        self._leave_now()

    def _leave_now(self) -> None:
        if self.member_id:
            try:
                self._groups.leave(self.group_id, self.member_id)
            except UnknownMemberId:
                pass
        self.member_id, self.generation_id = "", -1

    # -- positions -------------------------------------------------------------------------

    def _reset_offset(self, tp: TopicPartition) -> int:
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise NoOffsetForPartition(
                f"no committed offset for {tp[0]}-{tp[1]} in group '{self.group_id}' and "
                "auto.offset.reset is none"
            )
        state = self._broker.partition_state(*tp)
        if policy == "earliest":
            return state.log_start_offset
        return state.last_stable_offset if self.config.isolation_level == "read_committed" else state.high_watermark

    def _position(self, tp: TopicPartition) -> int:
        position = self._positions.get(tp)
        if position is None:
            committed = self._offsets.committed(self.group_id, tp)
            position = committed.offset if committed is not None else self._reset_offset(tp)
            self._positions[tp] = position
        return position

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._assigned:
            raise IllegalConsumerState(f"No current assignment for partition {tp[0]}-{tp[1]}")

    async def seek(self, offsets: list[tuple[str, int, int]],
                   timestamps: list[tuple[str, int, int]] | None = None) -> None:
        """``positions``: the next records fetched start at these offsets, then (as
        Confluent's instance does) at the ``timestamps``' offsets (Kafka's
        ``offsetsForTimes``): each partition's earliest offset whose timestamp is at or
        after the given one (ms); where no record is that late, the end a consumer can
        read to (Confluent's instance would fail on Kafka's null answer there). All is
        checked before any position moves."""
        self.touch()
        await self._settle()
        timestamps = timestamps or []
        async with self._lock:
            for topic, partition, offset in offsets:
                self._check_assigned((topic, partition))
                if offset < 0:
                    raise InvalidRequest(f"offset {offset} for {topic}-{partition} is negative")
            for topic, partition, _ in timestamps:
                self._check_assigned((topic, partition))
            found = {(topic, partition): offset for topic, partition, offset in offsets}
            for topic, partition, ts_ms in timestamps:
                hit = await self._broker.offset_for_timestamp(topic, partition, ts_ms)
                if hit is None:
                    state = self._broker.partition_state(topic, partition)
                    read_committed = self.config.isolation_level == "read_committed"
                    found[(topic, partition)] = state.last_stable_offset if read_committed else state.high_watermark
                else:
                    found[(topic, partition)] = hit[0]
            self._positions.update(found)

    async def seek_to(self, partitions: list[TopicPartition], where: Literal["beginning", "end"]) -> None:
        """``positions/beginning`` (log start offset) and ``positions/end`` (the end a
        consumer can read to)."""
        self.touch()
        await self._settle()
        async with self._lock:
            for tp in partitions:
                self._check_assigned(tp)
            for tp in partitions:
                state = self._broker.partition_state(*tp)
                if where == "beginning":
                    self._positions[tp] = state.log_start_offset
                elif self.config.isolation_level == "read_committed":
                    self._positions[tp] = state.last_stable_offset
                else:
                    self._positions[tp] = state.high_watermark

    # -- reading ---------------------------------------------------------------------------

    async def records(self, timeout_ms: int | None = None, max_bytes: int | None = None, *,
                      encode: Encoder | None = None) -> list[tuple[str, Any]]:
        """Kafka's ``poll``: records of the assigned partitions, round-robin, as
        ``[(topic, encode(topic, rows of one partition))]`` (no control rows; without
        ``encode``, the rows in ``RECORD_SCHEMA``).

        Answers once at least ``fetch.min.bytes`` key+value bytes (any record, by
        default) are there, once ``max_bytes`` is reached, or at the timeout with what
        it has; at once with what it has when the instance is destroyed meanwhile. The
        timeout is Confluent's: ``timeout`` when given, at most the instance's
        ``consumer.request.timeout.ms`` (its default), and never past
        :data:`LONG_POLL_MAX_MS`. The instance's lock is held for one fetch round at a
        time, never while waiting, so commit, seek and DELETE never wait behind a long
        poll.

        Never past a record it cannot return (Kafka's consumer stays on a record it
        cannot deserialize): ``encode`` raises RECORD_DESERIALIZATION_ERROR for such a
        record; the partition's position stays on it and the records before it, and
        those of the other partitions, are returned. A poll that has nothing else to
        return raises the error, and moves no position.
        """
        self.touch()
        if not self.subscribed and not self._manual:
            raise IllegalConsumerState("Consumer is not subscribed to any topics or assigned any partitions")
        loop = asyncio.get_running_loop()
        instance_ms = self.config.request_timeout_ms
        requested = instance_ms if timeout_ms is None or timeout_ms <= 0 else min(timeout_ms, instance_ms)
        deadline = loop.time() + min(requested, LONG_POLL_MAX_MS) / 1000.0
        limit = min(max_bytes, MAX_RESPONSE_BYTES) if max_bytes and max_bytes > 0 else MAX_RESPONSE_BYTES
        async with self._lock:
            await self._maybe_auto_commit()
        self._ensure_membership()
        out: list[tuple[str, Any]] = []
        size = 0
        failed: RecordDeserializationError | None = None
        while not self.closed:
            join = self._join_task
            if join is not None:  # poll completes a rebalance before fetching
                await asyncio.wait({join}, timeout=max(deadline - loop.time(), 0.0))
            async with self._lock:  # one round at a time; never held across a wait
                if self.closed:
                    break
                got, nbytes, error = await self._fetch_round(limit - size, encode or _rows_as_they_are)
            out.extend(got)
            size += nbytes
            failed = failed or error
            remaining = deadline - loop.time()
            if failed is not None or (out and size >= self.config.fetch_min_bytes) or size >= limit or remaining <= 0:
                break
            await self._wait_for_records(min(remaining, WAIT_SLICE_S))
        self.touch()
        if failed is not None and not out:
            raise failed
        return out

    async def _fetch_round(self, budget: int, encode: Encoder
                           ) -> tuple[list[tuple[str, Any]], int, RecordDeserializationError | None]:
        """One pass over the assigned partitions, starting one further each time. A
        partition's position moves past what is returned (and the control records
        skipped), never past a record ``encode`` refused: that error comes back."""
        order = list(self.assignment)
        if not order or budget <= 0:
            return [], 0, None
        start = self._cursor % len(order)
        self._cursor = start + 1
        order = order[start:] + order[:start]
        out: list[tuple[str, Any]] = []
        size = 0
        failed: RecordDeserializationError | None = None
        for tp in order:
            if size >= budget:
                break
            if tp not in self._assigned:
                continue  # revoked by a rebalance during this round
            position = self._position(tp)
            try:
                result = await self._broker.fetch(
                    tp[0], tp[1], position, max_records=MAX_POLL_RECORDS, max_bytes=budget - size,
                    isolation=self.config.isolation_level,
                )
            except OffsetOutOfRange:
                if tp in self._assigned:
                    self._positions[tp] = self._reset_offset(tp)
                continue
            except UnknownTopicOrPartition:
                continue  # deleted since it was assigned
            if tp not in self._assigned or self._positions.get(tp) != position:
                continue  # revoked or sought while the fetch ran: drop what came
            rows = data_rows(result.records)
            next_offset = result.next_offset
            parts: Any = None
            refused: RecordDeserializationError | None = None
            while rows.num_rows:  # the key of one record may fail after the value of an earlier one
                try:
                    parts = encode(tp[0], rows)
                    break
                except RecordDeserializationError as exc:
                    refused = exc
                    rows = rows.filter(pc.less(rows.column("offset"), exc.offset))
            if refused is not None:
                next_offset = refused.offset  # stay on the first record that cannot be returned
                failed = failed or refused
            self._positions[tp] = next_offset
            if rows.num_rows:
                out.append((tp[0], parts))
                size += _payload_bytes(rows)
        return out, size, failed

    async def _wait_for_records(self, wait_s: float) -> None:
        """Until a partition at its end gets a record, or ``wait_s`` (no busy loop).

        A read_committed position held at the last stable offset by an open
        transaction has records after it already, so it is polled every
        ``STALLED_POLL_S`` instead of waited on."""
        waits, stalled = [], False
        for tp in self.assignment:
            position = self._positions.get(tp)
            if position is None:
                continue
            try:
                state = self._broker.partition_state(*tp)
            except UnknownTopicOrPartition:
                continue
            if position >= state.high_watermark:
                waits.append(asyncio.ensure_future(self._broker.fetch(
                    tp[0], tp[1], position, max_records=1, timeout_ms=max(int(wait_s * 1000), 1),
                    isolation="read_uncommitted",
                )))
            elif self.config.isolation_level == "read_committed" and position >= state.last_stable_offset:
                stalled = True
        if stalled:
            wait_s = min(wait_s, STALLED_POLL_S)
        if not waits:
            await asyncio.sleep(wait_s)
            return
        done, pending = await asyncio.wait(waits, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

    # -- offsets ---------------------------------------------------------------------------

    def _commit_ids(self) -> tuple[int, str]:
        return (self.generation_id, self.member_id) if self.member_id else (-1, "")

    async def commit(self, offsets: list[tuple[str, int, int, str | None]] | None = None) -> None:
        """v2's commit: explicit ``(topic, partition, offset, metadata)`` store
        ``offset + 1``; ``None`` stores every position (everything consumed).

        Nothing to commit (no position yet, e.g. right after subscribe) sends nothing,
        as Kafka's ``commitSync`` does; explicit offsets wait for a join in flight so
        they carry the member's generation."""
        self.touch()
        if offsets and self.subscribed and not self.member_id:
            await self._settle()
        now_ms = self._broker.clock.now_ms()
        async with self._lock:
            if offsets is None:
                entries = {tp: CommittedOffset(p, "", now_ms) for tp, p in self._positions.items()}
            else:
                entries = {(t, p): CommittedOffset(o + 1, m or "", now_ms) for t, p, o, m in offsets}
            if not entries:
                return
            generation, member = self._commit_ids()
            await self._groups.commit(self.group_id, entries, generation_id=generation, member_id=member)

    def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, CommittedOffset | None]:
        self.touch()
        for topic, partition in partitions:
            self._broker.partition_state(topic, partition)  # 404 for what does not exist
        return self._groups.committed(self.group_id, list(partitions))

    async def _maybe_auto_commit(self) -> None:
        if not self.config.auto_commit_enable:
            return
        now = self._broker.clock.monotonic()
        if (now - self._last_auto_commit) * 1000 >= AUTO_COMMIT_INTERVAL_MS:
            self._last_auto_commit = now
            await self._commit_positions_quietly("auto commit")

    async def _commit_positions_quietly(self, why: str) -> None:
        if not self._positions:
            return
        now_ms = self._broker.clock.now_ms()
        entries = {tp: CommittedOffset(p, "", now_ms) for tp, p in self._positions.items()}
        generation, member = self._commit_ids()
        try:
            await self._groups.commit(self.group_id, entries, generation_id=generation, member_id=member)
        except LaketailError as exc:
            log.info("consumer instance %s/%s: %s failed: %s", self.group_id, self.instance_id, why, exc)

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        """Destroy: commit (with auto commit) and leave the group."""
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            if self.config.auto_commit_enable and self._positions:
                await self._commit_positions_quietly("closing")
            self._leave_now()
            self._set_assignment([])


# -- every instance of the broker -----------------------------------------------------------------


class ConsumerInstances:
    """The broker's consumer instances by (group, name), with their background task."""

    def __init__(self, broker: "Broker", services: "Services", instance_timeout_ms: int = 300_000) -> None:
        self.broker = broker
        self.services = services
        self.instance_timeout_ms = instance_timeout_ms
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._task: asyncio.Task | None = None
        self._closing: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._instances)

    def create(self, group_id: str, config: InstanceConfig, name: str | None = None,
               client_host: str = "") -> ConsumerInstance:
        if not group_id:
            raise InvalidGroupId("group.id must not be empty")
        if name is not None and not isinstance(name, str):
            raise InvalidConsumerConfig("name must be a string")
        name = name or f"rest-consumer-{self.broker.broker_id}-{uuid.uuid4()}"
        if "/" in name:
            raise InvalidConsumerConfig(f"name {name!r} cannot contain '/': it is a path segment")
        if (group_id, name) in self._instances:
            raise ConsumerInstanceExists(
                f"Consumer instance with the specified name '{name}' already exists in group '{group_id}'."
            )
        instance = ConsumerInstance(self, group_id, name, config, client_host)
        self._instances[(group_id, name)] = instance
        self._start()
        return instance

    def get(self, group_id: str, name: str) -> ConsumerInstance:
        instance = self._instances.get((group_id, name))
        if instance is None:
            raise ConsumerInstanceNotFound(f"Consumer instance '{name}' not found in group '{group_id}'.")
        return instance

    def in_group(self, group_id: str) -> list[ConsumerInstance]:
        return [i for (g, _), i in sorted(self._instances.items()) if g == group_id]

    async def delete(self, group_id: str, name: str) -> None:
        instance = self.get(group_id, name)
        del self._instances[(group_id, name)]
        await instance.close()

    async def tick(self) -> None:
        """Destroy idle instances, then heartbeat / rejoin for the others.

        A destroyed instance closes in a task of its own: closing waits for the
        instance's request in flight, and heartbeats of the others must not."""
        now = self.broker.clock.monotonic()
        for key, instance in list(self._instances.items()):
            if (now - instance.last_used) * 1000 > self.instance_timeout_ms:
                log.info("consumer instance %s/%s idle past consumer.instance.timeout.ms=%d; destroying it",
                         key[0], key[1], self.instance_timeout_ms)
                self._instances.pop(key, None)
                task = asyncio.get_running_loop().create_task(instance.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
            else:
                instance.maintain()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="laketail-consumer-instances")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.tick()
            except Exception:
                log.exception("consumer instance housekeeping failed")

    async def close(self) -> None:
        """Stop the background task and destroy every instance (shutdown)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        instances = list(self._instances.values())
        self._instances.clear()
        await asyncio.gather(*self._closing, return_exceptions=True)
        for instance in instances:
            try:
                await instance.close()
            except LaketailError as exc:
                log.info("closing consumer instance %s/%s: %s", instance.group_id, instance.instance_id, exc)
