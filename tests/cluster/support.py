"""Helpers for the replication tests over real partition logs in a temporary directory.

Every append here is awaited on its own, so each batch becomes exactly one frame.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from laketail.clock import ManualClock
from laketail.config import TopicConfig
from laketail.records import build_frame_batch
from laketail.storage import frame
from laketail.storage.partition_log import PartitionLog, ProducerBatch

#: About two of our frames (~1 kB each) per segment.
TINY_SEGMENT_BYTES = 2_500


def batch(count: int, tag: str = "v", pid: int = -1, seq: int = -1) -> pa.RecordBatch:
    values = [f"{tag}{i}".encode() * 8 for i in range(count)]
    return build_frame_batch(
        timestamps_us=[1_000_000 + i for i in range(count)],
        keys=[None] * count,
        values=values,
        **({"producer_id": pid, "producer_epoch": 0, "base_sequence": seq} if pid >= 0 else {}),
    )


async def append(plog: PartitionLog, count: int, epoch: int, tag: str = "v", pid: int = -1, seq: int = -1) -> int:
    producer = ProducerBatch(pid, 0, seq) if pid >= 0 else None
    return await plog.append(batch(count, tag, pid, seq), leader_epoch=epoch, producer=producer)


def open_log(directory: Path, clock: ManualClock, segment_bytes: int = TINY_SEGMENT_BYTES) -> PartitionLog:
    return PartitionLog.open(directory, "t", 0, TopicConfig(segment_bytes=segment_bytes), clock)


def log_bytes(plog: PartitionLog) -> bytes:
    """Every segment's bytes, in order (what a byte-for-byte copy must reproduce)."""
    return b"".join(s.read_raw(0, s.size) for s in plog.segments)


def segment_files(plog: PartitionLog) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(plog.directory.glob("*.log"))]


def frames(plog: PartitionLog) -> list[frame.FrameHeader]:
    data = log_bytes(plog)
    out, pos = [], 0
    while pos < len(data):
        header = frame.decode_header(data, pos)
        out.append(header)
        pos += header.size
    return out


def frame_epochs(plog: PartitionLog) -> list[tuple[int, int]]:
    """``(epoch, first offset)`` where the epoch of the frames changes."""
    out: list[tuple[int, int]] = []
    for h in frames(plog):
        if not out or out[-1][0] != h.leader_epoch:
            out.append((h.leader_epoch, h.base_offset))
    return out


def values(plog: PartitionLog, end: int | None = None) -> list[bytes]:
    end = plog.log_end_offset if end is None else end
    return plog.read(plog.hot_start_offset, end, 10**6, 1 << 30).column("value").to_pylist()


def copy_all(leader: PartitionLog, follower: PartitionLog, max_bytes: int) -> int:
    """Copy the leader's frames from the follower's LEO the way a fetcher does; returns
    how many fetches it took."""
    fetches = 0
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read_raw(follower.log_end_offset, max_bytes)
        assert data, "read_raw returned nothing below LEO"
        follower.append_raw_sync(data)
        fetches += 1
    return fetches
