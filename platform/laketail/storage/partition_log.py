"""One partition's hot log: its ordered segments, its offsets, its group commit.

Role: turn producer batches into dense offsets on local disk, durably per the topic's
flush policy, and serve reads of the hot tier.

Invariants:

* offsets are dense: every frame's ``base_offset`` is the previous frame's
  ``base_offset + record_count``, across segments too;
* ``log_start_offset <= hot_start_offset <= tiered_offset <= high_watermark <= log_end_offset``
  once tiering has caught up; ``tiered_offset`` may run ahead of ``hot_start_offset``
  only in the sense that hot segments below it are a read cache;
* only records below ``high_watermark`` are ever returned by :meth:`read`; with one
  replica HW moves to LEO after each group commit (replication will move it by ISR).

Thread-safety: appends are grouped on the event loop (:meth:`append` queues, one drain
task writes) and the write itself runs under ``_lock``: in a worker thread when it
fsyncs or rolls a segment, on the event loop (no thread hop) when it only copies into
the page cache. The segment
list is copy-on-write, so :meth:`read` (worker threads) needs no lock. Offsets are
plain ints, published after the bytes are written.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from laketail.clock import Clock
from laketail.config import TopicConfig
from laketail.errors import HotTierFull, KafkaStorageError, LaketailError
from laketail.records import RECORD_SCHEMA, to_record_batch, widen_frames
from laketail.storage import frame
from laketail.storage.block_cache import BLOCKS, NotCached
from laketail.storage.frame import FrameHeader
from laketail.storage.producer_state import Duplicate, LearnedProducer, ProducerStateManager
from laketail.storage.segment import SUFFIX, Segment

if TYPE_CHECKING:
    from laketail.storage.sibling_log import SharedOffsets

#: the file a leader publishes its offsets in for sibling request processes (sibling_log.py)
SHARED_OFFSETS_FILE = "offsets.shm"

log = logging.getLogger(__name__)


class _ReadsRaw(Protocol):
    def read_raw(self, position: int, limit: int) -> bytes: ...


#: bytes :meth:`PartitionLog.read_once` reads with one ``pread`` (a larger frame is read whole)
READ_ONCE_SPAN = 8 * 1024 * 1024


def _spans(segment: Segment | _ReadsRaw, position: int, limit: int):
    """Yield ``(header, (buffer, at))`` for the frames of ``segment`` from byte
    ``position`` up to ``limit``, reading ``READ_ONCE_SPAN`` bytes at a time."""
    while position < limit:
        span = pa.py_buffer(segment.read_raw(position, min(limit, position + READ_ONCE_SPAN)))
        view = memoryview(span)
        at = 0
        while at + frame.HEADER_SIZE <= span.size:
            header = frame.decode_header(view, at)
            if at + header.size > span.size:
                break
            yield header, (span, at)
            at += header.size
        if at == 0:  # the next frame is larger than a span: read it whole
            header = frame.decode_header(view, 0)
            yield header, (pa.py_buffer(segment.read_raw(position, position + header.size)), 0)
            at = header.size
        position += at


def _window(frames, start: int, end: int, max_records: int, max_bytes: int):
    """From ``(header, where)`` pairs in offset order, yield ``(header, where, lo, rows)``:
    the records ``[lo, lo + rows)`` of each frame that fall in ``[start, end)`` and fit
    what is left of the limits (the first frame gives at least one record, so a consumer
    always progresses). It stops at a frame it cannot take whole: going on to the next
    one would leave a gap in the offsets read."""
    taken = 0
    nbytes = 0
    for header, where in frames:
        if header.next_offset <= start:
            continue
        if header.base_offset >= end:
            return
        lo = max(start - header.base_offset, 0)
        wanted = min(end - header.base_offset, header.record_count) - lo
        rows = min(wanted, max_records - taken)
        if header.length:
            fit = max(max_bytes - nbytes, 0) * header.record_count // header.length
            rows = min(rows, max(fit, 1 if taken == 0 else 0))
        if rows > 0:
            yield header, where, lo, rows
            taken += rows
            nbytes += header.length * rows // max(header.record_count, 1)
        if rows < wanted:
            return


def local_retention_bytes(config: TopicConfig) -> int:
    """``local.retention.bytes`` with Kafka's -2 resolved to ``retention.bytes``; negative
    means no limit."""
    return config.retention_bytes if config.local_retention_bytes == -2 else config.local_retention_bytes


class OffsetBelowHotTier(Exception):
    """The wanted offset is no longer in the hot tier (local retention removed it):
    read the table instead."""


@dataclass
class _PendingAppend:
    payload: pa.Buffer
    count: int
    max_timestamp: int
    leader_epoch: int
    attributes: int
    future: asyncio.Future
    producer: ProducerBatch | None = None


@dataclass(frozen=True)
class ProducerBatch:
    """Who sent a batch: the producer id, epoch and first sequence (-1 when not
    idempotent), whether it is transactional, and the marker kind for control batches."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool = False
    control: str | None = None

    @property
    def attributes(self) -> int:
        bits = frame.ATTR_IDEMPOTENT
        if self.transactional:
            bits |= frame.ATTR_TRANSACTIONAL
        if self.control is not None:
            bits |= frame.ATTR_CONTROL
        return bits


class PartitionLog:
    """One partition replica's hot log: its ordered segments and the offsets that bound them.

    It owns ``log_start_offset``, ``log_end_offset``, ``high_watermark``, ``tiered_offset``
    (with ``hot_start_offset``, the first segment's base, and ``last_stable_offset``, from
    the producer state), the leader-epoch cache and the producer state. Records enter
    through :meth:`append` (a leader's produce: queued, then checked against the producer
    state and written by one group commit per drain) or :meth:`append_raw` (a follower's
    copy of the leader's frames, bytes unchanged); :meth:`truncate_to` and
    :meth:`reset_to` cut a follower back. The high watermark follows the log end after each
    write until replication takes it over (:meth:`start_replication` when opened as one
    replica of several, :meth:`lead` or :meth:`follow` when the replica manager assigns
    the role); from then on it moves only through :meth:`set_high_watermark`, its one
    setter (never backwards, never past the log end; it publishes the offsets and wakes
    long polls). No other module writes these fields
    (``tests/test_architecture_partition_log.py``). The tierer moves ``tiered_offset``
    (:meth:`mark_tiered`) and retention ``log_start_offset`` (:meth:`advance_log_start`).

    Invariants and thread-safety: the module docstring (dense offsets; reads only below
    the high watermark; writes under ``_lock``, reads lock-free on the copy-on-write
    segment list).
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: TopicConfig,
        clock: Clock,
        segments: list[Segment],
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._segments = segments  # copy-on-write
        self._lock = threading.Lock()
        self._pending: list[_PendingAppend] = []
        self._writer: asyncio.Task | None = None
        self._data_event: asyncio.Event | None = None
        self._retired: list[tuple[float, Segment]] = []
        self._unflushed = 0
        self._last_flush_ms = clock.now_ms()
        self.log_end_offset = segments[-1].next_offset
        self.high_watermark = self.log_end_offset
        self.tiered_offset = 0
        self.log_start_offset = segments[0].base_offset
        self.untiered_bytes = 0  # approximate payload bytes above tiered_offset
        self._refusing = False  # refuse_when_backlogged refused the last producer batch
        self.producer_state = ProducerStateManager()
        # Replication: with followers the replica manager moves HW (min LEO over the
        # ISR); alone, HW follows LEO after each write.
        self._hw_follows_leo = True
        self._on_append: Callable[["PartitionLog"], None] | None = None
        #: request-process mode: where this log publishes its offsets for the broker's
        #: other processes, which read it from disk (``storage/sibling_log.py``)
        self.shared: "SharedOffsets | None" = None
        self._leo_event: asyncio.Event | None = None
        # Leader-epoch cache: (epoch, first offset appended in it), ascending.
        self.epochs: list[tuple[int, int]] = []
        for seg in segments:
            for epoch, start in seg.epoch_starts:
                self._note_epoch(epoch, start)

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: TopicConfig,
        clock: Clock,
        tiered_offset: int = 0,
        log_start_offset: int | None = None,
    ) -> "PartitionLog":
        """Open (or create) the partition's segments and recover a torn tail.

        Segments that may hold records not yet in the table are CRC-verified frame by
        frame; older ones only have their headers checked. The first invalid frame ends
        the log: it and everything after it (later segments too) is removed. If the
        table already holds more than the hot log (the hot tail was lost after tiering),
        the hot log restarts at ``tiered_offset``.
        """
        directory.mkdir(parents=True, exist_ok=True)
        paths = sorted(directory.glob(f"*{SUFFIX}"))
        segments: list[Segment] = []
        for i, path in enumerate(paths):
            next_base = int(paths[i + 1].name[: -len(SUFFIX)]) if i + 1 < len(paths) else None
            verify = next_base is None or next_base > tiered_offset
            if segments and int(path.name[: -len(SUFFIX)]) != segments[-1].next_offset:
                log.warning("%s: offset gap before %s; dropping it and later segments", directory, path.name)
                _delete_paths(paths[i:])
                break
            seg, report = Segment.open(path, verify_crc=verify)
            segments.append(seg)
            if report.truncated_bytes and i + 1 < len(paths):
                log.warning("%s: corrupt frame inside %s; dropping later segments", directory, path.name)
                _delete_paths(paths[i + 1 :])
                break
        now = clock.now_ms()
        if segments and segments[-1].next_offset < tiered_offset:
            log.warning(
                "%s: hot log ends at %d below the tiered offset %d; restarting it there",
                directory, segments[-1].next_offset, tiered_offset,
            )
            for seg in segments:
                seg.delete()
            segments = []
        if not segments:
            segments = [Segment.create(directory, tiered_offset, now)]
        plog = cls(directory, topic, partition, config, clock, segments)
        plog._rebuild_producer_state()
        for seg in segments:
            seg.release()  # reopened on first use: idle partitions hold no file handles
        plog.tiered_offset = tiered_offset
        plog.untiered_bytes = plog._bytes_from(tiered_offset)
        # The table's log start (moved by retention) wins even while hot segments still
        # hold what retention deleted; without one, the hot log's first offset.
        plog.log_start_offset = min(
            log_start_offset if log_start_offset is not None else segments[0].base_offset,
            plog.log_end_offset,
        )
        return plog

    # -- producer state persistence -----------------------------------------------------------

    @property
    def _snapshot_path(self) -> Path:
        return self.directory / "producer.snapshot"

    def write_producer_snapshot(self) -> None:
        """Persist producer state as of the log end (atomically: temp file + rename)."""
        with self._lock:
            doc = {"offset": self.log_end_offset, "state": self.producer_state.snapshot()}
        tmp = self._snapshot_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self._snapshot_path)

    def _rebuild_producer_state(self) -> None:
        """Snapshot, then replay every producer frame at or above its offset. A snapshot
        older than the hot log's first offset (the log restarted above it) leaves frames
        unreplayed between them: it is not used, and the state knows no markers below
        the hot log (``ProducerStateManager.markers_from``)."""
        start = 0
        first = self._segments[0].base_offset
        self.producer_state.markers_from = first
        try:
            doc = json.loads(self._snapshot_path.read_text())
            if first <= doc["offset"] <= self.log_end_offset:
                self.producer_state = ProducerStateManager.restore(doc["state"])
                start = doc["offset"]
        except (FileNotFoundError, ValueError, KeyError):
            pass
        for segment in self._segments:
            for base, position in segment.producer_frames:
                if base < start:
                    continue
                for header, _, batch in segment.read_frames(position, position + 1):
                    self._apply_producer_frame(header, batch)

    def _apply_producer_frame(self, header: frame.FrameHeader, batch: pa.RecordBatch) -> None:
        """Producer state after one frame of a producer's batch (recovery, follower appends)."""
        self.producer_state.apply(
            batch.column("producer_id")[0].as_py(),
            batch.column("producer_epoch")[0].as_py(),
            batch.column("sequence")[0].as_py(),
            header.record_count,
            header.base_offset,
            header.max_timestamp // 1000,
            bool(header.attributes & frame.ATTR_TRANSACTIONAL),
            batch.column("control")[0].as_py(),
        )

    # -- offsets ------------------------------------------------------------------------------

    @property
    def hot_start_offset(self) -> int:
        """The first offset the hot tier still holds (below it, read the table)."""
        return self._segments[0].base_offset

    @property
    def segments(self) -> list[Segment]:
        return self._segments

    def _bytes_from(self, offset: int) -> int:
        """The hot log's bytes from ``offset`` to its end (from the indexed frame at or
        before it: a little more, never less)."""
        total = 0
        for segment in self._segments:
            if segment.next_offset > offset:
                total += segment.size - (segment.position_for(offset) if segment.base_offset <= offset else 0)
        return total

    def refuse_when_backlogged(self, limit_bytes: int) -> None:
        """The check before a producer's append: :class:`~laketail.errors.HotTierFull`
        when more than ``limit_bytes`` (``local.retention.bytes``; negative: no limit) wait
        to be tiered. The batch that crosses the limit, and those queued with it, are
        taken; later ones are refused until tiering brings the backlog back under it."""
        if 0 <= limit_bytes < self.untiered_bytes:
            if not self._refusing:  # once per episode, not per request
                self._refusing = True
                log.warning("%s-%d: refusing produce (KAFKA_STORAGE_ERROR): %d bytes wait to be tiered, more "
                            "than local.retention.bytes=%d", self.topic, self.partition, self.untiered_bytes,
                            limit_bytes)
            raise HotTierFull(
                f"{self.topic}-{self.partition}: {self.untiered_bytes} bytes wait to be tiered, more than "
                f"local.retention.bytes={limit_bytes} (the object store is down or behind); retry later"
            )
        if self._refusing:
            self._refusing = False
            log.warning("%s-%d: accepting produce again (%d bytes wait to be tiered)", self.topic, self.partition,
                        self.untiered_bytes)

    def advance_log_start(self, offset: int) -> None:
        """Retention deleted everything below ``offset`` (never moves backwards, never
        past the high watermark)."""
        self.log_start_offset = max(self.log_start_offset, min(offset, self.high_watermark))
        self.publish()

    def mark_tiered(self, offset: int) -> None:
        if offset <= self.tiered_offset:
            return
        waiting = self.log_end_offset - self.tiered_offset
        left = self.log_end_offset - offset
        self.untiered_bytes = self.untiered_bytes * left // waiting if waiting > 0 else 0
        self.tiered_offset = offset
        self.publish()

    def publish(self) -> None:
        """Tell the broker's other request processes the offsets that bound their reads
        of this log (nothing to do outside request-process mode)."""
        if self.shared is not None:
            self.shared.publish(self.high_watermark, self.last_stable_offset, self.log_start_offset,
                                self.tiered_offset)

    # -- appending -------------------------------------------------------------------------------

    async def append(
        self,
        batch: pa.RecordBatch,
        leader_epoch: int = 0,
        attributes: int = 0,
        max_timestamp_us: int | None = None,
        producer: ProducerBatch | None = None,
    ) -> int:
        """Append one producer batch (FRAME_SCHEMA); return its base offset.

        Returns once the batch is written (and fsynced when the flush policy says so).
        Requests that arrive while a write is in flight go together in the next one
        (group commit).
        """
        if batch.num_rows == 0:
            raise ValueError("empty batch")
        payload = frame.serialize_batch(batch)
        max_ts = (
            max_timestamp_us if max_timestamp_us is not None
            else pc.max(batch.column("timestamp")).value
        )
        future = asyncio.get_running_loop().create_future()
        if producer is not None:
            attributes |= producer.attributes
        self._pending.append(
            _PendingAppend(payload, batch.num_rows, max_ts, leader_epoch, attributes, future, producer)
        )
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._pending:
            group, self._pending = self._pending, []
            try:
                bases = self._write_on_loop(group)
                if bases is None:
                    bases = await asyncio.to_thread(self._write_group, group)
            except Exception as exc:  # disk full, I/O error: fail this group, keep going
                log.exception("append to %s-%d failed", self.topic, self.partition)
                for item in group:
                    if not item.future.done():
                        item.future.set_exception(
                            KafkaStorageError(f"append to {self.topic}-{self.partition} failed: {exc}")
                        )
                continue
            for item, base in zip(group, bases):
                if item.future.done():
                    continue
                if isinstance(base, BaseException):
                    item.future.set_exception(base)
                else:
                    item.future.set_result(base)
            self._appended()

    def _appended(self) -> None:
        """After a write: wake replica fetchers (LEO moved) and readers (HW moved)."""
        if self._leo_event is not None:
            self._leo_event.set()
            self._leo_event = None
        if self._on_append is not None:
            self._on_append(self)
        self.publish()
        self._notify()

    def _write_on_loop(self, group: list[_PendingAppend]) -> list[int | Exception] | None:
        """Write ``group`` right here on the event loop when that costs no more than a
        copy into the page cache: the flush policy asks no fsync of it, no segment is
        due to roll and no other thread holds the lock. ``None`` otherwise: the caller
        writes in a worker thread (an fsync, a new segment file or a wait for the lock
        would stall every request on the loop)."""
        now = self.clock.now_ms()
        records = sum(item.count for item in group)
        nbytes = sum(frame.HEADER_SIZE + len(item.payload) for item in group)
        if not self._lock_for_loop_write(now, records, nbytes):
            return None
        try:
            return self._write_group_locked(group)
        finally:
            self._lock.release()

    def _lock_for_loop_write(self, now: int, records: int, nbytes: int) -> bool:
        """Whether a write of ``records`` records in ``nbytes`` bytes may run on the event
        loop, taking the lock if so (the caller releases it): the flush policy asks no
        fsync of it, no segment is due to roll and no other thread holds the lock."""
        return (not self._flush_due(now, self._unflushed + records) and not self._roll_due(now, nbytes)
                and self._lock.acquire(blocking=False))

    def _write_group(self, group: list[_PendingAppend]) -> list[int | Exception]:
        """Validate producer batches, assign offsets, write, fsync per policy. A batch a
        producer check refuses gets its error; a retried one its original offset."""
        with self._lock:
            return self._write_group_locked(group)

    def _write_group_locked(self, group: list[_PendingAppend]) -> list[int | Exception]:
        now = self.clock.now_ms()
        state = self.producer_state
        # Undo record for a failed write: the entries of this group's producers as they
        # were, and the markers this group adds.
        pids = {item.producer.producer_id for item in group if item.producer is not None}
        saved = {pid: copy.deepcopy(state.producers.get(pid)) for pid in pids}
        added_markers: list[tuple[int, int]] = []
        results: list[int | Exception] = []
        frames = []
        offset = self.log_end_offset
        for item in group:
            meta = item.producer
            if meta is not None and meta.producer_id >= 0:
                try:
                    dup = state.check(meta.producer_id, meta.producer_epoch, meta.base_sequence,
                                      item.count, meta.control is not None)
                except LaketailError as exc:  # OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH
                    results.append(exc)
                    continue
                if isinstance(dup, Duplicate):
                    results.append(dup.base_offset)
                    continue
                state.apply(meta.producer_id, meta.producer_epoch, meta.base_sequence, item.count,
                            offset, item.max_timestamp // 1000, meta.transactional, meta.control)
                if meta.control is not None:
                    added_markers.append((meta.producer_id, offset))
            head = frame.encode_header(
                item.payload,
                base_offset=offset,
                record_count=item.count,
                max_timestamp=item.max_timestamp,
                leader_epoch=item.leader_epoch,
                attributes=item.attributes,
            )
            header = FrameHeader(0, len(item.payload), offset, item.count, item.max_timestamp,
                                 item.leader_epoch, item.attributes)
            frames.append((head, item.payload, header))
            self._note_epoch(item.leader_epoch, offset)
            results.append(offset)
            offset += item.count
        if not frames:
            return results
        incoming = sum(f[2].size for f in frames)
        self._maybe_roll(now, incoming)
        segment = self._segments[-1]
        size_before = segment.size
        try:
            segment.append(frames, now)
        except OSError:
            for pid, entry in saved.items():
                if entry is None:
                    state.producers.pop(pid, None)
                else:
                    state.producers[pid] = entry
            for pid, marker_offset in added_markers:
                state.forget_marker(pid, marker_offset)
            try:
                segment.truncate_to(size_before)
            except OSError:
                log.exception("could not cut %s back after a failed write", segment.path)
            raise
        self._unflushed += offset - self.log_end_offset
        if self._flush_due(now, self._unflushed):
            segment.flush()
            self._unflushed = 0
            self._last_flush_ms = now
        self.untiered_bytes += sum(len(f[1]) for f in frames)
        self.log_end_offset = offset
        if self._hw_follows_leo:
            self.high_watermark = offset
        return results

    @property
    def last_stable_offset(self) -> int:
        """HW, or the first offset of the oldest open transaction when that is lower."""
        unstable = self.producer_state.first_unstable_offset()
        return self.high_watermark if unstable is None else min(unstable, self.high_watermark)

    def _flush_due(self, now: int, unflushed: int) -> bool:
        """Whether the flush policy asks an fsync once ``unflushed`` records are
        written (``flush.messages``, ``flush.ms``): the write decides by it, and
        :meth:`_write_on_loop` beforehand, so the event loop never fsyncs."""
        return unflushed >= self.config.flush_messages or now - self._last_flush_ms >= self.config.flush_ms

    def _roll_due(self, now: int, incoming: int) -> bool:
        """Whether ``incoming`` more bytes start a new segment (``segment.bytes``,
        ``segment.ms``; an empty segment is never rolled)."""
        active = self._segments[-1]
        return bool(active.size) and (active.size + incoming > self.config.segment_bytes
                                      or now - active.created_ms >= self.config.segment_ms)

    def _maybe_roll(self, now: int, incoming: int) -> None:
        if self._roll_due(now, incoming):
            self._segments[-1].flush()
            fresh = Segment.create(self.directory, self.log_end_offset, now)
            self._segments = self._segments + [fresh]

    def release_idle_handles(self, now: float, idle_s: float) -> int:
        """Close the file descriptors of segments nobody used for ``idle_s`` monotonic
        seconds (reopened on the next use); returns how many closed. Any thread."""
        return sum(segment.release_if_idle(now, idle_s) for segment in list(self._segments))

    def flush_if_due(self, now: int) -> None:
        """Honour ``flush.ms`` when no further append comes to do it."""
        if self._unflushed and now - self._last_flush_ms >= self.config.flush_ms:
            with self._lock:
                self._segments[-1].flush()
                self._unflushed = 0
                self._last_flush_ms = now

    def _notify(self) -> None:
        if self._data_event is not None:
            self._data_event.set()
            self._data_event = None

    async def wait_for_data(self, offset: int, timeout_s: float) -> None:
        """Return when the high watermark passes ``offset`` or ``timeout_s`` elapses."""
        if self.high_watermark > offset:
            return
        if self._data_event is None:
            self._data_event = asyncio.Event()
        event = self._data_event
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass

    # -- replication ------------------------------------------------------------------------------

    def _note_epoch(self, epoch: int, start: int) -> None:
        if not self.epochs or epoch > self.epochs[-1][0]:
            self.epochs.append((epoch, start))

    @property
    def latest_epoch(self) -> int:
        """The leader epoch of the last frame (or of the last leadership assigned); -1
        for a log that never had one."""
        return self.epochs[-1][0] if self.epochs else -1

    def assign_epoch(self, epoch: int) -> None:
        """Becoming leader in ``epoch``: its appends start at the current LEO (so a
        follower asking where ``epoch - 1`` ended gets the right answer before any)."""
        with self._lock:
            self._note_epoch(epoch, self.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: the largest epoch at or below ``epoch`` this log
        knows and the offset where it ended (the next epoch's start, or LEO for the
        latest). ``(-1, -1)`` when the log knows no such epoch."""
        epochs = self.epochs
        for i in range(len(epochs) - 1, -1, -1):
            known, _ = epochs[i]
            if known <= epoch:
                end = epochs[i + 1][1] if i + 1 < len(epochs) else self.log_end_offset
                return known, end
        return -1, -1

    # -- replication's hold on the high watermark --------------------------------------------

    def start_replication(self, high_watermark: int) -> None:
        """Opened as one replica of several: HW restarts at ``high_watermark`` (what is
        known replicated, the table's end; never past LEO) instead of the log end, and
        from now on moves only through :meth:`set_high_watermark`. Called before the log
        serves anything."""
        self._hw_follows_leo = False
        self.high_watermark = min(self.log_end_offset, high_watermark)

    def lead(self, on_append: Callable[["PartitionLog"], None]) -> None:
        """This replica leads: ``on_append`` runs after each write (the replica manager
        moves HW to the smallest log end over the ISR); HW no longer follows LEO."""
        self._hw_follows_leo = False
        self._on_append = on_append

    def follow(self) -> None:
        """This replica follows (or stopped leading): nothing runs after a write, and HW
        moves only as the leader's fetch answers say (:meth:`set_high_watermark`)."""
        self._hw_follows_leo = False
        self._on_append = None

    def set_high_watermark(self, hw: int) -> None:
        """Move HW forward to ``hw`` (never backwards, never past LEO), publish the
        offsets and wake the long polls waiting on it: replication's one way to move it."""
        hw = min(hw, self.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            self.publish()
            self._notify()

    async def wait_for_leo(self, offset: int, timeout_s: float) -> None:
        """Return when LEO passes ``offset`` (a follower's fetch has something) or the
        timeout elapses."""
        if self.log_end_offset > offset:
            return
        if self._leo_event is None:
            self._leo_event = asyncio.Event()
        event = self._leo_event
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass

    def read_raw(self, start: int, max_bytes: int) -> bytes:
        """Frames from offset ``start`` (a frame boundary) up to LEO, as stored: at least
        one frame, then whole frames while under ``max_bytes``. Raises
        :class:`OffsetBelowHotTier` below the first hot segment and ``ValueError`` when
        ``start`` is not where a frame begins."""
        segments = self._segments
        if start >= self.log_end_offset:
            return b""
        if start < segments[0].base_offset:
            raise OffsetBelowHotTier(start)
        bases = [s.base_offset for s in segments]
        i = bisect.bisect_right(bases, start) - 1
        out: list[bytes] = []
        taken = 0
        for segment in segments[i:]:
            position = segment.frame_position(start) if not out else 0
            if position is None:
                raise ValueError(f"no frame of {self.topic}-{self.partition} starts at {start}")
            limit = segment.size
            end = position
            for header, pos in _headers(segment, position, limit):
                so_far = taken + (end - position)
                if so_far and so_far + header.size > max_bytes:
                    break
                end = pos + header.size
            if end > position:
                out.append(segment.read_raw(position, end))
                taken += end - position
            if end < limit or taken >= max_bytes:
                break
        return b"".join(out)

    def append_raw_sync(self, data: bytes, now_ms: int | None = None) -> int:
        """Follower side: append frames copied from the leader (same offsets, same
        leader epochs, same bytes) after checking each CRC and that the first continues
        LEO. Returns the new LEO. Runs in a worker thread (:meth:`append_raw` says when
        the event loop runs it instead)."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            return self._append_raw_locked(data, now)

    def _append_raw_locked(self, data: bytes, now: int) -> int:
        view = memoryview(data)
        frames = []
        position = 0
        expected = self.log_end_offset
        while position < len(data):
            header = frame.decode_header(view, position)
            frame.verify(view, position, header)
            if header.base_offset != expected:
                raise frame.CorruptFrame(
                    f"{self.topic}-{self.partition}: leader sent offset {header.base_offset}, expected {expected}"
                )
            head = bytes(view[position:position + frame.HEADER_SIZE])
            payload = view[position + frame.HEADER_SIZE:position + header.size]
            frames.append((head, payload, header))
            expected = header.next_offset
            position += header.size
        if not frames:
            return self.log_end_offset
        self._maybe_roll(now, len(data))
        segment = self._segments[-1]
        size_before = segment.size
        try:
            segment.append(frames, now)
        except OSError:
            segment.truncate_to(size_before)
            raise
        for _head, payload, header in frames:
            self._note_epoch(header.leader_epoch, header.base_offset)
            if header.attributes:
                self._apply_producer_frame(
                    header, pa.ipc.read_record_batch(pa.py_buffer(payload), frame.FRAME_SCHEMA))
        self._unflushed += expected - self.log_end_offset
        if self._flush_due(now, self._unflushed):
            segment.flush()
            self._unflushed = 0
            self._last_flush_ms = now
        self.untiered_bytes += len(data)
        self.log_end_offset = expected
        return expected

    async def append_raw(self, data: bytes, at_most_records: int | None = None) -> int:
        """Follower side, on the event loop: :meth:`append_raw_sync` right here when, as
        for :meth:`_write_on_loop`, it costs no more than a copy into the page cache (no
        fsync even for ``at_most_records`` more records, no segment to roll, the lock
        free); in a worker thread otherwise."""
        now = self.clock.now_ms()
        if at_most_records is not None and self._lock_for_loop_write(now, at_most_records, len(data)):
            try:
                leo = self._append_raw_locked(data, now)
            finally:
                self._lock.release()
        else:
            leo = await asyncio.to_thread(self.append_raw_sync, data)
        self._appended()
        return leo

    def truncate_to(self, offset: int) -> None:
        """Cut the log back to ``offset`` (a divergent suffix a new leader does not
        have). Offsets at or above it are removed from disk, the epoch cache and the
        producer state; HW does not stay above LEO."""
        with self._lock:
            if offset >= self.log_end_offset:
                # Nothing to cut, but an epoch this log led without appending (assigned at
                # LEO) is not the leader's: forget it, or the next fetch asks about it again.
                self.epochs = [(e, start) for e, start in self.epochs if start < offset]
                return
            segments = self._segments
            keep = [s for s in segments if s.base_offset < offset or s is segments[0]]
            last = keep[-1]
            position = last.frame_position(offset) if offset > last.base_offset else 0
            if position is None:  # checked before anything is deleted
                raise ValueError(f"no frame of {self.topic}-{self.partition} starts at {offset}")
            log.warning("%s-%d: truncating from %d to %d (divergent suffix)",
                        self.topic, self.partition, self.log_end_offset, offset)
            for seg in segments[len(keep):]:
                seg.delete()
            last.truncate_to(position)
            last.flush()
            reopened, _ = Segment.open(last.path, verify_crc=False)
            last.close()
            if offset < reopened.base_offset:  # everything is gone: restart the log there
                reopened.delete()
                reopened = Segment.create(self.directory, offset, self.clock.now_ms())
            self._segments = keep[:-1] + [reopened]
            self.log_end_offset = offset
            self.high_watermark = min(self.high_watermark, offset)
            self.epochs = [(e, start) for e, start in self.epochs if start < offset]
            self._snapshot_path.unlink(missing_ok=True)
            self.producer_state = ProducerStateManager()
            self._rebuild_producer_state()

    def reset_to(self, offset: int) -> None:
        """Drop the whole hot log and restart it empty at ``offset`` (a follower too far
        behind the leader's hot tier: what it misses is in the table)."""
        with self._lock:
            for seg in self._segments:
                seg.delete()
            self._segments = [Segment.create(self.directory, offset, self.clock.now_ms())]
            self.log_end_offset = offset
            self.high_watermark = offset
            self.epochs = []
            self._snapshot_path.unlink(missing_ok=True)
            self.producer_state = ProducerStateManager()
            self.producer_state.markers_from = offset

    def learn_transactions(self, markers: list[tuple[int, int, str]], records: list[tuple[int, int, int]],
                           below: int, producers: "dict[int, LearnedProducer] | None" = None) -> None:
        """The transactions and producer sequences the table holds below the hot log
        (``ProducerStateManager.learn``), read for ``below``; a state rebuilt meanwhile
        (truncation) is left to learn anew."""
        with self._lock:
            if self.producer_state.markers_from == below:
                self.producer_state.learn(markers, records, producers)

    # -- reading -----------------------------------------------------------------------------------

    def read(
        self, start: int, end: int, max_records: int, max_bytes: int, partition: int | None = None,
        cached_only: bool = False,
    ) -> pa.Table:
        """Records in ``[start, min(end, HW))`` from the hot tier, at most ``max_records``
        and about ``max_bytes`` (at least one record, so a consumer always progresses).

        Raises :class:`OffsetBelowHotTier` when ``start`` is below the first hot segment
        (it may have been removed since the caller looked).

        Frames are widened to ``RECORD_SCHEMA`` once and kept in the block cache, so
        the next fetches from the same frame only slice it; ``cached_only=True`` raises
        :class:`NotCached` instead of reading a frame from disk (the caller then reads
        in a worker thread). A reader that reads everything once uses :meth:`read_once`."""
        partition = self.partition if partition is None else partition
        return read_segments(self._segments, start, min(end, self.high_watermark), max_records, max_bytes,
                             partition, cached_only)

    def _segments_for(self, start: int, end: int) -> list[Segment]:
        return _segments_for(self._segments, start, end)

    def read_once(self, start: int, end: int, max_records: int, max_bytes: int) -> pa.Table:
        """The records :meth:`read` would return, for a reader that reads each record
        once (the tierer): frames come off disk a span at a time (one ``pread`` per
        ``READ_ONCE_SPAN`` bytes, not two per frame), are widened to ``RECORD_SCHEMA``
        all together rather than one by one, and are not kept in the block cache.

        At one record per produce request a tier pass reads hundreds of one-record
        frames; widening them one by one held the GIL long enough, in small steps, to
        show in the produce path's p99."""
        end = min(end, self.high_watermark)
        frames = ((header, where)
                  for segment in self._segments_for(start, end)
                  for header, where in _spans(segment, segment.position_for(start), segment.size))
        batches: list[pa.RecordBatch] = []
        epochs: list[int] = []
        for header, (span, at), lo, rows in _window(frames, start, end, max_records, max_bytes):
            batches.append(frame.decode_rows(span, at, header, lo, rows))
            epochs.append(header.leader_epoch)
        return widen_frames(batches, epochs, start, self.partition)

    def tier_spans(self, start: int, end: int) -> list[list]:
        """Where ``[start, end)`` lies on disk, for a reader of the segment files (the
        tier child): ``[path, base offset, position of the frame to start at, bytes
        published]`` per segment. Read ``end`` (HW) before calling: the sizes taken
        here then cover it. Raises :class:`OffsetBelowHotTier` like :meth:`read`."""
        return [[str(s.path), s.base_offset, s.position_for(start) if s.base_offset <= start else 0, s.size]
                for s in self._segments_for(start, end)]

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """The earliest hot offset (below HW) whose timestamp is >= ``timestamp_ms``."""
        target = timestamp_ms * 1000
        for segment in self._segments:
            pos = segment.position_for_timestamp(target)
            if pos is None:
                continue
            for header, _, fbatch in segment.read_frames(pos, segment.size):
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp < target:
                    continue
                ts = fbatch.column("timestamp").cast(pa.int64())
                hits = pc.indices_nonzero(pc.greater_equal(ts, target))
                if len(hits):
                    row = hits[0].as_py()
                    return header.base_offset + row, ts[row].as_py() // 1000
        return None

    # -- local retention ---------------------------------------------------------------------------

    def enforce_local_retention(self, now: int) -> int:
        """Drop hot segments that are fully tiered and past ``local.retention.ms`` /
        ``local.retention.bytes``. The active segment always stays. Returns how many."""
        retention_ms = self.config.local_retention_ms
        if retention_ms == -2:
            retention_ms = self.config.retention_ms
        retention_bytes = local_retention_bytes(self.config)
        segments = self._segments
        total = sum(s.size for s in segments)
        dropped = 0
        for segment in segments[:-1]:
            if segment.next_offset > self.tiered_offset:
                break
            expired = retention_ms >= 0 and now - segment.last_append_ms > retention_ms
            oversize = retention_bytes >= 0 and total > retention_bytes
            if not (expired or oversize):
                break
            total -= segment.size
            dropped += 1
        if dropped:
            self.write_producer_snapshot()  # the dropped frames can no longer be replayed
            with self._lock:
                retired, self._segments = self._segments[:dropped], self._segments[dropped:]
            for segment in retired:
                segment.path.unlink(missing_ok=True)
                self._retired.append((self.clock.monotonic(), segment))
        # Readers may still hold a retired segment's descriptor for a moment.
        keep = []
        for since, segment in self._retired:
            if self.clock.monotonic() - since > 60:
                segment.close()
            else:
                keep.append((since, segment))
        self._retired = keep
        return dropped

    # -- closing ---------------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        if self.shared is not None:
            self.shared.withdraw()
            self.shared = None
        if self.producer_state.producers or self.producer_state.markers:
            try:
                self.write_producer_snapshot()
            except OSError:
                log.exception("could not write the producer snapshot of %s", self.directory)
        with self._lock:
            for segment in self._segments:
                try:
                    segment.flush()
                except OSError:
                    pass
                segment.close()
            for _, segment in self._retired:
                segment.close()

    async def delete(self) -> None:
        await self.close()
        for segment in self._segments:
            segment.path.unlink(missing_ok=True)
        self._snapshot_path.unlink(missing_ok=True)
        (self.directory / SHARED_OFFSETS_FILE).unlink(missing_ok=True)
        try:
            self.directory.rmdir()
        except OSError:
            pass


def read_segments(segments: list[Segment], start: int, end: int, max_records: int, max_bytes: int,
                  partition: int, cached_only: bool = False) -> pa.Table:
    """:meth:`PartitionLog.read` over ``segments`` (``end`` already bounded by the high
    watermark): also how a request process reads a sibling's segments."""
    frames = ((header, (segment, position))
              for segment in _segments_for(segments, start, end)
              for header, position in segment.headers(segment.position_for(start), segment.size,
                                                      after=start, cached=True))
    batches = [_record_batch(segment, header, position, partition, cached_only).slice(lo, rows)
               for header, (segment, position), lo, rows in _window(frames, start, end, max_records, max_bytes)]
    return pa.Table.from_batches(batches, RECORD_SCHEMA)


def _segments_for(segments: list[Segment], start: int, end: int) -> list[Segment]:
    """The segments holding ``[start, end)`` (none when the range is empty); raises
    :class:`OffsetBelowHotTier` when ``start`` is below the first one."""
    if start >= end:
        return []
    if start < segments[0].base_offset:
        raise OffsetBelowHotTier(start)
    i = bisect.bisect_right([s.base_offset for s in segments], start) - 1
    return [s for s in segments[i:] if s.base_offset < end]


def _record_batch(segment: Segment, header: FrameHeader, position: int, partition: int,
                  cached_only: bool = False) -> pa.RecordBatch:
    key = (segment.cache_key, position, partition)
    batch = BLOCKS.get(key)
    if batch is None:
        if cached_only:
            raise NotCached(header.base_offset)
        batch = to_record_batch(segment.read_batch(header, position), partition,
                                header.base_offset, header.leader_epoch)
        BLOCKS.put(key, batch, header.length + 16 * header.record_count)
    return batch


def _headers(segment: Segment, position: int, limit: int):
    """``(header, position)`` of each frame in ``[position, limit)`` (headers only)."""
    while position < limit:
        header = segment.read_header(position)
        yield header, position
        position += header.size


def _delete_paths(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
