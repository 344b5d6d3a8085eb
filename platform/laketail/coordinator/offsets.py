"""Committed consumer offsets, stored in the internal compacted topic ``__consumer_offsets``.

Role: the durable home of every group's committed offsets, and their in-memory state.
A commit appends one batch to the ``__consumer_offsets`` partition of its group
(``abs(java_hash(group)) % offsets.topic.num.partitions``, as Kafka places groups),
conditional on the coordinators' epoch (the partition refuses it once a newer
coordinator has written there), and returns once it is on every in-sync replica and the
broker has checked it still runs the coordinators (``fence``, see
:class:`~laketail.coordinator.ports.CoordinatorFence`).

State is one :class:`OffsetShard` per partition of the topic (Kafka's coordinator
shards), and it changes only through :meth:`OffsetShard.replay`, one decoded
:class:`OffsetRecord` at a time: a load replays the partition's records in log order
(every partition read to the high watermark, table tier then hot tier, when the broker
takes the coordinators over; one partition by :meth:`OffsetStore.load_partition`), and
a write replays the records it appended once they are acknowledged. A restart so reads
back exactly the state the writes made.

Which partitions run here is :attr:`OffsetStore.ownership`
(:mod:`laketail.coordinator.shards`): a group whose partition is not elected here is
answered NOT_COORDINATOR, one whose partition is still loading COORDINATOR_LOAD_IN_PROGRESS.

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
from laketail.coordinator.shards import ShardOwnership
from laketail.errors import InvalidProducerEpoch, NotCoordinator, OffsetMetadataTooLarge, UnknownTopicOrPartition
from laketail.records import data_records

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


@dataclass(frozen=True)
class OffsetRecord:
    """One record of ``__consumer_offsets``, decoded: ``group``'s committed offset of
    ``tp``, or ``None`` (a tombstone: the offset is deleted)."""

    group: str
    tp: TopicPartition
    committed: CommittedOffset | None

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> "OffsetRecord":
        """The record :meth:`encode` wrote; one of :data:`UNDECODABLE` for anything else."""
        group, tp = decode_key(key)
        return cls(group, tp, decode_value(value) if value is not None else None)

    def encode(self) -> tuple[bytes, bytes | None]:
        """(key, value) as they go to the log (the format of the module docstring)."""
        value = encode_value(self.committed) if self.committed is not None else None
        return encode_key(self.group, *self.tp), value


class OffsetShard:
    """The committed offsets one partition of ``__consumer_offsets`` holds (Kafka's
    coordinator shard): built by replaying that partition's records at load, then kept
    current by replaying each record this coordinator writes there. :meth:`replay` is
    the only way its state changes. Event loop thread only."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        #: group -> (topic, partition) -> its committed offset
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def replay(self, record: OffsetRecord) -> None:
        """Apply one record: the latest value of a key wins, a tombstone deletes it."""
        if record.committed is None:
            group = self.offsets.get(record.group)
            if group is not None:
                group.pop(record.tp, None)
                if not group:
                    del self.offsets[record.group]
        else:
            self.offsets.setdefault(record.group, {})[record.tp] = record.committed


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
        #: partition of ``__consumer_offsets`` -> what it holds; a partition not loaded
        #: (isolated, or unloaded) has no shard
        self._shards: dict[int, OffsetShard] = {}
        self._ready = asyncio.Lock()
        self._exists = False
        #: Records of ``__consumer_offsets`` the last :meth:`load` could not decode.
        self.skipped_records = 0
        #: Partitions whose table is damaged (CORRUPT_MESSAGE): isolated, their groups
        #: refused, reloaded by :meth:`load_unavailable` once repaired.
        self.isolated = IsolatedPartitions(OFFSETS_TOPIC)
        #: Which partitions run here and are loaded (elected by :meth:`load` or
        #: :meth:`load_partition`, resigned by :meth:`unload_partition`)
        self.ownership = ShardOwnership(OFFSETS_TOPIC)
        #: the epoch of the last :meth:`load` (the coordinators' take-over)
        self.epoch = 0

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

    async def load(self, epoch: int | None = None) -> None:
        """Run every partition of the topic here, elected at ``epoch`` (default: the
        epoch of the last load), each shard rebuilt from the log (its records replayed in
        order) and served once read.

        What was loaded replaces what this store had (a partition elected at a newer
        epoch already is left as it is); a partition that cannot be read whole is
        isolated and stays loading until :meth:`load_unavailable` loads it. Raises what a
        read raises (the partitions not read yet stay loading)."""
        if OFFSETS_TOPIC in self.internal_log.list_topics():
            self.num_partitions = self.internal_log.topic(OFFSETS_TOPIC).partitions
            self._exists = True
        epoch = self.epoch if epoch is None else epoch
        self.epoch = epoch
        self.ownership.pin(range(0), epoch)
        elected = [p for p in range(self.num_partitions) if self.ownership.elect(p, epoch)]
        for partition in set(self._shards) - set(self.ownership.owned()) | set(elected):
            self._shards.pop(partition, None)
        self.skipped_records = 0
        if not self._exists:  # nothing written yet: every shard is empty
            for partition in elected:
                self._install(partition, epoch, OffsetShard(partition), 0)
            return

        async def load_partition(partition: int) -> None:
            shard, skipped = await self._read_shard(partition)
            self._install(partition, epoch, shard, skipped)

        await self.isolated.load(elected, load_partition)
        for partition, why in self.isolated.unavailable.items():
            self.ownership.stall(partition, epoch, f"damaged, waiting for its repair: {why}")

    async def load_unavailable(self) -> None:
        """Load the partitions the last :meth:`load` isolated, each once it reads whole
        (its leader repaired it). Raises what a read raises; the caller retries."""
        await self.isolated.load_unavailable(self.load_partition)

    async def load_partition(self, partition: int, epoch: int | None = None) -> None:
        """Kafka's ``onElection``: run ``partition`` here from ``epoch`` on (default: the
        epoch of the last :meth:`load`), answered COORDINATOR_LOAD_IN_PROGRESS until its
        shard is rebuilt from the log and served. Raises what a read raises, and the
        partition stays loading (the caller loads it again or unloads it); a load that
        finishes after the partition was unloaded or elected again is dropped."""
        epoch = self.epoch if epoch is None else epoch
        if not self.ownership.elect(partition, epoch):
            return  # elected at a newer epoch already
        try:
            shard, skipped = await self._read_shard(partition)
        except Exception as exc:
            self.ownership.stall(partition, epoch, f"its load failed: {exc}")
            raise
        self._install(partition, epoch, shard, skipped)

    def unload_partition(self, partition: int, epoch: int | None = None) -> None:
        """Kafka's ``onResignation``: stop running ``partition`` here (its groups are
        answered NOT_COORDINATOR) and forget its offsets, unless it was elected at a
        newer epoch than ``epoch`` (None: whatever is held)."""
        self.ownership.pin(range(self.num_partitions), self.epoch)
        if self.ownership.resign(partition, epoch) or self.ownership.epoch(partition) is None:
            self._shards.pop(partition, None)

    def unload(self) -> None:
        """Stop running every partition here (the coordinators moved away)."""
        self.ownership.pin(range(0), self.epoch)
        for partition in self.ownership.owned():
            self.ownership.resign(partition)
        self._shards = {}

    def _install(self, partition: int, epoch: int, shard: OffsetShard, skipped: int) -> None:
        """Serve a loaded shard, unless its partition was unloaded or elected again meanwhile."""
        if self.ownership.activate(partition, epoch):
            self._shards[partition] = shard
            self.skipped_records += skipped

    async def _read_shard(self, partition: int) -> tuple[OffsetShard, int]:
        """A new shard with every record of ``partition`` replayed, and how many records
        could not be decoded (skipped, logged)."""
        shard = OffsetShard(partition)
        skipped = 0
        async for records in self.internal_log.read_to_log_end(OFFSETS_TOPIC, partition):
            for key, value, offset in data_records(records):
                try:
                    record = OffsetRecord.decode(key, value)
                except UNDECODABLE as exc:
                    skipped += 1
                    log.warning("%s-%d offset %d: skipping a record that cannot be decoded (%r)",
                                OFFSETS_TOPIC, partition, offset, str(exc)[:200])
                    continue
                shard.replay(record)
        return shard, skipped

    def replay(self, record: OffsetRecord) -> None:
        """Apply a record this coordinator has written (after its append succeeded): the
        same :meth:`OffsetShard.replay` a load goes through, so a restart reads back
        exactly the state the writes made. A record of a partition not loaded here is
        left to that partition's next load (it reads it from the log)."""
        shard = self._shard_for(record.group)
        if shard is not None:
            shard.replay(record)

    def _shard_for(self, group: str) -> OffsetShard | None:
        """The shard ``group``'s writes replay into: the one loaded, or (for a store that
        runs every partition without elections) a new empty one."""
        partition = partition_for_group(group, self.num_partitions)
        shard = self._shards.get(partition)
        if shard is None and self.ownership.everything:
            shard = self._shards[partition] = OffsetShard(partition)
        return shard

    def _check_available(self, group: str) -> None:
        """NOT_COORDINATOR for a group whose partition does not run here,
        COORDINATOR_LOAD_IN_PROGRESS while it loads or is isolated."""
        partition = partition_for_group(group, self.num_partitions)
        if self.isolated:
            self.isolated.check(partition, f"group '{group}'")
        self.ownership.check(partition, f"group '{group}'")

    def partition_of(self, group: str) -> int:
        """The partition of ``__consumer_offsets`` that keeps ``group``'s state."""
        return partition_for_group(group, self.num_partitions)

    def check_group(self, group: str) -> None:
        """Raise unless ``group``'s partition runs here and is loaded (the group
        coordinator asks before it admits a member)."""
        self._check_available(group)

    def _offsets_of(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        shard = self._shards.get(partition_for_group(group, self.num_partitions))
        return shard.offsets.get(group, {}) if shard is not None else {}

    # -- reads ----------------------------------------------------------------------------------

    def committed(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        self._check_available(group)
        return self._offsets_of(group).get(tp)

    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        self._check_available(group)
        return dict(self._offsets_of(group))

    def groups(self) -> list[str]:
        return sorted(g for shard in self._shards.values() for g in shard.offsets)

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
        records = [OffsetRecord(group, tp, c) for tp, c in offsets.items()]
        shard = self._shard_for(group)
        await self._append(group, records)
        if self.fence is not None:  # a deposed coordinator's commit is neither acknowledged nor served
            await self.fence.check_coordinator_epoch()
        self._replay_written(shard, records)

    async def delete(self, group: str, tps: Iterable[TopicPartition]) -> None:
        """Tombstone the group's offsets for ``tps`` (expiry, group deletion)."""
        self._check_available(group)
        held = self._offsets_of(group)
        records = [OffsetRecord(group, tp, None) for tp in tps if tp in held]
        if not records:
            return
        await self.ensure_topic()
        shard = self._shard_for(group)
        await self._append(group, records)
        self._replay_written(shard, records)

    def _replay_written(self, shard: OffsetShard | None, records: list[OffsetRecord]) -> None:
        """Replay acknowledged records into the shard that was served when they were
        checked: if the partition was unloaded (or unloaded and loaded again) meanwhile,
        its load read them from the log, and replaying them again over a newer load
        could put an older value back."""
        if shard is None or self._shards.get(shard.partition) is not shard:
            return
        for record in records:
            shard.replay(record)

    async def _append(self, group: str, records: list[OffsetRecord]) -> None:
        encoded = [record.encode() for record in records]
        keys = [key for key, _ in encoded]
        values = [value for _, value in encoded]
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
        for group in self.groups():
            if group in active_groups:
                continue
            stale = [
                tp for tp, c in self._offsets_of(group).items()
                if c.commit_timestamp_ms >= 0 and now_ms - c.commit_timestamp_ms > retention_ms
            ]
            if stale:
                await self.delete(group, stale)
                expired += len(stale)
        return expired
