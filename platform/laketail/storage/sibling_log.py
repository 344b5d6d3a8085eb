"""Reading another request process's partition from disk (``laketail serve --processes N``).

Role: a fetch that reaches a request process which does not lead the partition was
forwarded to the process that does, which cost both of them a request. The processes of
one broker share the disk, and a partition's records below its high watermark never
change, so the receiving process reads them itself: from the leader's hot segments
(opened read-only, their frames tracked as far as the high watermark) or from the
topic's Delta table. The leader publishes the offsets that bound such a read in a small
shared file; everything else (long polls at the high watermark, offsets out of range,
transactions' records, which need the leader's producer state) is still forwarded.

The shared file, ``<partition dir>/offsets.shm``: 64 bytes, mapped by the leader for
writing and by its siblings for reading. A sequence number, odd while the leader
writes, then the high watermark, the last stable offset, the log start offset and the
tiered offset, each a little-endian int64. A reader retries until it sees the same even
sequence number before and after its read (a seqlock), so it never takes values from
two different moments.

Thread-safety: :class:`SharedOffsets` is written by the event loop thread only.
:class:`SiblingLog` is used from the event loop and from worker threads; its segment
list is replaced, never changed in place, and each segment extends under a lock.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from laketail.storage.block_cache import NotCached
from laketail.storage.partition_log import SHARED_OFFSETS_FILE, OffsetBelowHotTier, read_segments
from laketail.storage.segment import SUFFIX, Segment, segment_path

log = logging.getLogger(__name__)

_SIZE = 64
#: how often the segments local retention deleted are let go (their disk space with them)
TIDY_EVERY_S = 10.0
_VALUES = struct.Struct("<qqqq")  # at byte 8, after the sequence number
_SEQ = struct.Struct("<Q")


class PublishedOffsets(NamedTuple):
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    tiered_offset: int


class SharedOffsets:
    """The leader's side: publish a partition's offsets for its sibling processes."""

    def __init__(self, directory: Path) -> None:
        path = directory / SHARED_OFFSETS_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._seq = _SEQ.unpack_from(self._map, 0)[0] & ~1  # carry on from a previous run's number
        self._last: tuple[int, int, int, int] | None = None

    def publish(self, high_watermark: int, last_stable_offset: int, log_start_offset: int,
                tiered_offset: int) -> None:
        values = (high_watermark, last_stable_offset, log_start_offset, tiered_offset)
        if values == self._last:
            return
        self._last = values
        self._seq += 1
        _SEQ.pack_into(self._map, 0, self._seq)  # odd: being written
        _VALUES.pack_into(self._map, 8, *values)
        self._seq += 1
        _SEQ.pack_into(self._map, 0, self._seq)

    def withdraw(self) -> None:
        """The partition is closing (or being deleted): siblings must forward again."""
        self.publish(-1, -1, -1, -1)
        self._map.close()


def map_published(directory: Path) -> mmap.mmap | None:
    """``directory``'s shared offsets, mapped read-only; None when its leader publishes
    none there."""
    try:
        fd = os.open(directory / SHARED_OFFSETS_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size < _SIZE:
            return None
        return mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        os.close(fd)


def _read(mapped: mmap.mmap) -> PublishedOffsets | None:
    for _ in range(100):
        before = _SEQ.unpack_from(mapped, 0)[0]
        if before & 1:
            continue
        values = PublishedOffsets(*_VALUES.unpack_from(mapped, 8))
        if _SEQ.unpack_from(mapped, 0)[0] == before:
            return values if before and values.high_watermark >= 0 else None
    return None  # the writer kept writing: forward this one


class SiblingLog:
    """A partition led by a sibling process, read from its files (see the module
    docstring). :meth:`offsets` says what may be read; :meth:`read` reads the hot
    segments within it."""

    def __init__(self, directory: Path, mapped: mmap.mmap, leader: int) -> None:
        self.directory = directory
        self.leader = leader
        #: set by a reader that found the leader gone or its files replaced: the next
        #: fetch opens the partition afresh
        self.stale = False
        self._map = mapped
        self._segments: list[Segment] = []
        #: segments no longer followed whose descriptor a read still held: released later
        self._retired: list[Segment] = []
        self._lock = threading.Lock()  # one lister or extender at a time

    def offsets(self) -> PublishedOffsets | None:
        """The leader's offsets now; None while it publishes none (closed, restarting)."""
        return _read(self._map)

    def read(self, start: int, end: int, max_records: int, max_bytes: int, partition: int,
             cached_only: bool = False) -> pa.Table:
        """What :meth:`PartitionLog.read` would return for ``[start, end)``, ``end`` at
        most the published high watermark. Raises :class:`OffsetBelowHotTier` below the
        first segment on disk, and NotCached (``cached_only``) when a frame is not decoded
        or the segments must be listed or extended first."""
        segments = self._segments
        if segments and start < segments[0].base_offset:  # segments go from the front only: no listing
            raise OffsetBelowHotTier(start)
        if not segments or segments[-1].next_offset < end:
            if cached_only:
                raise NotCached(start)
            segments = self._catch_up(end)  # read_segments raises OffsetBelowHotTier below them
        return read_segments(segments, start, end, max_records, max_bytes, partition, cached_only)

    def _catch_up(self, end: int) -> list[Segment]:
        """Track the segments' frames up to ``end``, listing them again first when none
        are known or the leader rolled a new one."""
        with self._lock:
            segments = self._segments or self._list()
            _extend(segments, end)
            if segments[-1].next_offset < end:  # a segment rolled since the listing
                segments = self._list()
                _extend(segments, end)
            self._segments = segments
            return segments

    def tidy(self, now: float, idle_s: float) -> None:
        """Let go of segments local retention deleted (their disk space is freed only
        when nothing holds them open) and close descriptors idle for ``idle_s``."""
        with self._lock:
            if self._segments:
                self._segments = self._list()
            self._retired = [segment for segment in self._retired if not segment.release()]
        for segment in self._segments:
            segment.release_if_idle(now, idle_s)

    def _list(self) -> list[Segment]:
        """The segments on disk now, those already followed kept as they are; raises
        FileNotFoundError when the partition's folder is gone (the topic deleted)."""
        known = {s.base_offset: s for s in self._segments}
        bases = sorted(int(name[: -len(SUFFIX)]) for name in os.listdir(self.directory) if name.endswith(SUFFIX))
        segments = []
        for base in bases:
            segment = known.pop(base, None)
            if segment is None:
                try:
                    segment = Segment.follow(segment_path(self.directory, base))
                except FileNotFoundError:  # deleted by local retention since the listing
                    continue
            segments.append(segment)
        # Released, not closed: a read in another thread may hold one's descriptor, and
        # closing it under the read could hand its number to another file.
        self._retired += [gone for gone in known.values() if not gone.release()]
        if not segments:
            raise FileNotFoundError(f"no segments in {self.directory}")
        return segments

    def close(self) -> None:
        """Stop following (on the event loop): descriptors a worker thread's read still
        holds stay open rather than close under it."""
        for segment in self._segments + self._retired:
            segment.release()
        self._segments, self._retired = [], []
        self._map.close()


def _extend(segments: list[Segment], end: int) -> None:
    """Track each segment's frames below ``end`` and below the next segment's base."""
    for i, segment in enumerate(segments):
        bound = min(end, segments[i + 1].base_offset) if i + 1 < len(segments) else end
        if segment.next_offset < bound:
            segment.extend(bound)


class SiblingLogs:
    """The partitions this process reads from its sibling processes' files, opened on
    the first fetch that reaches it and closed when the leader withdraws its offsets
    (closed, deleted) or another process leads."""

    def __init__(self, log_dirs: dict[int, Path]) -> None:
        #: every request process's hot log directory, by its broker id
        self.log_dirs = log_dirs
        self._logs: dict[tuple[str, int], SiblingLog] = {}
        self._tidied = float("-inf")  # monotonic time of the last tidy

    def get(self, leader: int, topic: str, partition: int) -> SiblingLog | None:
        key = (topic, partition)
        sibling = self._logs.get(key)
        if sibling is not None and sibling.leader == leader and not sibling.stale:
            return sibling
        self.drop(topic, partition)
        log_dir = self.log_dirs.get(leader)
        if log_dir is None:  # another broker, not a process of this one
            return None
        directory = log_dir / f"{topic}-{partition}"
        mapped = map_published(directory)
        if mapped is None:
            return None
        sibling = self._logs[key] = SiblingLog(directory, mapped, leader)
        return sibling

    def tidy(self, now: float, idle_s: float) -> None:
        """:meth:`SiblingLog.tidy` for every partition followed (a worker thread), at most
        every :data:`TIDY_EVERY_S`: housekeeping runs each second, and each tidy lists every
        followed partition's folder."""
        if now - self._tidied < TIDY_EVERY_S:
            return
        self._tidied = now
        for sibling in list(self._logs.values()):
            try:
                sibling.tidy(now, idle_s)
            except OSError:  # the topic was deleted: the next fetch finds the log withdrawn
                sibling.stale = True

    def drop(self, topic: str, partition: int) -> None:
        sibling = self._logs.pop((topic, partition), None)
        if sibling is not None:
            sibling.close()

    def close(self) -> None:
        for sibling in self._logs.values():
            sibling.close()
        self._logs.clear()
