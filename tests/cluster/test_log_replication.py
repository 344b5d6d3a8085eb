"""The partition log's replication primitives on real files: copying frames byte for
byte (read_raw / append_raw_sync), the leader-epoch cache (assign_epoch,
end_offset_for_epoch), truncation to a divergence point (truncate_to) and restarting
the hot log (reset_to)."""

from __future__ import annotations

import asyncio
import os

import pytest

from laketail.clock import ManualClock
from laketail.storage import frame
from laketail.storage.frame import CorruptFrame
from laketail.storage.partition_log import OffsetBelowHotTier

from .support import (
    append,
    copy_all,
    frame_epochs,
    frames,
    log_bytes,
    open_log,
    segment_files,
    values,
)

#: (records, leader epoch, producer id or -1): idempotent batches of two producers,
#: three epochs (5 and 6 skipped: leaders that never appended here).
HISTORY = [
    (2, 0, -1), (1, 0, 7), (3, 0, -1), (1, 2, 7), (2, 2, 8),
    (1, 2, -1), (4, 4, 8), (1, 7, 7), (2, 7, -1), (1, 7, 8),
]


async def build_leader(directory, clock, history=HISTORY):
    plog = open_log(directory, clock)
    seqs: dict[int, int] = {}
    for i, (count, epoch, pid) in enumerate(history):
        plog.assign_epoch(epoch)
        seq = seqs.get(pid, 0)
        await append(plog, count, epoch, tag=f"b{i}-", pid=pid, seq=seq if pid >= 0 else -1)
        if pid >= 0:
            seqs[pid] = seq + count
    return plog


def run(coro):
    return asyncio.run(coro)


# -- copying ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_bytes", [1, 500, 1 << 20])
def test_a_follower_copying_read_raw_holds_the_same_bytes_offsets_and_epochs(tmp_path, max_bytes):
    clock = ManualClock()

    async def scenario():
        leader = await build_leader(tmp_path / "leader", clock)
        assert len(leader.segments) > 2, "the history should roll segments"
        follower = open_log(tmp_path / "follower", clock)
        fetches = copy_all(leader, follower, max_bytes)
        if max_bytes == 1:
            assert fetches == len(frames(leader))  # at least, and at most, one frame each
        assert log_bytes(follower) == log_bytes(leader)
        assert follower.log_end_offset == leader.log_end_offset == 18
        assert follower.epochs == leader.epochs == [(0, 0), (2, 6), (4, 10), (7, 14)]
        assert follower.producer_state.snapshot() == leader.producer_state.snapshot()
        if max_bytes == 1:
            # One frame per write on both sides: the same rolls, the same files.
            assert segment_files(follower) == segment_files(leader)
        follower.set_high_watermark(follower.log_end_offset)
        assert values(follower) == values(leader)
        await follower.close()
        reopened = open_log(tmp_path / "follower", clock)
        assert log_bytes(reopened) == log_bytes(leader)
        assert reopened.epochs == leader.epochs
        assert reopened.producer_state.snapshot() == leader.producer_state.snapshot()
        await reopened.close()
        await leader.close()

    run(scenario())


def test_read_raw_returns_whole_frames_within_max_bytes(tmp_path):
    clock = ManualClock()

    async def scenario():
        leader = await build_leader(tmp_path, clock)
        heads = frames(leader)
        assert leader.read_raw(leader.log_end_offset, 1 << 20) == b""
        assert leader.read_raw(leader.log_end_offset + 5, 1 << 20) == b""
        one = leader.read_raw(heads[3].base_offset, 1)
        assert len(one) == heads[3].size
        assert frame.decode_header(one).base_offset == heads[3].base_offset
        # Exactly frames 3..5 fit; frame 6 would pass the limit by one byte.
        limit = sum(h.size for h in heads[3:6])
        assert len(leader.read_raw(heads[3].base_offset, limit)) == limit
        assert len(leader.read_raw(heads[3].base_offset, limit + heads[6].size - 1)) == limit
        assert leader.read_raw(0, 1 << 20) == log_bytes(leader)
        with pytest.raises(ValueError):
            leader.read_raw(heads[0].base_offset + 1, 1 << 20)  # inside the first frame
        await leader.close()

    run(scenario())


def test_read_raw_below_the_hot_tier_is_refused(tmp_path):
    clock = ManualClock()

    async def scenario():
        plog = open_log(tmp_path, clock)
        plog.reset_to(40)
        await append(plog, 2, 1)
        with pytest.raises(OffsetBelowHotTier):
            plog.read_raw(39, 1 << 20)
        assert len(plog.read_raw(40, 1 << 20)) == frames(plog)[0].size
        await plog.close()

    run(scenario())


# -- append_raw_sync refusals -----------------------------------------------------------------------


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x55]) + data[index + 1:]


def test_append_raw_sync_refuses_broken_frames_and_gaps_and_writes_nothing(tmp_path):
    clock = ManualClock()

    async def scenario():
        leader = await build_leader(tmp_path / "leader", clock)
        heads = frames(leader)
        follower = open_log(tmp_path / "follower", clock)
        # The follower has the first two frames.
        follower.append_raw_sync(leader.read_raw(0, heads[0].size + heads[1].size))
        assert follower.log_end_offset == heads[2].base_offset
        state = (follower.log_end_offset, list(follower.epochs), segment_files(follower),
                 follower.producer_state.snapshot())

        start = heads[2].base_offset
        chunk = leader.read_raw(start, heads[2].size + heads[3].size)
        assert len(chunk) == heads[2].size + heads[3].size
        refused = {
            "payload byte of the first frame": _flip(chunk, frame.HEADER_SIZE + 3),
            "payload byte of the second frame": _flip(chunk, heads[2].size + frame.HEADER_SIZE + 1),
            "record count in a header": _flip(chunk, 20 + 3),
            "torn second frame": chunk[:-1],
            "torn header": chunk[: heads[2].size + 10],
            "gap": leader.read_raw(heads[3].base_offset, 1 << 20),
            "overlap": leader.read_raw(heads[1].base_offset, 1 << 20),
        }
        for what, data in refused.items():
            with pytest.raises(CorruptFrame):
                follower.append_raw_sync(data)
            after = (follower.log_end_offset, list(follower.epochs), segment_files(follower),
                     follower.producer_state.snapshot())
            assert after == state, f"{what}: the refused chunk changed the log"
        assert follower.append_raw_sync(chunk) == heads[4].base_offset
        copy_all(leader, follower, 1 << 20)
        assert log_bytes(follower) == log_bytes(leader)
        await follower.close()
        await leader.close()

    run(scenario())


# -- the leader-epoch cache ---------------------------------------------------------------------------


def test_end_offset_for_epoch_is_the_largest_epoch_at_or_below_and_where_it_ended(tmp_path):
    clock = ManualClock()

    async def scenario():
        plog = await build_leader(tmp_path, clock)  # epochs 0@0, 2@6, 4@10, 7@14; LEO 18
        expected = {
            -1: (-1, -1),
            0: (0, 6), 1: (0, 6),
            2: (2, 10), 3: (2, 10),
            4: (4, 14), 5: (4, 14), 6: (4, 14),
            7: (7, 18), 8: (7, 18), 100: (7, 18),
        }
        for epoch, answer in expected.items():
            assert plog.end_offset_for_epoch(epoch) == answer, epoch
        assert plog.latest_epoch == 7
        await plog.close()

    run(scenario())


def test_a_log_without_epochs_knows_none(tmp_path):
    plog = open_log(tmp_path, ManualClock())
    assert plog.latest_epoch == -1
    assert plog.end_offset_for_epoch(0) == (-1, -1)
    assert plog.end_offset_for_epoch(5) == (-1, -1)


def test_assign_epoch_on_an_empty_range_starts_the_epoch_at_log_end(tmp_path):
    clock = ManualClock()

    async def scenario():
        plog = open_log(tmp_path, clock)
        plog.assign_epoch(3)  # a new leader of an empty log
        assert plog.epochs == [(3, 0)]
        assert plog.end_offset_for_epoch(3) == (3, 0)
        assert plog.end_offset_for_epoch(2) == (-1, -1)
        await append(plog, 2, 3)
        assert plog.epochs == [(3, 0)]
        plog.assign_epoch(5)  # leads again, nothing appended yet
        assert plog.end_offset_for_epoch(3) == (3, 2)  # epoch 3 ended where 5 began
        assert plog.end_offset_for_epoch(4) == (3, 2)
        assert plog.end_offset_for_epoch(5) == (5, 2)
        plog.assign_epoch(5)  # again: nothing changes
        plog.assign_epoch(4)  # older: ignored
        assert plog.epochs == [(3, 0), (5, 2)]
        await append(plog, 1, 5)
        assert plog.epochs == [(3, 0), (5, 2)]
        assert plog.end_offset_for_epoch(5) == (5, 3)
        await plog.close()

    run(scenario())


# -- truncation ---------------------------------------------------------------------------------------


# Segments start at offsets 0, 3, 7, 10 and 15: cuts at 0, inside the first segment
# (dropping four), inside middle ones, at a segment's start (10) and inside the last.
@pytest.mark.parametrize("keep_frames", [0, 1, 3, 5, 6, 9])
def test_truncate_to_a_frame_boundary_keeps_exactly_the_prefix(tmp_path, keep_frames):
    clock = ManualClock()

    async def scenario():
        leader = await build_leader(tmp_path / "full", clock)
        assert [s.base_offset for s in leader.segments] == [0, 3, 7, 10, 15]
        heads = frames(leader)
        offset = heads[keep_frames].base_offset
        # The reference: a log that only ever had the kept frames.
        prefix = await build_leader(tmp_path / "prefix", clock, HISTORY[:keep_frames])
        assert prefix.log_end_offset == offset
        whole = log_bytes(leader)
        leader.set_high_watermark(leader.log_end_offset)

        leader.truncate_to(offset)
        assert leader.log_end_offset == offset
        assert leader.high_watermark == offset
        assert log_bytes(leader) == whole[: sum(h.size for h in heads[:keep_frames])]
        assert log_bytes(leader) == log_bytes(prefix)
        assert leader.epochs == frame_epochs(leader) == prefix.epochs
        assert leader.producer_state.snapshot() == prefix.producer_state.snapshot()
        assert all(s.base_offset <= offset for s in leader.segments)
        on_disk = sorted(p.name for p in leader.directory.glob("*.log"))
        assert on_disk == [s.path.name for s in leader.segments]
        assert values(leader) == values(prefix)

        # Appends continue at the cut, with the producers' sequences as of the prefix.
        assert await append(leader, 1, 9, tag="new", pid=7, seq=_next_seq(HISTORY[:keep_frames], 7)) == offset
        await append(prefix, 1, 9, tag="new", pid=7, seq=_next_seq(HISTORY[:keep_frames], 7))
        assert log_bytes(leader) == log_bytes(prefix)

        await leader.close()
        reopened = open_log(tmp_path / "full", clock)
        assert reopened.log_end_offset == prefix.log_end_offset
        assert log_bytes(reopened) == log_bytes(prefix)
        assert reopened.epochs == prefix.epochs
        assert reopened.producer_state.snapshot() == prefix.producer_state.snapshot()
        await reopened.close()
        await prefix.close()

    run(scenario())


def _next_seq(history, pid: int) -> int:
    return sum(count for count, _, p in history if p == pid)


def test_truncate_to_log_end_or_beyond_changes_nothing(tmp_path):
    clock = ManualClock()

    async def scenario():
        plog = await build_leader(tmp_path, clock)
        before = (log_bytes(plog), list(plog.epochs), plog.producer_state.snapshot())
        plog.truncate_to(plog.log_end_offset)
        plog.truncate_to(plog.log_end_offset + 10)
        assert (log_bytes(plog), plog.epochs, plog.producer_state.snapshot()) == before
        assert plog.log_end_offset == 18
        await plog.close()

    run(scenario())


def test_truncate_to_log_end_forgets_an_epoch_assigned_there_without_appends(tmp_path):
    """Kafka's UnifiedLog.truncateTo trims the epoch cache even when the log itself has
    nothing to cut: a broker that became leader (assign_epoch at its LEO) and lost the
    leadership before appending anything holds an epoch entry no other log has. While it
    stays, this follower's latest epoch is one its leader never had, and every fetch
    diverges again (see test_divergence)."""
    clock = ManualClock()

    async def scenario():
        plog = open_log(tmp_path, clock)
        plog.assign_epoch(0)
        await append(plog, 3, 0)
        plog.assign_epoch(1)  # led epoch 1 for a moment, appended nothing
        assert plog.epochs == [(0, 0), (1, 3)]
        plog.truncate_to(3)  # the leader of epoch 2 says: epoch 0 ended at 3
        assert plog.epochs == [(0, 0)]
        assert plog.latest_epoch == 0
        await plog.close()

    run(scenario())


def test_truncate_to_an_offset_inside_a_frame_is_refused_and_changes_nothing(tmp_path):
    """A refused truncation must leave the log as it was; today the segments after the
    one holding the offset are deleted before the offset is found not to be a frame
    boundary, so the log keeps closed segments whose files are gone."""
    clock = ManualClock()

    async def scenario():
        plog = await build_leader(tmp_path, clock)
        assert len(plog.segments) > 2
        heads = frames(plog)
        inside = heads[0].base_offset + 1  # frame 0 holds offsets 0 and 1
        files = segment_files(plog)
        with pytest.raises(ValueError):
            plog.truncate_to(inside)
        assert [name for name, _ in segment_files(plog)] == [name for name, _ in files]
        assert segment_files(plog) == files
        assert (plog.log_end_offset, plog.epochs) == (18, [(0, 0), (2, 6), (4, 10), (7, 14)])
        assert log_bytes(plog) == b"".join(data for _, data in files)
        await plog.close()

    run(scenario())


# -- reset ----------------------------------------------------------------------------------------------


def test_reset_to_restarts_an_empty_log_at_the_offset(tmp_path):
    clock = ManualClock()

    async def scenario():
        plog = await build_leader(tmp_path / "follower", clock)
        plog.write_producer_snapshot()
        plog.reset_to(40)
        assert plog.log_end_offset == plog.high_watermark == plog.hot_start_offset == 40
        assert plog.epochs == []
        assert plog.latest_epoch == -1
        # it knows no transaction markers below 40
        assert plog.producer_state.snapshot() == {"producers": {}, "markers": {}, "markers_from": 40}
        assert not (plog.directory / "producer.snapshot").exists()
        assert [p.name for p in plog.directory.glob("*.log")] == [f"{40:020d}.log"]
        assert os.path.getsize(plog.segments[0].path) == 0
        assert plog.read_raw(40, 1 << 20) == b""

        # A leader whose hot log starts at 40 too: the follower copies from there.
        leader = open_log(tmp_path / "leader", clock)
        leader.reset_to(40)
        leader.assign_epoch(3)
        await append(leader, 2, 3)
        await append(leader, 1, 3)
        copy_all(leader, plog, 1 << 20)
        assert log_bytes(plog) == log_bytes(leader)
        assert plog.epochs == [(3, 40)]
        await plog.close()
        reopened = open_log(tmp_path / "follower", clock)
        assert (reopened.hot_start_offset, reopened.log_end_offset) == (40, 43)
        assert reopened.epochs == [(3, 40)]
        await reopened.close()
        await leader.close()

    run(scenario())
