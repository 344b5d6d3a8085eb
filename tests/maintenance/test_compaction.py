"""Key compaction: the pure rule, the plan, and the broker compacting __consumer_offsets."""

import asyncio

import pyarrow as pa
from deltalake import DeltaTable

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.coordinator.offsets import OFFSETS_TOPIC, CommittedOffset
from laketail.maintenance.compaction import compact_rows, plan_key_compaction
from laketail.records import TIMESTAMP_TYPE
from laketail.storage.table_reader import DataFile


def _rows(specs):
    """specs: (offset, key, value, timestamp_us, control)"""
    return pa.table({
        "offset": pa.array([s[0] for s in specs], pa.int64()),
        "key": pa.array([s[1] for s in specs], pa.binary()),
        "value": pa.array([s[2] for s in specs], pa.binary()),
        "timestamp": pa.array([s[3] for s in specs], TIMESTAMP_TYPE),
        "control": pa.array([s[4] if len(s) > 4 else None for s in specs], pa.string()),
    })


def test_latest_per_key_wins_and_offsets_do_not_move():
    rows = _rows([
        (0, b"a", b"1", 10), (1, b"b", b"1", 10), (2, b"a", b"2", 10),
        (3, None, b"keyless", 10), (4, b"b", None, 10), (5, b"c", None, 10_000), (6, None, None, 10, "COMMIT"),
    ])
    out = compact_rows(rows, tombstone_cutoff_us=1_000)
    got = list(zip(out.column("offset").to_pylist(), out.column("key").to_pylist(), out.column("value").to_pylist()))
    # b's tombstone is older than the cutoff: gone; c's is recent: kept.
    assert got == [(2, b"a", b"2"), (3, None, b"keyless"), (5, b"c", None), (6, None, None)]


def test_plan_takes_the_old_contiguous_run_per_partition():
    files = {
        0: [DataFile(0, 9, "a", max_timestamp_us=1_000_000), DataFile(10, 19, "b", max_timestamp_us=2_000_000),
            DataFile(20, 29, "c", max_timestamp_us=9_000_000)],
        1: [DataFile(0, 9, "d", max_timestamp_us=1_000_000)],
    }
    plans = plan_key_compaction(files, now_ms=5_000, min_compaction_lag_ms=1_000, delete_retention_ms=500)
    assert [(p.partition, [f.path for f in p.inputs]) for p in plans] == [(0, ["a", "b"])]
    assert plans[0].tombstone_cutoff_us == 4_500_000


def test_broker_compacts_consumer_offsets_and_rebuild_agrees(tmp_path):
    clock = ManualClock()

    async def scenario():
        settings = load_settings(None, env={}, data=str(tmp_path), offsets_topic_num_partitions=1,
                                 tier_enabled=False)
        broker = Broker(settings, clock=clock)
        await broker.start()
        await broker.create_topic("t", 2)
        for round_ in range(5):
            for p in range(2):
                await broker.groups.commit("g", {("t", p): CommittedOffset(round_ * 10 + p)})
            await broker.tierer.tier_now(OFFSETS_TOPIC)  # one table file per round
        dt = DeltaTable(broker.tables.table_uri(OFFSETS_TOPIC))
        assert dt.to_pyarrow_table().num_rows == 10
        assert await broker.compact_topic(OFFSETS_TOPIC) == 1
        rows = DeltaTable(broker.tables.table_uri(OFFSETS_TOPIC)).to_pyarrow_table()
        assert sorted(rows.column("offset").to_pylist()) == [8, 9]  # the last commit per key
        await broker.close()
        again = Broker(settings, clock=clock)
        await again.start()
        assert again.groups.committed("g", [("t", 0), ("t", 1)]) == {
            ("t", 0): CommittedOffset(40, "", broker.clock.now_ms()),
            ("t", 1): CommittedOffset(41, "", broker.clock.now_ms()),
        }
        await again.close()

    asyncio.run(scenario())
