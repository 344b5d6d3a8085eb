"""The partition log against a simple model: a list of acknowledged values.

Property: any sequence of appends, crashes (the file cut at a random byte inside the
write that was in flight) and recoveries keeps offsets dense and loses no
acknowledged record.
"""

import asyncio
import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laketail.clock import ManualClock
from laketail.config import TopicConfig
from laketail.errors import HotTierFull
from laketail.records import build_frame_batch
from laketail.storage.partition_log import PartitionLog, local_retention_bytes


def _batch(values: list[bytes], ts: int = 1_000) -> pa.RecordBatch:
    return build_frame_batch(timestamps_us=[ts] * len(values), keys=[None] * len(values), values=values)


def _open(directory: Path, config: TopicConfig, clock: ManualClock, tiered: int = 0) -> PartitionLog:
    return PartitionLog.open(directory, "t", 0, config, clock, tiered_offset=tiered)


def _values(plog: PartitionLog) -> tuple[list[int], list[bytes]]:
    table = plog.read(0, plog.high_watermark, 10**9, 1 << 40)
    return table.column("offset").to_pylist(), table.column("value").to_pylist()


def _crash(plog: PartitionLog) -> None:
    """Die without flushing or closing cleanly (descriptors just go away)."""
    for segment in plog.segments:
        segment.close()


appends = st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=6)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), appends),
        st.tuples(st.just("crash"), appends, st.floats(min_value=0.0, max_value=1.0)),
        st.tuples(st.just("restart"), st.none()),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, segment_bytes=st.sampled_from([300, 2_000, 1 << 20]))
def test_appends_crashes_and_recoveries_keep_offsets_dense(tmp_path_factory, steps, segment_bytes):
    directory = tmp_path_factory.mktemp("plog")
    config = TopicConfig(segment_bytes=segment_bytes)
    clock = ManualClock()
    acknowledged: list[bytes] = []

    async def run():
        plog = _open(directory, config, clock)
        for step in steps:
            kind = step[0]
            if kind == "append":
                base = await plog.append(_batch(step[1]))
                assert base == len(acknowledged)
                acknowledged.extend(step[1])
            elif kind == "crash":
                # The in-flight write (one frame) reaches the disk only up to a random byte.
                old_path, before = plog.segments[-1].path, plog.segments[-1].size
                await plog.append(_batch(step[1]))
                active = plog.segments[-1]
                prior = before if active.path == old_path else 0
                after = os.path.getsize(active.path)
                cut = prior + int((after - prior) * step[2])
                _crash(plog)
                if cut < after:
                    os.truncate(active.path, cut)
                else:  # the whole frame made it to disk before the crash
                    acknowledged.extend(step[1])
                plog = _open(directory, config, clock)
            else:
                await plog.close()
                plog = _open(directory, config, clock)
            offsets, values = _values(plog)
            assert offsets == list(range(len(offsets)))
            assert values == acknowledged
            assert plog.log_end_offset == plog.high_watermark == len(acknowledged)
        await plog.close()

    asyncio.run(run())


def test_recovery_truncates_a_damaged_tail_and_appends_continue(tmp_path):
    config = TopicConfig()
    clock = ManualClock()

    async def run():
        plog = _open(tmp_path, config, clock)
        await plog.append(_batch([b"a", b"b"]))
        await plog.append(_batch([b"c"]))
        path = plog.segments[-1].path
        _crash(plog)
        with open(path, "r+b") as fh:  # flip one payload byte of the last frame
            fh.seek(-3, os.SEEK_END)
            byte = fh.read(1)
            fh.seek(-3, os.SEEK_END)
            fh.write(bytes([byte[0] ^ 0xFF]))
        plog = _open(tmp_path, config, clock)
        assert _values(plog) == ([0, 1], [b"a", b"b"])
        assert await plog.append(_batch([b"d"])) == 2
        assert _values(plog) == ([0, 1, 2], [b"a", b"b", b"d"])
        await plog.close()

    asyncio.run(run())


def test_segments_roll_by_size_and_age_and_reads_span_them(tmp_path):
    clock = ManualClock()
    config = TopicConfig(segment_bytes=1_000, segment_ms=60_000)

    async def run():
        plog = _open(tmp_path, config, clock)
        for i in range(20):
            await plog.append(_batch([bytes([i]) * 100]))
        assert len(plog.segments) > 3
        count = len(plog.segments)
        clock.advance(60_000)
        await plog.append(_batch([b"late"]))
        assert len(plog.segments) == count + 1
        assert plog.segments[-1].base_offset == 20
        offsets, _ = _values(plog)
        assert offsets == list(range(21))
        window = plog.read(5, 9, 100, 1 << 20)
        assert window.column("offset").to_pylist() == [5, 6, 7, 8]
        await plog.close()

    asyncio.run(run())


def test_local_retention_drops_only_tiered_expired_segments(tmp_path):
    clock = ManualClock()
    config = TopicConfig(segment_bytes=500, local_retention_ms=1_000)

    async def run():
        plog = _open(tmp_path, config, clock)
        for _ in range(10):
            await plog.append(_batch([b"x" * 200]))
        clock.advance(5_000)
        assert plog.enforce_local_retention(clock.now_ms()) == 0  # nothing tiered yet
        plog.mark_tiered(4)
        dropped = plog.enforce_local_retention(clock.now_ms())
        assert dropped >= 1
        assert plog.hot_start_offset <= 4
        assert plog.log_end_offset == 10
        await plog.close()

    asyncio.run(run())


def test_appends_are_refused_past_local_retention_bytes_of_untiered_records_until_tiered(tmp_path):
    """``refuse_when_backlogged``: the batch that crosses the limit is taken, the next is
    refused; tiering, or a limit of -1 (and -2 resolving to retention.bytes -1), lifts it.
    A reopened log counts what its segments hold above the tiered offset."""
    clock = ManualClock()
    config = TopicConfig(segment_bytes=4_000, local_retention_bytes=5_000)  # a frame here is ~1.2 kB
    assert local_retention_bytes(config) == 5_000
    assert local_retention_bytes(TopicConfig()) == -1
    assert local_retention_bytes(TopicConfig(retention_bytes=7_000)) == 7_000

    async def run():
        plog = _open(tmp_path, config, clock)
        taken = 0
        while plog.untiered_bytes <= 5_000:
            plog.refuse_when_backlogged(local_retention_bytes(config))
            await plog.append(_batch([b"x" * 300]))
            taken += 1
        assert taken >= 3 and len(plog.segments) >= 2
        with pytest.raises(HotTierFull, match="local.retention.bytes=5000"):
            plog.refuse_when_backlogged(5_000)
        plog.refuse_when_backlogged(-1)
        plog.mark_tiered(taken - 1)
        plog.refuse_when_backlogged(5_000)  # one batch left untiered
        _crash(plog)
        reopened = _open(tmp_path, config, clock, tiered=0)
        assert reopened.untiered_bytes > 5_000  # counted from its segments, not from zero
        with pytest.raises(HotTierFull):
            reopened.refuse_when_backlogged(5_000)
        _crash(reopened)
        tail = _open(tmp_path, config, clock, tiered=taken - 1)
        assert tail.untiered_bytes > 0
        tail.refuse_when_backlogged(5_000)
        _crash(tail)
        assert _open(tmp_path, config, clock, tiered=taken).untiered_bytes == 0

    asyncio.run(run())


def test_offset_for_timestamp_finds_first_record_at_or_after(tmp_path):
    clock = ManualClock()

    async def run():
        plog = _open(tmp_path, TopicConfig(), clock)
        await plog.append(
            build_frame_batch(timestamps_us=[1_000_000, 2_000_000], keys=[None, None], values=[b"a", b"b"])
        )
        await plog.append(build_frame_batch(timestamps_us=[5_000_000], keys=[None], values=[b"c"]))
        assert plog.offset_for_timestamp(1_500) == (1, 2_000)
        assert plog.offset_for_timestamp(0) == (0, 1_000)
        assert plog.offset_for_timestamp(4_000) == (2, 5_000)
        assert plog.offset_for_timestamp(6_000) is None
        await plog.close()

    asyncio.run(run())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    frames=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 250), st.integers(0, 3)), min_size=1, max_size=30),
    segment_bytes=st.sampled_from([400, 3_000, 1 << 20]),
    span=st.sampled_from([64, 700, 1 << 23]),
    reads=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 400), st.integers(1, 500),
                             st.integers(1, 40_000)), min_size=1, max_size=8),
)
def test_read_once_returns_what_read_returns(tmp_path_factory, monkeypatch, frames, segment_bytes, span, reads):
    """The tierer's bulk read (spans of bytes, one widening for all frames) against the
    frame-by-frame read, over logs of many segments and leader epochs, with spans
    smaller than a frame, limits that cut frames, and ranges past the end."""
    import laketail.storage.partition_log as module

    monkeypatch.setattr(module, "READ_ONCE_SPAN", span)
    directory = tmp_path_factory.mktemp("plog")
    clock = ManualClock()

    async def run():
        plog = _open(directory, TopicConfig(segment_bytes=segment_bytes), clock)
        epoch = 0
        for i, (count, size, bump) in enumerate(frames):
            epoch += bump
            await plog.append(_batch([bytes([i % 256]) * size for _ in range(count)]), leader_epoch=epoch)
        for start, length, max_records, max_bytes in reads:
            start = min(start, plog.high_watermark)
            want = plog.read(start, start + length, max_records, max_bytes)
            got = plog.read_once(start, start + length, max_records, max_bytes)
            assert got.schema == want.schema
            assert got.to_pylist() == want.to_pylist(), (start, length, max_records, max_bytes)
            offsets = want.column("offset").to_pylist()
            assert offsets == list(range(start, start + len(offsets)))  # dense: a limit never leaves a gap
        await plog.close()

    asyncio.run(run())
