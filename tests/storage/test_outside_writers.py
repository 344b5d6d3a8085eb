"""Reads stay correct, and damage is found, whatever users' own tools do to a topic table.

Each test runs a real broker in-process on a real Delta table, tiers records, lets
``deltalake`` act on the table from outside (OPTIMIZE, z-order, append, checkpoint,
vacuum) and reads back through the broker.
"""

import asyncio
import logging

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from laketail.broker import Broker
from laketail.config import load_settings
from laketail.errors import CorruptMessage
from laketail.records import RECORD_SCHEMA

N = 20  # records produced in five produces of four, each tiered as a file of its own


async def _broker_with_files(tmp_path, topic: str = "t", configs: dict | None = None) -> Broker:
    broker = Broker(load_settings(None, env={}, data=str(tmp_path)))
    await broker.start()
    await broker.create_topic(topic, 1, configs=configs)
    for b in range(5):
        await broker.produce(topic, pa.RecordBatch.from_pydict({"value": [f"v{b * 4 + i}".encode() for i in range(4)]}))
        await broker.tierer.tier_now(topic)
    return broker


def _offsets(table: pa.Table) -> list[int]:
    return table.column("offset").to_pylist()


def _every_read(broker: Broker, topic: str = "t", end: int = N) -> None:
    """Every start offset, a few record limits: rows in offset order, from the start."""
    for start in range(end):
        for limit in (1, 3, 5, 500):
            got = broker.tables.read(topic, 0, start, end, limit, 1 << 20)
            want = list(range(start, min(end, start + limit)))
            assert _offsets(got) == want, (start, limit)
            assert got.column("value").to_pylist() == [f"v{o}".encode() for o in want]


@pytest.mark.parametrize("rewrite", ["compact", "z_order"])
def test_reads_are_in_offset_order_after_an_outside_optimize(tmp_path, rewrite):
    """delta-rs's compaction writes the five files' rows newest file first
    ([16..19, 12..15, ...]); a read at offset 3 once returned [4, 5, 6, 7, 3]."""

    async def run():
        broker = await _broker_with_files(tmp_path)
        dt = DeltaTable(broker.tables.table_uri("t"))
        if rewrite == "compact":
            dt.optimize.compact()
        else:
            dt.optimize.z_order(["timestamp"])
        broker.tables.reload("t")
        _every_read(broker)
        assert broker.tables.damage("t") == {}  # a rewrite of the same rows is no damage
        # ListOffsets by time: the earliest offset at or after a time, not the first row
        rows = DeltaTable(broker.tables.table_uri("t")).to_pyarrow_table().sort_by("offset")
        stamps = [t // 1000 for t in rows.column("timestamp").cast(pa.int64()).to_pylist()]
        for probe in sorted(set(stamps)):
            want = min(o for o, t in zip(rows.column("offset").to_pylist(), stamps) if t >= probe)
            assert broker.tables.offset_for_timestamp("t", 0, probe, N)[0] == want, probe
        await broker.close()

    asyncio.run(run())


def test_a_fetch_after_optimize_is_served_in_order_and_the_table_keeps_tiering(tmp_path):
    async def run():
        broker = await _broker_with_files(tmp_path)
        DeltaTable(broker.tables.table_uri("t")).optimize.compact()
        await broker.produce("t", pa.RecordBatch.from_pydict({"value": [f"v{N + i}".encode() for i in range(4)]}))
        await broker.tierer.tier_now("t")
        broker.tables.refresh("t")
        for start in range(0, N + 4, 3):
            table = broker.tables.read("t", 0, start, N + 4, 4, 1 << 20)
            assert _offsets(table) == list(range(start, min(N + 4, start + 4)))
        assert broker.tables.damage("t") == {}
        await broker.close()

    asyncio.run(run())


def test_the_tier_childs_commits_are_not_reread_but_an_outside_one_is(tmp_path):
    """The broker learns the tier child's files from its answers. Following the table at
    each pass used to load every such commit into the broker's DeltaTable as well: a log
    listing and replay per pass, costing more as the table grows (benchmark 4)."""

    async def run():
        broker = await _broker_with_files(tmp_path)
        assert broker.tierer.child is not None
        dt, _ = broker.tables.delta_table("t")
        loaded, latest = dt.version(), DeltaTable(broker.tables.table_uri("t")).version()
        assert latest == loaded + 5  # the five commits of _broker_with_files, none read back
        for b in range(5, 8):
            values = [f"v{b * 4 + i}".encode() for i in range(4)]
            await broker.produce("t", pa.RecordBatch.from_pydict({"value": values}))
            await broker.tierer.tier_now("t")
            assert not broker.tables.refresh("t")
        assert dt.version() == loaded
        assert DeltaTable(broker.tables.table_uri("t")).version() == latest + 3
        _every_read(broker, end=N + 12)

        DeltaTable(broker.tables.table_uri("t")).optimize.compact()  # another writer
        assert broker.tables.refresh("t")
        assert dt.version() == latest + 4
        _every_read(broker, end=N + 12)
        assert broker.tables.damage("t") == {}
        await broker.close()

    asyncio.run(run())


def test_overlapping_files_are_merged_in_offset_order(tmp_path):
    """Two files whose offset ranges interleave (an outside rewrite that split rows by
    something other than offset): reads merge them."""

    async def run():
        broker = await _broker_with_files(tmp_path)
        uri = broker.tables.table_uri("t")
        rows = DeltaTable(uri).to_pyarrow_table().sort_by("offset")
        even = rows.filter(pa.compute.equal(pa.compute.bit_wise_and(rows.column("offset"), 1), 0))
        odd = rows.filter(pa.compute.equal(pa.compute.bit_wise_and(rows.column("offset"), 1), 1))
        write_deltalake(uri, even.cast(RECORD_SCHEMA), mode="overwrite", partition_by=["partition"])
        write_deltalake(uri, odd.cast(RECORD_SCHEMA), mode="append", partition_by=["partition"])
        broker.tables.reload("t")
        _every_read(broker)
        assert broker.tables.damage("t") == {}
        await broker.close()

    asyncio.run(run())


def test_an_outside_append_at_an_existing_offset_marks_the_partition_damaged(tmp_path, caplog):
    """Before: accepted silently and served as two records at offset 7. Now the reload
    that sees it logs an ERROR, the range is marked, reads before it stop there and a
    read of it fails with CORRUPT_MESSAGE."""

    async def run():
        broker = await _broker_with_files(tmp_path)
        uri = broker.tables.table_uri("t")
        row = DeltaTable(uri).to_pyarrow_table().filter(pa.compute.field("offset") == 7)
        row = row.set_column(row.schema.get_field_index("value"), "value", pa.array([b"intruder"]))
        write_deltalake(uri, row.cast(RECORD_SCHEMA), mode="append", partition_by=["partition"])
        with caplog.at_level(logging.ERROR, logger="laketail.storage.table_reader"):
            assert broker.tables.refresh("t")
        assert any("t-0" in r.getMessage() and "7-7" in r.getMessage()
               for r in caplog.records if r.levelno == logging.ERROR)
        damage = broker.tables.damage("t")
        assert [(d.first_offset, d.last_offset) for d in damage[0]] == [(7, 7)]
        assert _offsets(broker.tables.read("t", 0, 2, N, 500, 1 << 20)) == [2, 3, 4, 5, 6]
        with pytest.raises(CorruptMessage, match="7-7"):
            broker.tables.read("t", 0, 7, N, 500, 1 << 20)
        assert _offsets(broker.tables.read("t", 0, 8, N, 500, 1 << 20)) == list(range(8, N))
        await broker.close()

    asyncio.run(run())


def test_an_outside_append_above_the_tiered_offset_is_damage(tmp_path):
    """A row at an offset the tierer has not written yet would become a duplicate the
    moment the tierer writes that offset."""

    async def run():
        broker = await _broker_with_files(tmp_path)
        uri = broker.tables.table_uri("t")
        row = DeltaTable(uri).to_pyarrow_table().filter(pa.compute.field("offset") == 0)
        row = row.set_column(row.schema.get_field_index("offset"), "offset", pa.array([N + 2], pa.int64()))
        write_deltalake(uri, row.cast(RECORD_SCHEMA), mode="append", partition_by=["partition"])
        # tiered_offset moves the DeltaTable past the outside commit without the index;
        # the tierer's refresh must still see (and validate) the version the index skipped
        assert broker.tables.tiered_offset("t", 0) == N
        assert broker.tables.refresh("t")
        damage = broker.tables.damage("t")
        assert [(d.first_offset, d.last_offset) for d in damage[0]] == [(N + 2, N + 2)]
        assert "tiered offset" in damage[0][0].reason
        await broker.close()

    asyncio.run(run())


def test_an_outside_delete_of_rows_leaves_missing_offsets_marked(tmp_path):
    async def run():
        broker = await _broker_with_files(tmp_path)
        dt = DeltaTable(broker.tables.table_uri("t"))
        dt.delete("\"offset\" >= 9 AND \"offset\" <= 10")
        broker.tables.refresh("t")
        damage = broker.tables.damage("t")
        assert [(d.first_offset, d.last_offset) for d in damage[0]] == [(9, 10)]
        assert "missing" in damage[0][0].reason
        # nothing wrong to serve: reads pass over the hole, as over compaction's gaps
        assert _offsets(broker.tables.read("t", 0, 8, N, 500, 1 << 20)) == [8] + list(range(11, N))
        await broker.close()

    asyncio.run(run())


def test_checkpoint_and_vacuum_after_optimize_keep_reads_whole(tmp_path):
    """Even before the broker follows the table: a read that finds a file vacuumed
    away follows the table and reads again (it was a 500 of FileNotFoundError)."""
    async def run():
        broker = await _broker_with_files(tmp_path)
        broker.tables.reload("t")  # the index names the tierer's five files
        dt = DeltaTable(broker.tables.table_uri("t"))
        dt.optimize.compact()
        dt.create_checkpoint()
        dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        _every_read(broker)
        assert broker.tables.damage("t") == {}
        assert broker.tables.tiered_offset("t", 0) == N
        await broker.close()

    asyncio.run(run())


def test_retention_keeps_a_file_that_overlaps_a_later_one():
    """Deleting the first of two interleaved files would lose its rows above the new
    log start offset (the second file's first offset)."""
    from laketail.maintenance.retention import plan_retention
    from laketail.storage.table_reader import DataFile

    old, new = 1, 10**15  # max timestamps (us): the first file is past retention.ms, the others not
    even = DataFile(0, 18, "even.parquet", 10, 1, old, 100)
    odd = DataFile(1, 19, "odd.parquet", 10, 1, new, 100)
    later = DataFile(20, 29, "later.parquet", 10, 1, new, 100)
    plans = plan_retention({0: [even, odd, later]}, tiered_offsets={0: 30}, log_start_offsets={0: 0},
                           now_ms=10_000, retention_ms=1, retention_bytes=-1)
    assert plans == []  # before: deleted `even`, log start 1, offsets 2-18 lost
    odd_old = DataFile(1, 19, "odd.parquet", 10, 1, old, 100)
    plans = plan_retention({0: [even, odd_old, later]}, tiered_offsets={0: 30}, log_start_offsets={0: 0},
                           now_ms=10_000, retention_ms=1, retention_bytes=-1)
    assert [(p.removed, p.log_start_offset) for p in plans] == [((even, odd_old), 20)]


def test_check_passes_a_sound_transactional_topic_and_names_what_an_outside_delete_lost(tmp_path):
    """``laketail check``'s broker side: committed, aborted and open transactions with
    plain records between, half tiered, is sound (markers match, tiers meet, hot log
    dense); rows deleted from outside are reported with their offsets."""
    from laketail.clock import ManualClock
    from laketail.storage.partition_log import ProducerBatch

    async def send(broker, values, producer=None):
        batch = pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary()),
                                            "partition": pa.array([0] * len(values), pa.int32())})
        await broker.produce("out", batch, producer=producer)

    async def run():
        settings = load_settings(None, env={}, data=str(tmp_path), offsets_topic_num_partitions=1,
                                 transaction_state_log_num_partitions=1)
        broker = Broker(settings, clock=ManualClock())
        await broker.start()
        await broker.create_topic("out", 1)
        txns = broker.transactions
        pid, epoch = await txns.init_producer_id("etl")
        await send(broker, [b"a", b"b"], ProducerBatch(pid, epoch, 0, True))
        await send(broker, [b"plain"])
        await txns.end("etl", pid, epoch, commit=True)
        await send(broker, [b"c"], ProducerBatch(pid, epoch, 2, True))
        await txns.end("etl", pid, epoch, commit=False)
        await broker.tierer.tier_now("out")
        await send(broker, [b"plain2", b"plain3"])
        await send(broker, [b"open"], ProducerBatch(pid, epoch, 3, True))  # still open: above the LSO
        report = await broker.check_topic("out")
        assert report["ok"], report
        part = report["partitions"][0]
        assert part["problems"] == [] and part["files"] == 1
        assert part["table_records"] == part["tiered_offset"] > 0
        assert part["hot_records"] > 0

        DeltaTable(broker.tables.table_uri("out")).delete('"offset" = 2')  # the plain record
        report = await broker.check_topic("out")
        assert not report["ok"]
        assert any(p.startswith("offsets 2-2: offsets missing") for p in report["partitions"][0]["problems"])
        await broker.close()

    asyncio.run(run())


def test_gaps_next_to_laketail_compaction_output_are_not_damage():
    """A topic key-compacted before its cleanup.policy became delete keeps compaction's
    gaps; only a hole between files laketail tiered is missing data."""
    from laketail.storage.table_check import OffsetFacts, find_damage
    from laketail.storage.table_reader import DataFile

    def name(first, last, tag=""):
        return f"partition=0/{first:020d}-{last:020d}-{tag}0123456789ab.parquet"

    compacted = DataFile(0, 9, name(0, 9, "c"), 4)  # key compaction kept 4 of 0-9
    tiered = DataFile(12, 19, name(12, 19), 8)  # 10-11 went with compaction too
    after = DataFile(25, 29, name(25, 29), 5)  # 20-24: a hole between tier files

    def no_reads(f):
        raise AssertionError(f"{f.path}: statistics prove it, no read needed")

    damage = find_damage({0: [compacted, tiered, after]}, {0: 30}, {0: 0}, gaps_allowed=False,
                         schema_changed=False, facts=no_reads)
    assert [(d.first_offset, d.last_offset, d.refuses_reads) for d in damage[0]] == [(20, 24, False)]
    assert find_damage({0: [compacted, tiered, after]}, {0: 30}, {0: 0}, gaps_allowed=True,
                       schema_changed=False, facts=no_reads) == {}
    assert OffsetFacts.of(__import__("numpy").array([5, 3, 3, 9])) == OffsetFacts(((3, 3),), ((4, 4), (6, 8)))
