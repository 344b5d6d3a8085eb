"""The block cache: decoded hot frames and table row groups kept for the next fetches.

What must hold: a read answers the same rows whether its blocks come from the cache or
from disk, a truncated log never answers from frames that were cut away, and the cache
stays within its byte budget.
"""

import asyncio

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import TopicConfig, load_settings
from laketail.records import build_frame_batch
from laketail.storage.block_cache import BLOCKS, BlockCache, NotCached
from laketail.storage.partition_log import PartitionLog


@pytest.fixture
def cache_on():
    before = BLOCKS.capacity_bytes
    BLOCKS.resize(64 << 20)
    yield BLOCKS
    BLOCKS.resize(before)


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return build_frame_batch(timestamps_us=[1_000] * len(values), keys=[None] * len(values), values=values)


def _read(plog: PartitionLog, start: int, end: int, max_records: int = 10**6) -> tuple[list[int], list[bytes]]:
    table = plog.read(start, end, max_records, 1 << 40)
    return table.column("offset").to_pylist(), table.column("value").to_pylist()


def test_lru_keeps_within_its_budget_and_refuses_a_block_too_big_for_it():
    cache = BlockCache(1_000)
    for i in range(10):
        cache.put(i, f"block {i}", 200)
    assert cache.nbytes <= 1_000
    assert [cache.get(i) for i in range(10)] == [None] * 5 + [f"block {i}" for i in range(5, 10)]
    cache.get(5)  # now the most recently used: the next put evicts 6, not 5
    cache.put("new", "x", 200)
    assert cache.get(5) == "block 5" and cache.get(6) is None
    cache.put("huge", "y", 300)  # over a quarter of the capacity
    assert cache.get("huge") is None
    cache.resize(0)
    assert len(cache) == 0 and cache.nbytes == 0


def test_a_truncated_log_never_answers_from_the_frames_it_cut(tmp_path, cache_on):
    async def run():
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), ManualClock())
        await plog.append(_batch([b"a0", b"a1"]))
        await plog.append(_batch([b"old2", b"old3", b"old4"]))
        assert _read(plog, 0, 5) == ([0, 1, 2, 3, 4], [b"a0", b"a1", b"old2", b"old3", b"old4"])
        hits = cache_on.hits
        assert _read(plog, 3, 5) == ([3, 4], [b"old3", b"old4"])
        assert cache_on.hits > hits  # the second read came from the cache
        warm = plog.read(3, 5, 10, 1 << 40, cached_only=True)
        assert warm.column("value").to_pylist() == [b"old3", b"old4"]
        # A follower cuts the divergent suffix; the leader's frame lands at the same position.
        plog.truncate_to(2)
        await plog.append(_batch([b"new2", b"new3", b"new4"]))
        with pytest.raises(NotCached):  # the frame now at that position was never decoded
            plog.read(3, 5, 10, 1 << 40, cached_only=True)
        assert _read(plog, 0, 5) == ([0, 1, 2, 3, 4], [b"a0", b"a1", b"new2", b"new3", b"new4"])
        await plog.close()

    asyncio.run(run())


windows = st.lists(st.tuples(st.integers(0, 120), st.integers(1, 60)), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 25), min_size=1, max_size=8), reads=windows)
def test_hot_reads_through_the_cache_equal_reads_from_disk(tmp_path_factory, cache_on, sizes, reads):
    directory = tmp_path_factory.mktemp("plog")

    async def run():
        plog = PartitionLog.open(directory, "t", 0, TopicConfig(segment_bytes=2_000), ManualClock())
        values: list[bytes] = []
        for n in sizes:
            batch = [f"v{len(values) + i}".encode() * 5 for i in range(n)]
            await plog.append(_batch(batch))
            values.extend(batch)
        for start, count in reads:
            start = min(start, len(values))
            cached = _read(plog, start, len(values), count)
            cache_on.resize(0)
            uncached = _read(plog, start, len(values), count)
            cache_on.resize(64 << 20)
            taken = min(count, len(values) - start)
            assert cached == uncached == (list(range(start, start + taken)), values[start:start + taken])
        await plog.close()

    asyncio.run(run())


def test_table_reads_through_the_cache_equal_reads_from_disk(tmp_path, cache_on):
    """The table tier: five files (one per tier pass), read in windows that start and
    end inside them and span them, first from disk, then warm."""

    async def run():
        broker = Broker(load_settings(None, env={}, data=str(tmp_path)))
        await broker.start()
        await broker.create_topic("t", 1)
        for round_ in range(5):
            values = [f"r{round_}-{i}".encode() for i in range(300)]
            await broker.produce("t", pa.RecordBatch.from_pydict({"value": values}))
            await broker.tierer.tier_now("t")
        cache_on.resize(0)
        expected = broker.tables.read("t", 0, 0, 1500, 10**6, 1 << 40).column("value").to_pylist()
        assert expected == [f"r{r}-{i}".encode() for r in range(5) for i in range(300)]
        cache_on.resize(64 << 20)
        broker.tables.read("t", 0, 0, 1500, 10**6, 1 << 40)  # warms every row group
        hits = cache_on.hits
        for start, count in [(0, 10), (295, 10), (299, 2), (600, 500), (1490, 100), (0, 1500)]:
            cached = broker.tables.read("t", 0, start, 1500, count, 1 << 40)
            assert cached.column("offset").to_pylist() == list(range(start, min(start + count, 1500)))
            assert cached.column("value").to_pylist() == expected[start:start + count]
        assert cache_on.hits > hits
        # What the event loop may do itself: a warm read, never a cold one.
        warm = broker.tables.read("t", 0, 400, 1500, 50, 1 << 40, cached_only=True)
        assert warm.column("offset").to_pylist() == list(range(400, 450))
        # ... even while a tier commit (or a follow of the table) holds the topic's lock:
        # the index published before it is read without the lock.
        _, lock = broker.tables.delta_table("t")
        with lock:
            held = broker.tables.read("t", 0, 400, 1500, 50, 1 << 40, cached_only=True)
        assert held.column("value").to_pylist() == expected[400:450]
        cache_on.clear()
        with pytest.raises(NotCached):
            broker.tables.read("t", 0, 400, 1500, 50, 1 << 40, cached_only=True)
        await broker.close()

    asyncio.run(run())
