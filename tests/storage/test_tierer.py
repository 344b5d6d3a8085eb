"""The tierer against a real broker and real Delta tables."""

import asyncio

import pyarrow as pa
from deltalake import DeltaTable

from laketail.broker import Broker
from laketail.config import load_settings


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
