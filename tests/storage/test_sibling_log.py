"""A request process reading a partition its sibling leads, from the sibling's files.

The leader here is a real PartitionLog publishing its offsets; the reader a SiblingLog
on the same directory, as another process would open it (nothing shared in memory but
the mapped offsets file).
"""

import asyncio
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from laketail.clock import ManualClock
from laketail.config import TopicConfig
from laketail.records import build_frame_batch
from laketail.storage.block_cache import NotCached
from laketail.storage.partition_log import OffsetBelowHotTier, PartitionLog
from laketail.storage.sibling_log import SharedOffsets, SiblingLogs, _read, map_published


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return build_frame_batch(timestamps_us=[1_000] * len(values), keys=[None] * len(values), values=values)


def _leader(directory, config: TopicConfig, clock: ManualClock) -> PartitionLog:
    plog = PartitionLog.open(directory / "t-0", "t", 0, config, clock)
    plog.shared = SharedOffsets(plog.directory)
    plog.publish()
    return plog


def _siblings(directory) -> SiblingLogs:
    return SiblingLogs({7: directory})


def test_reads_match_the_leaders_across_segment_rolls_and_stop_at_the_high_watermark(tmp_path):
    clock = ManualClock()
    config = TopicConfig(segment_bytes=700)

    async def run():
        plog = _leader(tmp_path, config, clock)
        siblings = _siblings(tmp_path)
        sibling = siblings.get(7, "t", 0)
        assert sibling is not None
        for b in range(12):
            await plog.append(_batch([f"v{b}-{i}".encode() * 20 for i in range(3)]))
            published = sibling.offsets()
            assert published is not None and published.high_watermark == plog.high_watermark == 3 * (b + 1)
        assert len(plog.segments) > 3
        for start in range(36):
            for limit in (1, 2, 5, 500):
                want = plog.read(start, 36, limit, 1 << 20)
                got = sibling.read(start, 36, limit, 1 << 20, 0)
                assert got.equals(want), (start, limit)
        # a follower's view: HW held back below LEO; what lies above it is never read
        plog.follow()
        await plog.append(_batch([b"above the high watermark"]))
        published = sibling.offsets()
        assert published is not None and published.high_watermark == 36 and plog.log_end_offset == 37
        got = sibling.read(30, published.high_watermark, 500, 1 << 20, 0)
        assert got.column("offset").to_pylist() == list(range(30, 36))
        await plog.close()
        assert sibling.offsets() is None  # withdrawn: siblings forward again
        siblings.close()

    asyncio.run(run())


def test_only_decoded_frames_are_read_on_the_loop_and_new_frames_are_found(tmp_path):
    clock = ManualClock()

    async def run():
        plog = _leader(tmp_path, TopicConfig(), clock)
        sibling = _siblings(tmp_path).get(7, "t", 0)
        assert sibling is not None
        await plog.append(_batch([b"a", b"b"]))
        with pytest.raises(NotCached):  # nothing listed or decoded yet: the caller takes a thread
            sibling.read(0, 2, 500, 1 << 20, 0, cached_only=True)
        assert sibling.read(0, 2, 500, 1 << 20, 0).column("value").to_pylist() == [b"a", b"b"]
        assert sibling.read(0, 2, 500, 1 << 20, 0, cached_only=True).num_rows == 2
        await plog.append(_batch([b"c"]))
        assert sibling.read(1, 3, 500, 1 << 20, 0).column("value").to_pylist() == [b"b", b"c"]
        await plog.close()

    asyncio.run(run())


def test_segments_removed_by_local_retention_send_the_reader_to_the_table(tmp_path):
    clock = ManualClock()
    config = TopicConfig(segment_bytes=500, local_retention_ms=1_000)

    async def run():
        plog = _leader(tmp_path, config, clock)
        sibling = _siblings(tmp_path).get(7, "t", 0)
        assert sibling is not None
        for _ in range(10):
            await plog.append(_batch([b"x" * 200]))
        assert sibling.read(0, 10, 500, 1 << 20, 0).num_rows == 10
        clock.advance(5_000)
        plog.mark_tiered(6)
        assert plog.enforce_local_retention(clock.now_ms()) >= 1
        published = sibling.offsets()
        assert published is not None and published.tiered_offset == 6
        for segment in sibling._segments:  # as after an idle release: reopening a deleted file fails
            segment.close()
        sibling._segments = []
        with pytest.raises(OffsetBelowHotTier):
            sibling.read(0, 10, 500, 1 << 20, 0)
        start = plog.hot_start_offset
        got = sibling.read(start, 10, 500, 1 << 20, 0)
        assert got.column("offset").to_pylist() == list(range(start, 10))
        await plog.close()

    asyncio.run(run())


def test_a_reader_in_another_process_sees_each_published_set_whole(tmp_path):
    """The seqlock: another process polling while the leader publishes never sees a
    high watermark from one publication and a log start from another."""
    clock = ManualClock()
    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, TopicConfig(), clock)
    shared = SharedOffsets(plog.directory)
    reader = textwrap.dedent(f"""
        import sys
        import time
        from pathlib import Path
        from laketail.storage.sibling_log import _read, map_published
        mapped = map_published(Path({str(plog.directory)!r}))
        print("ready", flush=True)
        seen = 0
        give_up = time.monotonic() + 120  # never outlive a failed test
        while time.monotonic() < give_up:
            values = _read(mapped)
            if values is None:
                continue
            hw, lso, start, tiered = values
            if hw == 10**9:
                break
            assert lso == hw - 1 and start == hw - 2 and tiered == hw - 3, values
            seen += 1
        print(seen)
    """)
    shared.publish(10, 9, 8, 7)
    child = subprocess.Popen([sys.executable, "-c", reader], stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        for hw in range(11, 200_000):
            shared.publish(hw, hw - 1, hw - 2, hw - 3)
        shared.publish(10**9, 10**9 - 1, 10**9 - 2, 10**9 - 3)
        out, _ = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0
    assert int(out) > 0
    shared.withdraw()
    mapped = map_published(plog.directory)
    assert mapped is not None and _read(mapped) is None  # withdrawn
    assert map_published(tmp_path / "elsewhere") is None
