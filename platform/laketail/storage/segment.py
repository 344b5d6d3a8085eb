"""One hot-log segment: an append-only file of frames, named by its base offset.

``<dir>/<base_offset:020d>.log``. The segment keeps, in memory, a sparse offset index
(one ``(base_offset, position)`` entry per frame that starts more than
``INDEX_INTERVAL_BYTES`` after the previous entry) and a sparse time index
(``(max_timestamp_so_far, base_offset)`` at the same points), rebuilt from the file's
frame headers on open.

Not thread-safe: :class:`laketail.storage.partition_log.PartitionLog` holds the lock
(only the lazy open of the file descriptor is guarded here, as reads run in threads).
Appends happen on one writer thread; reads use ``os.pread`` below the positions the
writer has published, so they never see a half-written frame.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from laketail.records import FRAME_SCHEMA
from laketail.storage import frame
from laketail.storage.block_cache import new_key as new_cache_key
from laketail.storage.frame import CorruptFrame, FrameHeader

log = logging.getLogger(__name__)

INDEX_INTERVAL_BYTES = 4096
_IOV_MAX = 1024
_OPENING = threading.Lock()  # two threads' first use of a segment open its file once
SUFFIX = ".log"


def segment_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{SUFFIX}"


@dataclass
class RecoveryReport:
    valid_bytes: int
    truncated_bytes: int
    frames: int
    reason: str | None = None


class Segment:
    def __init__(self, path: Path, base_offset: int, created_ms: int) -> None:
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
        self._closed = False
        self._fd  # creates the file now; release() closes it until the next use

    @property
    def _fd(self) -> int:
        """The file's descriptor, opened on first use: a partition nobody writes or
        reads holds no file handle (:meth:`release` after recovery)."""
        fd = self._fd_open
        if fd is None:
            with _OPENING:
                fd = self._fd_open
                if fd is None:
                    if self._closed:  # never recreate a closed (perhaps deleted) segment's file
                        raise OSError(errno.EBADF, f"segment {self.path.name} is closed")
                    fd = self._fd_open = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return fd

    def release(self) -> None:
        """Close the descriptor until the next use. Only while nothing else uses the
        segment (its partition log is being opened): a read in another thread could
        otherwise pread a reused descriptor number."""
        fd, self._fd_open = self._fd_open, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    # -- opening and recovery -------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, now_ms: int) -> "Segment":
        path = segment_path(directory, base_offset)
        seg = cls(path, base_offset, now_ms)
        if seg.size == 0 and os.fstat(seg._fd).st_size:
            os.ftruncate(seg._fd, 0)
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
        data = _read_all(seg._fd, stat.st_size)
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
            os.ftruncate(seg._fd, pos)
            os.fsync(seg._fd)
        seg.size = pos
        seg.next_offset = expected
        return seg, RecoveryReport(pos, truncated, frames, reason)

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
            n = os.writev(self._fd, chunk)
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
        os.ftruncate(self._fd, size)
        self.size = size
        self.cache_key = new_cache_key()

    def flush(self) -> None:
        os.fdatasync(self._fd)

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
        return _pread_exact(self._fd, max(limit - position, 0), position)

    def frame_position(self, offset: int) -> int | None:
        """File position of the frame whose base offset is ``offset`` (``size`` for the
        segment's end), or ``None`` when no frame starts there."""
        if offset == self.next_offset:
            return self.size
        position = self.position_for(offset)
        while position < self.size:
            header = frame.decode_header(os.pread(self._fd, frame.HEADER_SIZE, position))
            if header.base_offset == offset:
                return position
            if header.base_offset > offset:
                return None
            position += header.size
        return None

    def headers(self, position: int, limit: int, after: int = -1):
        """Yield ``(header, position)`` of the frames from ``position`` up to byte
        ``limit`` that hold an offset above ``after`` (the others are skipped by their
        header alone)."""
        while position < limit:
            header = frame.decode_header(os.pread(self._fd, frame.HEADER_SIZE, position))
            if header.next_offset > after:
                yield header, position
            position += header.size

    def read_batch(self, header: FrameHeader, position: int) -> pa.RecordBatch:
        """The records of the frame at ``position`` (whose header is ``header``)."""
        data = _pread_exact(self._fd, header.length, position + frame.HEADER_SIZE)
        return pa.ipc.read_record_batch(pa.py_buffer(data), FRAME_SCHEMA)

    def read_frames(self, position: int, limit: int):
        """Yield ``(header, position, batch)`` from ``position`` up to byte ``limit``."""
        for header, at in self.headers(position, limit):
            yield header, at, self.read_batch(header, at)

    def close(self) -> None:
        self._closed = True
        self.release()

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
