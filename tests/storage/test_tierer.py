"""The tierer against a real broker and real Delta tables."""

import asyncio

import pyarrow as pa
from deltalake import DeltaTable

from laketail.broker import Broker
from laketail.config import load_settings
from laketail.storage.tierer import run_pass


def test_overlapping_tier_passes_never_tier_a_range_twice(tmp_path):
    async def scenario():
        broker = Broker(load_settings(None, env={}, data=str(tmp_path)))
        await broker.start()
        await broker.create_topic("t", 2)
        for round_ in range(4):
            partitions = pa.array([round_ % 2] * 50, pa.int32())
            batch = pa.RecordBatch.from_pydict({"value": [b"v"] * 50, "partition": partitions})
            await broker.produce("t", batch)
            # The background loop, and two explicit passes at once.
            await asyncio.gather(broker.tierer.tier_now("t"), broker.tierer.tier_now("t"))
        await broker.close()
        rows = DeltaTable(f"{tmp_path}/topics/t").to_pyarrow_table()
        for p in (0, 1):
            pairs = zip(rows.column("offset").to_pylist(), rows.column("partition").to_pylist())
            offsets = sorted(o for o, q in pairs if q == p)
            assert offsets == list(range(100))
        dt = DeltaTable(f"{tmp_path}/topics/t")
        assert dt.transaction_version("laketail.tier.0") == dt.transaction_version("laketail.tier.1") == 100

    asyncio.run(scenario())


def test_a_pass_whose_answer_was_lost_commits_nothing_again_and_the_broker_learns_the_table(tmp_path):
    """A tier child killed after its commit but before its answer: the broker plans the
    same range again; the pass finds the table ahead, commits nothing, and the broker
    marks what the table holds as tiered. In-process (``laketail.tierer.process=false``)
    here, so the commit and the lost answer are deterministic."""

    async def scenario():
        settings = load_settings(None, env={}, data=str(tmp_path), tier_enabled=False, tier_process=False)
        broker = Broker(settings)
        await broker.start()
        assert broker.tierer.child is None
        await broker.create_topic("t", 1)
        await broker.produce("t", pa.RecordBatch.from_pydict({"value": [b"a"] * 10}))
        request, _ = broker.tierer._plan("t")
        dt, lock = broker.tables.delta_table("t")
        first = run_pass(dt, lock, request)  # committed; its answer never reaches the broker
        assert first["ends"] == {0: 10}
        again = run_pass(dt, lock, request)
        assert again["ahead"] == {0: 10} and "version" not in again
        assert await broker.tierer.tier_now("t") == 0  # the table is ahead: nothing committed
        assert broker.logs.get("t", 0).tiered_offset == 10
        await broker.produce("t", pa.RecordBatch.from_pydict({"value": [b"b"] * 5}))
        assert await broker.tierer.tier_now("t") == 5
        await broker.close()
        rows = DeltaTable(f"{tmp_path}/topics/t").to_pyarrow_table()
        assert sorted(rows.column("offset").to_pylist()) == list(range(15))

    asyncio.run(scenario())


def test_the_table_version_the_broker_reports_holds_what_the_tier_child_committed(tmp_path):
    """``/v1/topics/{t}/table`` pairs the tiered offsets with a table version (Spark reads
    the table at it below them): the version must hold what the child committed, though
    the broker's own table handle never made that commit."""

    async def scenario():
        broker = Broker(load_settings(None, env={}, data=str(tmp_path), tier_enabled=False))
        await broker.start()
        await broker.create_topic("t", 1)
        await broker.produce("t", pa.RecordBatch.from_pydict({"value": [b"a"] * 10}))
        assert await broker.tierer.tier_now("t") == 10
        assert broker.tierer.child is not None and broker.tierer.child.pid is not None
        assert broker.logs.get("t", 0).tiered_offset == 10
        uri, version = await broker.table_version("t")
        await broker.close()
        rows = DeltaTable(uri, version=version).to_pyarrow_table()
        assert sorted(rows.column("offset").to_pylist()) == list(range(10))

    asyncio.run(scenario())
