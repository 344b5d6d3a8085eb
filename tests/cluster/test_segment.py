"""What replication reads from one segment: where each leader epoch starts
(epoch_starts), where a frame begins (frame_position, through the sparse index) and the
stored bytes (read_raw); the same after reopening the file."""

from __future__ import annotations

import pytest

from laketail.storage import frame
from laketail.storage.frame import FrameHeader
from laketail.storage.segment import INDEX_INTERVAL_BYTES, Segment

from .support import batch

BASE = 100
#: (records, leader epoch, value size): big frames, so the sparse index skips some.
LAYOUT = [(2, 3, 10), (1, 3, 3000), (3, 3, 10), (1, 5, 5000), (2, 5, 10), (1, 6, 10), (4, 9, 2000)]


def _frames():
    out, offset = [], BASE
    for i, (count, epoch, size) in enumerate(LAYOUT):
        b = batch(count, tag=f"{i}" + "x" * size)
        payload = frame.serialize_batch(b)
        head = frame.encode_header(payload, base_offset=offset, record_count=count,
                                   max_timestamp=1_000_000 + i, leader_epoch=epoch)
        out.append((head, payload, FrameHeader(0, len(payload), offset, count, 1_000_000 + i, epoch, 0)))
        offset += count
    return out


@pytest.fixture
def written(tmp_path):
    frames = _frames()
    seg = Segment.create(tmp_path, BASE, 0)
    seg.append(frames[:3], 0)
    seg.append(frames[3:], 0)
    yield seg, frames
    seg.close()


def _check(seg: Segment, frames) -> None:
    positions, pos = [], 0
    for _head, _payload, header in frames:
        positions.append(pos)
        pos += header.size
    assert seg.size == pos
    assert seg.next_offset == frames[-1][2].next_offset
    assert seg.epoch_starts == [(3, 100), (5, 106), (6, 109), (9, 110)]
    assert len(seg._index_offsets) < len(frames), "the index should be sparse"
    for (head, payload, header), position in zip(frames, positions):
        assert seg.frame_position(header.base_offset) == position
        for inside in range(header.base_offset + 1, header.next_offset):
            assert seg.frame_position(inside) is None
        raw = seg.read_raw(position, position + header.size)
        assert raw == head + bytes(payload)
    assert seg.frame_position(seg.next_offset) == seg.size
    assert seg.frame_position(BASE - 1) is None
    assert seg.frame_position(seg.next_offset + 1) is None
    whole = b"".join(head + bytes(payload) for head, payload, _ in frames)
    assert seg.read_raw(0, seg.size) == whole
    assert seg.read_raw(positions[2], positions[5]) == whole[positions[2]:positions[5]]
    assert seg.read_raw(seg.size, seg.size) == b""


def test_epoch_starts_frame_positions_and_raw_bytes(written):
    seg, frames = written
    assert max(h.size for _, _, h in frames) > INDEX_INTERVAL_BYTES // 2
    _check(seg, frames)


def test_a_reopened_segment_knows_the_same(written):
    seg, frames = written
    seg.flush()
    again, report = Segment.open(seg.path, verify_crc=True)
    try:
        assert report.truncated_bytes == 0 and report.frames == len(frames)
        _check(again, frames)
    finally:
        again.close()


def test_an_empty_segment_has_no_frames(tmp_path):
    seg = Segment.create(tmp_path, 7, 0)
    try:
        assert seg.epoch_starts == []
        assert seg.frame_position(7) == 0  # its end
        assert seg.frame_position(8) is None
        assert seg.read_raw(0, 0) == b""
    finally:
        seg.close()
