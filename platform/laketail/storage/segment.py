"""One hot-log segment: an append-only file of frames, named by its base offset.

``<dir>/<base_offset:020d>.log``. The segment keeps, in memory, a sparse offset index
(one ``(base_offset, position)`` entry per frame that starts more than
``INDEX_INTERVAL_BYTES`` after the previous entry) and a sparse time index
(``(max_timestamp_so_far, base_offset)`` at the same points), rebuilt from the file's
frame headers on open.

Not thread-safe: :class:`laketail.storage.partition_log.PartitionLog` holds the lock.
The one exception is the file descriptor: it is opened on first use and closed when
idle (:meth:`Segment.release_if_idle`), and every I/O call holds it through
``_using()``, so a descriptor is never closed under a read in another thread.
Appends happen on one writer thread; reads use ``os.pread`` below the positions the
writer has published, so they never see a half-written frame.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from laketail.records import FRAME_SCHEMA
from laketail.storage import frame
from laketail.storage.block_cache import BLOCKS
from laketail.storage.block_cache import new_key as new_cache_key
from laketail.storage.frame import CorruptFrame, FrameHeader

log = logging.getLogger(__name__)

INDEX_INTERVAL_BYTES = 4096
_IOV_MAX = 1024
SUFFIX = ".log"
_HEADER_ENTRY_BYTES = 128  # a cached FrameHeader, as counted against the block cache


def segment_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{SUFFIX}"


@dataclass
class RecoveryReport:
    valid_bytes: int
    truncated_bytes: int
    frames: int
    reason: str | None = None


class Segment:
    """One hot segment file of frames, from ``base_offset`` to ``next_offset``.

    Appends whole frames (:meth:`append`), keeps sparse offset and time indexes in memory,
    and reads frames and their headers with ``os.pread`` (:meth:`read_raw`,
    :meth:`read_batch`); :meth:`open` recovers a file by scanning its frames,
    :meth:`follow` / :meth:`extend` track a sibling process's segment read-only. Not
    thread-safe except for its file descriptor, opened on first use and closed when idle
    (module docstring); the partition log holds the lock.
    """

    def __init__(self, path: Path, base_offset: int, created_ms: int, writable: bool = True) -> None:
        self.path = path
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.size = 0
        self.max_timestamp = -1
        self.created_ms = created_ms
        self.last_append_ms = created_ms
        self._index_offsets: list[int] = []
        self._index_positions: list[int] = []
        self._time_index_ts: list[int] = []
        self._last_indexed_pos = -INDEX_INTERVAL_BYTES
        self.producer_frames: list[tuple[int, int]] = []  # (base offset, position) with a producer id
        self.epoch_starts: list[tuple[int, int]] = []  # (leader epoch, first offset) where it changes
        self.cache_key = new_cache_key()  # names this file's current frames in the block cache
        self._fd_open: int | None = None
        self._fd_lock = threading.Lock()  # guards _fd_open, _users, _closed
        self._users = 0  # I/O calls holding the descriptor right now
        self._closed = False
        self._flags = os.O_RDWR | os.O_CREAT | os.O_APPEND if writable else os.O_RDONLY
        self.last_used = time.monotonic()
        with self._using():  # creates the file now; release() closes it until the next use
            pass

    @contextmanager
    def _using(self) -> Iterator[int]:
        """The file's descriptor for one I/O call, opened on first use. While any call
        holds it, :meth:`release_if_idle` leaves it open, so no call can see its number
        closed (and reused by another file) under it."""
        with self._fd_lock:
            fd = self._fd_open
            if fd is None:
                if self._closed:  # never recreate a closed (perhaps deleted) segment's file
                    raise OSError(errno.EBADF, f"segment {self.path.name} is closed")
                fd = self._fd_open = os.open(self.path, self._flags, 0o644)
            self._users += 1
            self.last_used = time.monotonic()
        try:
            yield fd
        finally:
            with self._fd_lock:
                self._users -= 1

    def release_if_idle(self, now: float, idle_s: float) -> bool:
        """Close the descriptor when no call holds it and none used it for ``idle_s``
        (monotonic seconds); the next use opens it again. True when it closed one."""
        with self._fd_lock:
            if self._fd_open is None or self._users or now - self.last_used < idle_s:
                return False
            fd, self._fd_open = self._fd_open, None
        try:
            os.close(fd)
        except OSError:
            pass
        return True

    def release(self) -> bool:
        """Close the descriptor now if no call holds it (after recovery, at close); True
        when none is left open."""
        self.release_if_idle(float("inf"), 0.0)
        with self._fd_lock:
            return self._fd_open is None

    # -- opening and recovery -------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, now_ms: int) -> "Segment":
        path = segment_path(directory, base_offset)
        seg = cls(path, base_offset, now_ms)
        with seg._using() as fd:
            if seg.size == 0 and os.fstat(fd).st_size:
                os.ftruncate(fd, 0)
        _fsync_dir(directory)
        return seg

    @classmethod
    def open(cls, path: Path, verify_crc: bool, expected_base: int | None = None) -> tuple["Segment", RecoveryReport]:
        """Open an existing segment, rebuilding its indexes from the frame headers.

        The first frame that is short, has a bad magic, breaks offset continuity or (when
        ``verify_crc``) fails its CRC ends the valid prefix; everything after it is cut off.
        """
        base = int(path.name[: -len(SUFFIX)])
        stat = path.stat()
        seg = cls(path, base, int(stat.st_mtime * 1000))
        seg.last_append_ms = int(stat.st_mtime * 1000)
        with seg._using() as fd:
            data = _read_all(fd, stat.st_size)
        pos, frames, reason = 0, 0, None
        expected = base
        while pos < len(data):
            try:
                header = frame.decode_header(data, pos)
                if header.base_offset != expected:
                    raise CorruptFrame(
                        f"frame at {pos} has base offset {header.base_offset}, expected {expected}"
                    )
                if pos + header.size > len(data):
                    raise CorruptFrame(f"frame at {pos} runs past the end of the file")
                if verify_crc:
                    frame.verify(data, pos, header)
            except CorruptFrame as exc:
                reason = str(exc)
                break
            seg._track(header, pos)
            pos += header.size
            expected = header.next_offset
            frames += 1
        truncated = len(data) - pos
        if truncated:
            log.warning("truncating %d bytes of %s at %d: %s", truncated, path, pos, reason)
            with seg._using() as fd:
                os.ftruncate(fd, pos)
                os.fsync(fd)
        seg.size = pos
        seg.next_offset = expected
        return seg, RecoveryReport(pos, truncated, frames, reason)

    @classmethod
    def follow(cls, path: Path) -> "Segment":
        """Another process's segment, read-only, its frames tracked by :meth:`extend`
        only (a request process reading a sibling's hot log: ``storage/sibling_log.py``).
        Never creates, truncates or writes the file; FileNotFoundError when it is gone."""
        return cls(path, int(path.name[: -len(SUFFIX)]), int(path.stat().st_mtime * 1000), writable=False)

    def extend(self, end_offset: int) -> None:
        """Track the frames written after :attr:`size` whose records all lie below
        ``end_offset`` (a followed segment: the writer's high watermark, so every such
        frame is whole). ValueError when the file shrank under us: the writer replaced
        what we tracked."""
        with self._using() as fd:
            file_size = os.fstat(fd).st_size
        if file_size < self.size:
            raise ValueError(f"{self.path} shrank from {self.size} to {file_size} bytes")
        while self.next_offset < end_offset and self.size + frame.HEADER_SIZE <= file_size:
            header = self.read_header(self.size)
            if header.base_offset != self.next_offset or header.next_offset > end_offset:
                break
            if self.size + header.size > file_size:
                break
            self._track(header, self.size)
            self.size += header.size

    # -- writing ----------------------------------------------------------------------------

    def _track(self, header: FrameHeader, position: int) -> None:
        if position - self._last_indexed_pos >= INDEX_INTERVAL_BYTES or not self._index_offsets:
            self._index_offsets.append(header.base_offset)
            self._index_positions.append(position)
            self._time_index_ts.append(max(self.max_timestamp, header.max_timestamp))
            self._last_indexed_pos = position
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        self.next_offset = header.next_offset
        if not self.epoch_starts or self.epoch_starts[-1][0] != header.leader_epoch:
            self.epoch_starts.append((header.leader_epoch, header.base_offset))
        if header.attributes:
            self.producer_frames.append((header.base_offset, position))

    def append(self, frames: list[tuple[bytes, pa.Buffer, FrameHeader]], now_ms: int) -> None:
        """Write ``(header bytes, payload, header)`` frames with as few system calls as
        ``writev`` allows; the caller fsyncs per its flush policy."""
        buffers: list = []
        for head, payload, _ in frames:
            buffers.append(head)
            buffers.append(payload)
        total = sum(len(b) for b in buffers)
        written = 0
        while buffers:
            chunk = buffers[:_IOV_MAX]
            with self._using() as fd:
                n = os.writev(fd, chunk)
            written += n
            want = sum(len(b) for b in chunk)
            if n != want:
                raise OSError(f"short write to {self.path}: {written} of {total} bytes")
            buffers = buffers[_IOV_MAX:]
        pos = self.size
        for _, _, header in frames:
            self._track(header, pos)
            pos += header.size
        self.size = pos
        self.last_append_ms = now_ms

    def truncate_to(self, size: int) -> None:
        """Cut the file back to ``size`` bytes (undo a failed partial write, or a
        follower's divergent suffix). Cached frames are forgotten: new ones may be
        written at the same positions."""
        with self._using() as fd:
            os.ftruncate(fd, size)
        self.size = size
        self.cache_key = new_cache_key()

    def flush(self) -> None:
        with self._using() as fd:
            os.fdatasync(fd)

    # -- reading ------------------------------------------------------------------------------

    def position_for(self, offset: int) -> int:
        """File position of the last indexed frame starting at or before ``offset``."""
        i = bisect.bisect_right(self._index_offsets, offset) - 1
        return self._index_positions[i] if i >= 0 else 0

    def position_for_timestamp(self, timestamp_us: int) -> int | None:
        """Position of the last indexed frame before the first one whose running max
        timestamp reaches ``timestamp_us``; ``None`` when no record in the segment does."""
        if self.max_timestamp < timestamp_us:
            return None
        i = bisect.bisect_left(self._time_index_ts, timestamp_us) - 1
        return self._index_positions[i] if i >= 0 else 0

    def read_raw(self, position: int, limit: int) -> bytes:
        """The bytes of ``[position, limit)`` as written (whole frames when both ends are
        frame boundaries): what a follower copies."""
        with self._using() as fd:
            return _pread_exact(fd, max(limit - position, 0), position)

    def frame_position(self, offset: int) -> int | None:
        """File position of the frame whose base offset is ``offset`` (``size`` for the
        segment's end), or ``None`` when no frame starts there."""
        if offset == self.next_offset:
            return self.size
        position = self.position_for(offset)
        while position < self.size:
            header = self.read_header(position)
            if header.base_offset == offset:
                return position
            if header.base_offset > offset:
                return None
            position += header.size
        return None

    def headers(self, position: int, limit: int, after: int = -1, cached: bool = False):
        """Yield ``(header, position)`` of the frames from ``position`` up to byte
        ``limit`` that hold an offset above ``after`` (the others are skipped by their
        header alone). ``cached``: through :meth:`cached_header` (fetches)."""
        read = self.cached_header if cached else self.read_header
        while position < limit:
            header = read(position)
            if header.next_offset > after:
                yield header, position
            position += header.size

    def read_header(self, position: int) -> FrameHeader:
        """The header of the frame at ``position``."""
        with self._using() as fd:
            return frame.decode_header(os.pread(fd, frame.HEADER_SIZE, position))

    def cached_header(self, position: int) -> FrameHeader:
        """:meth:`read_header`, kept in the block cache under this file's current
        :attr:`cache_key`: consumers fetching a frame a slice at a time read its header
        once per fetch, a ``pread`` each (published frames never change; a truncated
        file takes a new key)."""
        key = (self.cache_key, position, "header")
        header = BLOCKS.get(key)
        if header is None:
            header = self.read_header(position)
            BLOCKS.put(key, header, _HEADER_ENTRY_BYTES)
        return header

    def read_batch(self, header: FrameHeader, position: int) -> pa.RecordBatch:
        """The records of the frame at ``position`` (whose header is ``header``)."""
        with self._using() as fd:
            data = _pread_exact(fd, header.length, position + frame.HEADER_SIZE)
        return pa.ipc.read_record_batch(pa.py_buffer(data), FRAME_SCHEMA)

    def read_frames(self, position: int, limit: int):
        """Yield ``(header, position, batch)`` from ``position`` up to byte ``limit``."""
        for header, at in self.headers(position, limit):
            yield header, at, self.read_batch(header, at)

    def close(self) -> None:
        with self._fd_lock:
            self._closed = True
            fd, self._fd_open = self._fd_open, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def delete(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _read_all(fd: int, size: int) -> bytes:
    return _pread_exact(fd, size, 0)


def _pread_exact(fd: int, size: int, position: int) -> bytes:
    parts, got = [], 0
    while got < size:
        part = os.pread(fd, size - got, position + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
