"""Committed consumer offsets, stored in the internal compacted topic ``__consumer_offsets``.

Role: the durable home of every group's committed offsets, and their in-memory cache.
A commit appends one batch to the ``__consumer_offsets`` partition of its group
(``abs(java_hash(group)) % offsets.topic.num.partitions``, as Kafka places groups),
conditional on the coordinators' epoch (the partition refuses it once a newer
coordinator has written there), and returns once it is on every in-sync replica and the
broker has checked it still runs the coordinators (``fence``, see
:class:`~laketail.coordinator.ports.CoordinatorFence`); the cache follows. When the broker takes the coordinators
over, the cache is rebuilt by reading every partition of the topic to the high
watermark, table tier then hot tier, latest value per key.

Record format (JSON, so SQL over the topic's Delta table can read it):

* key   ``{"group": g, "topic": t, "partition": p}``
* value ``{"offset": o, "metadata": m, "commit_timestamp": ms}``; a null value
  (tombstone) deletes the key (expired or deleted offsets).

A committed offset is the next offset the group will read.

The topic is ``cleanup.policy=compact``; the broker compacts it itself (each partition
on its leader, :meth:`laketail.broker.Broker.compact_topic`), it never needs Spark to
stay small.

Loading is forgiving: a record whose key or value cannot be decoded is skipped, logged
and counted (:attr:`OffsetStore.skipped_records`); it never stops a start. A partition
whose table is damaged (CORRUPT_MESSAGE) is isolated (:attr:`OffsetStore.isolated`, the
mechanism of :mod:`laketail.coordinator.isolation`): its groups are answered
COORDINATOR_LOAD_IN_PROGRESS until :meth:`OffsetStore.load_unavailable` reads it whole,
after its leader repaired it; the other groups are served. Only the
coordinator writes the topic (clients get INVALID_TOPIC_EXCEPTION).

Thread-safety: used from the event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

import orjson
import pyarrow as pa

from laketail.bounds import INT64_MAX, bounded_int
from laketail.coordinator.isolation import IsolatedPartitions
from laketail.coordinator.ports import coordinator_batch
from laketail.errors import InvalidProducerEpoch, NotCoordinator, OffsetMetadataTooLarge, UnknownTopicOrPartition

if TYPE_CHECKING:
    from laketail.catalog import TopicInfo
    from laketail.clock import Clock
    from laketail.coordinator.ports import CoordinatorFence, CoordinatorLog

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes

TopicPartition = tuple[str, int]

#: What decoding a malformed record of an internal topic raises (orjson's errors and
#: UnicodeDecodeError are ValueErrors): such a record is skipped at load.
UNDECODABLE = (ValueError, KeyError, TypeError, AttributeError)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str = ""
    commit_timestamp_ms: int = -1


def check_commit(topic_info: Callable[[str], "TopicInfo"], offsets: dict[TopicPartition, CommittedOffset]) -> None:
    """Why a commit of ``offsets`` must be refused, raised before anything is written
    (every commit path comes through here: group commits and transactional offsets):
    the partition exists (``topic_info`` raises for an unknown topic), the offset is
    the next offset to read or -1, within int64 (INVALID_REQUEST), the metadata is at
    most ``offset.metadata.max.bytes``."""
    for (topic, partition), committed in offsets.items():
        info = topic_info(topic)
        if not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition.partition(topic, partition)
        bounded_int(committed.offset, f"committed offset of {topic}-{partition}", -1, INT64_MAX)
        if len(committed.metadata.encode()) > MAX_METADATA_BYTES:
            raise OffsetMetadataTooLarge(
                f"metadata for {topic}-{partition} is over {MAX_METADATA_BYTES} bytes"
            )


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return orjson.dumps({"group": group, "topic": topic, "partition": partition})


def decode_key(raw: bytes | None) -> tuple[str, TopicPartition]:
    """(group, (topic, partition)) of a key :func:`encode_key` wrote; ValueError,
    KeyError or TypeError for anything else."""
    if raw is None:
        raise ValueError("null key")
    k = orjson.loads(raw)
    group, topic, partition = k["group"], k["topic"], k["partition"]
    if not isinstance(group, str) or not isinstance(topic, str) or type(partition) is not int:
        raise TypeError("key fields are not (string, string, int)")
    return group, (topic, partition)


def decode_value(raw: bytes) -> CommittedOffset:
    """The committed offset :func:`encode_value` wrote; ValueError, KeyError or TypeError
    for anything else."""
    v = orjson.loads(raw)
    offset, timestamp = v["offset"], v.get("commit_timestamp", -1)
    metadata = v.get("metadata") or ""
    if type(offset) is not int or type(timestamp) is not int or not isinstance(metadata, str):
        raise TypeError("value fields are not (int, string, int)")
    return CommittedOffset(offset, metadata, timestamp)


def encode_value(committed: CommittedOffset) -> bytes:
    return orjson.dumps(
        {
            "offset": committed.offset,
            "metadata": committed.metadata,
            "commit_timestamp": committed.commit_timestamp_ms,
        }
    )


class OffsetStore:
    """Committed offsets of every group, cached in memory, kept in ``__consumer_offsets``.

    Parts (passed in by the broker): ``internal_log`` -- the internal topic (create, append,
    load; :class:`~laketail.coordinator.ports.CoordinatorLog`); ``clock`` -- stamps
    commits that carry no timestamp; ``fence`` -- asked after each commit's write, before
    it is acknowledged, whether this broker still runs the coordinators
    (:class:`~laketail.coordinator.ports.CoordinatorFence`; none: always). Event loop
    thread only."""

    def __init__(self, internal_log: "CoordinatorLog", clock: "Clock", num_partitions: int = 50,
                 replication_factor: int = 3, fence: "CoordinatorFence | None" = None) -> None:
        self.internal_log = internal_log
        self.fence = fence
        self.clock = clock
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self._cache: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._ready = asyncio.Lock()
        self._exists = False
        #: Records of ``__consumer_offsets`` the last :meth:`load` could not decode.
        self.skipped_records = 0
        #: Partitions whose table is damaged (CORRUPT_MESSAGE): isolated, their groups
        #: refused, reloaded by :meth:`load_unavailable` once repaired.
        self.isolated = IsolatedPartitions(OFFSETS_TOPIC)

    # -- the topic -----------------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (as Kafka does)."""
        if self._exists:
            return
        async with self._ready:
            if OFFSETS_TOPIC not in self.internal_log.list_topics():
                await self.internal_log.create_topic(
                    OFFSETS_TOPIC,
                    self.num_partitions,
                    self.replication_factor,  # capped at the live brokers
                    {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
                    internal_topics_allowed=True,
                )
            else:
                self.num_partitions = self.internal_log.topic(OFFSETS_TOPIC).partitions
            self._exists = True

    @property
    def unavailable(self) -> dict[int, str]:
        """Isolated (damaged) partitions -> why; see :mod:`laketail.coordinator.isolation`."""
        return self.isolated.unavailable

    async def load(self) -> None:
        """Rebuild the cache from the log (latest value per key wins; null deletes)."""
        if OFFSETS_TOPIC not in self.internal_log.list_topics():
            return
        self.num_partitions = self.internal_log.topic(OFFSETS_TOPIC).partitions
        self._exists = True
        cache: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        skipped = 0

        async def load_partition(partition: int) -> None:
            nonlocal skipped
            skipped += await self._load_partition(cache, partition)

        await self.isolated.load(range(self.num_partitions), load_partition)
        self._cache = cache
        self.skipped_records = skipped

    async def load_unavailable(self) -> None:
        """Load the partitions the last :meth:`load` isolated, each once it reads whole
        (its leader repaired it). Raises what a read raises; the caller retries."""

        async def load_partition(partition: int) -> None:
            cache: dict[str, dict[TopicPartition, CommittedOffset]] = {}
            self.skipped_records += await self._load_partition(cache, partition)
            self._cache.update(cache)  # a group's offsets all live in one partition: no overlap

        await self.isolated.load_unavailable(load_partition)

    async def _load_partition(self, cache: dict, partition: int) -> int:
        skipped = 0
        async for records in self.internal_log.read_to_log_end(OFFSETS_TOPIC, partition):
            skipped += self._apply(cache, records, partition)
        return skipped

    def _check_available(self, group: str) -> None:
        """COORDINATOR_LOAD_IN_PROGRESS for a group whose partition is isolated."""
        if self.isolated:
            self.isolated.check(partition_for_group(group, self.num_partitions), f"group '{group}'")

    @staticmethod
    def _apply(cache: dict, records: pa.Table, partition: int = -1) -> int:
        """Apply ``records`` to ``cache``; returns how many could not be decoded (skipped)."""
        skipped = 0
        for key, value, control, offset in zip(
            records.column("key").to_pylist(),
            records.column("value").to_pylist(),
            records.column("control").to_pylist(),
            records.column("offset").to_pylist(),
        ):
            if control is not None:
                continue
            try:
                group_id, tp = decode_key(key)
                committed = decode_value(value) if value is not None else None
            except UNDECODABLE as exc:
                skipped += 1
                log.warning("%s-%d offset %d: skipping a record that cannot be decoded (%r)",
                            OFFSETS_TOPIC, partition, offset, str(exc)[:200])
                continue
            group = cache.setdefault(group_id, {})
            if committed is None:
                group.pop(tp, None)
                if not group:
                    cache.pop(group_id, None)
            else:
                group[tp] = committed
        return skipped

    # -- reads ----------------------------------------------------------------------------------

    def committed(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        self._check_available(group)
        return self._cache.get(group, {}).get(tp)

    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        self._check_available(group)
        return dict(self._cache.get(group, {}))

    def groups(self) -> list[str]:
        return sorted(self._cache)

    # -- writes ---------------------------------------------------------------------------------

    async def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Append the commit to the group's partition (acks=all), then cache it. A
        commit without a timestamp is stamped with the broker's clock."""
        if not offsets:
            return
        self._check_available(group)
        check_commit(self.internal_log.topic, offsets)
        now_ms = self.clock.now_ms()
        offsets = {
            tp: c if c.commit_timestamp_ms >= 0 else CommittedOffset(c.offset, c.metadata, now_ms)
            for tp, c in offsets.items()
        }
        await self.ensure_topic()
        await self._append(group, [(tp, c) for tp, c in offsets.items()])
        if self.fence is not None:  # a deposed coordinator's commit is not acknowledged
            await self.fence.check_coordinator_epoch()
        cached = self._cache.setdefault(group, {})
        cached.update(offsets)

    async def delete(self, group: str, tps: Iterable[TopicPartition]) -> None:
        """Tombstone the group's offsets for ``tps`` (expiry, group deletion)."""
        self._check_available(group)
        tps = [tp for tp in tps if tp in self._cache.get(group, {})]
        if not tps:
            return
        await self.ensure_topic()
        await self._append(group, [(tp, None) for tp in tps])
        cached = self._cache.get(group, {})
        for tp in tps:
            cached.pop(tp, None)
        if not cached:
            self._cache.pop(group, None)

    async def _append(self, group: str, entries: list[tuple[TopicPartition, CommittedOffset | None]]) -> None:
        keys = [encode_key(group, t, p) for (t, p), _ in entries]
        values = [encode_value(c) if c is not None else None for _, c in entries]
        partition = partition_for_group(group, self.num_partitions)
        batch = pa.RecordBatch.from_pydict(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "partition": pa.array([partition] * len(keys), pa.int32()),
            }
        )
        try:  # conditional on this coordinator's epoch (see CoordinatorFence)
            await self.internal_log.produce(OFFSETS_TOPIC, batch, acks="all", producer=coordinator_batch(self.fence),
                                            internal_topics_allowed=True)
        except InvalidProducerEpoch as exc:
            raise NotCoordinator(f"a newer coordinator has written to {OFFSETS_TOPIC}-{partition}: {exc}") from exc

    async def expire(self, now_ms: int, retention_ms: int, active_groups: set[str]) -> int:
        """Kafka's ``offsets.retention.minutes``: a group with no members loses the
        offsets it has not committed for longer than ``retention_ms``."""
        expired = 0
        for group in list(self._cache):
            if group in active_groups:
                continue
            stale = [
                tp for tp, c in self._cache[group].items()
                if c.commit_timestamp_ms >= 0 and now_ms - c.commit_timestamp_ms > retention_ms
            ]
            if stale:
                await self.delete(group, stale)
                expired += len(stale)
        return expired
