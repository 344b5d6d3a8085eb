"""Internal-topic compaction is fenced and a damaged internal partition is repaired
(issue 35, finding 1), on a real broker and its real ``__consumer_offsets`` table.

Before: every broker compacted every internal partition, planned from its in-memory file
index and moved its table handle to the latest version just before committing, so
delta-rs saw no conflict. A broker paused mid-pass woke up and committed a compaction
whose inputs another broker's compaction had already replaced: two files then held
offsets 242-243, every read of them failed CORRUPT_MESSAGE, and every broker loading
the coordinators exited at start. Now only the leader compacts, against the snapshot it
planned from, with its leader epoch; and a leader repairs nested overlaps."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.coordinator.offsets import OFFSETS_TOPIC, CommittedOffset, partition_for_group
from laketail.coordinator.transactions import TXN_TOPIC
from laketail.errors import CoordinatorLoadInProgress
from laketail.maintenance.compaction import (
    CompactionAbandoned,
    commit_internal,
    plan_key_compaction,
    plan_overlap_repair,
    rewrite_actions,
)
from laketail.records import RECORD_SCHEMA
from laketail.storage.data_files import write_data_file
from laketail.storage.table_reader import DataFile


def test_overlap_repair_removes_nested_files_and_gives_up_on_the_rest():
    assert plan_overlap_repair([DataFile(0, 9, "a"), DataFile(10, 19, "b")]) == []
    wide, inner, same = DataFile(0, 19, "wide"), DataFile(5, 9, "inner"), DataFile(0, 19, "same")
    assert {f.path for f in plan_overlap_repair([inner, wide, DataFile(20, 29, "c")])} == {"inner"}
    assert len(plan_overlap_repair([wide, same])) == 1  # the case: one range in two files
    assert plan_overlap_repair([DataFile(0, 9, "x"), DataFile(5, 14, "y")]) is None  # not nested


async def _broker_with_two_files(data: Path, clock: ManualClock) -> Broker:
    settings = load_settings(None, env={}, data=str(data), offsets_topic_num_partitions=1, tier_enabled=False)
    broker = Broker(settings, clock=clock)
    await broker.start()
    await broker.create_topic("t", 2)
    for round_ in range(2):
        for p in range(2):
            await broker.groups.commit("g", {("t", p): CommittedOffset(round_ * 10 + p)})
        await broker.tierer.tier_now(OFFSETS_TOPIC)  # one table file per round
    return broker


def _stale_compaction(broker: Broker):
    """What a paused broker had planned: the snapshot version and the actions of a
    compaction of the two files, written before the pause."""
    uri = broker.tables.table_uri(OFFSETS_TOPIC)
    dt = DeltaTable(uri)
    files = broker.tables.files_by_partition(OFFSETS_TOPIC)
    (plan,) = plan_key_compaction(files, now_ms=broker.clock.now_ms() + 10**9, min_compaction_lag_ms=0,
                                  delete_retention_ms=10**12)
    actions, _ = rewrite_actions(uri, plan, broker.clock.now_ms())
    return dt, dt.version(), actions


def test_a_compaction_planned_on_a_stale_snapshot_commits_nothing(tmp_path):
    clock = ManualClock()

    async def scenario() -> None:
        broker = await _broker_with_two_files(tmp_path / "data", clock)
        stale_dt, stale_version, stale_actions = _stale_compaction(broker)
        assert await broker.compact_topic(OFFSETS_TOPIC, min_files=2) == 1  # the leader's compaction
        stale_dt.update_incremental()  # what the old code did before committing: no conflict seen
        with pytest.raises(CompactionAbandoned):
            commit_internal(stale_dt, stale_version, stale_actions, {0: 0}, clock.now_ms())
        assert await broker.table_damage(OFFSETS_TOPIC) == {}
        assert broker.groups.committed("g", [("t", 0)])[("t", 0)].offset == 10
        await broker.close()

    asyncio.run(scenario())


def test_a_newer_leader_epoch_in_the_table_fences_the_compaction(tmp_path):
    clock = ManualClock()

    async def scenario() -> None:
        broker = await _broker_with_two_files(tmp_path / "data", clock)
        dt, version, actions = _stale_compaction(broker)
        with pytest.raises(CompactionAbandoned):  # the table holds epoch 0; this "leader" is older
            commit_internal(dt, version, actions, {0: -1}, clock.now_ms())
        assert dt.version() == version
        await broker.close()

    asyncio.run(scenario())


def test_a_broker_starts_on_a_damaged_consumer_offsets_and_its_leader_repairs_it(tmp_path):
    """The issue's damage (one compaction committed over another: offsets in two files)
    no longer stops a start, nor loads a partial state: the partition is isolated (its
    groups refused) until the leader's cleaner has repaired it, then its offsets are
    served."""
    clock = ManualClock()
    data = tmp_path / "data"

    async def damage() -> None:
        broker = await _broker_with_two_files(data, clock)
        stale_dt, _, stale_actions = _stale_compaction(broker)
        assert await broker.compact_topic(OFFSETS_TOPIC, min_files=2) == 1
        stale_dt.update_incremental()
        stale_dt.create_write_transaction(stale_actions, mode="append", schema=RECORD_SCHEMA,
                                          partition_by=["partition"])  # the old, unfenced commit
        await broker.close()
        # Reads below the hot log go to the table: start from a hot log without those records.
        shutil.rmtree(Path(broker.settings.hot_log_dir) / f"{OFFSETS_TOPIC}-0")

    asyncio.run(damage())

    async def restart() -> None:
        settings = load_settings(None, env={}, data=str(data), offsets_topic_num_partitions=1, tier_enabled=False)
        broker = Broker(settings, clock=clock)
        # Before: the load stopped silently where the damage began and served no offsets
        # at all (-1), or read into it and the start failed with CORRUPT_MESSAGE.
        await broker.start()
        assert await broker.table_damage(OFFSETS_TOPIC)  # the damage is there, and reported
        assert broker.offsets.unavailable.keys() == {0}  # isolated: its groups are refused
        with pytest.raises(CoordinatorLoadInProgress):
            broker.groups.committed("g", [("t", 0)])
        assert await broker.compact_topic(OFFSETS_TOPIC) == 1  # the leader repairs it
        assert await broker.table_damage(OFFSETS_TOPIC) == {}
        while broker.offsets.unavailable:  # the broker loads it again by itself
            await asyncio.sleep(0.05)
        assert broker.groups.committed("g", [("t", 0), ("t", 1)]) == {
            ("t", 0): CommittedOffset(10, "", clock.now_ms()), ("t", 1): CommittedOffset(11, "", clock.now_ms()),
        }
        await broker.close()

    asyncio.run(restart())




def _group_on(partition: int, partitions: int) -> str:
    return next(g for g in (f"g{i}" for i in range(1000)) if partition_for_group(g, partitions) == partition)


def test_a_partition_that_cannot_be_repaired_is_isolated_and_the_others_are_served(tmp_path):
    clock = ManualClock()
    data = tmp_path / "data"
    damaged_group, healthy_group = _group_on(0, 2), _group_on(1, 2)

    def settings():
        return load_settings(None, env={}, data=str(data), offsets_topic_num_partitions=2, tier_enabled=False)

    async def damage() -> None:
        broker = Broker(settings(), clock=clock)
        await broker.start()
        await broker.create_topic("t", 2)
        for round_ in range(2):
            for group in (damaged_group, healthy_group):
                await broker.groups.commit(group, {("t", p): CommittedOffset(round_ * 10 + p) for p in range(2)})
            await broker.tierer.tier_now(OFFSETS_TOPIC)
        uri = broker.tables.table_uri(OFFSETS_TOPIC)
        first, second = broker.tables.files_by_partition(OFFSETS_TOPIC)[0]
        rows = pa.concat_tables([pq.read_table(f"{uri}/{f.path}") for f in (first, second)])
        straddling = rows.filter(pc.is_in(rows.column("offset"), pa.array([first.last_offset, second.first_offset])))
        _, add, _ = write_data_file(uri, 0, straddling, clock.now_ms())  # overlaps both, inside neither
        dt = DeltaTable(uri)
        dt.create_write_transaction([add], mode="append", schema=RECORD_SCHEMA, partition_by=["partition"])
        await broker.close()
        for p in range(2):
            shutil.rmtree(Path(broker.settings.hot_log_dir) / f"{OFFSETS_TOPIC}-{p}")

    asyncio.run(damage())

    async def restart() -> None:
        broker = Broker(settings(), clock=clock)
        await broker.start()
        while not broker.coordinators_loaded:
            await asyncio.sleep(0.05)
        assert broker.offsets.unavailable.keys() == {0}
        assert broker.groups.committed(healthy_group, [("t", 1)])[("t", 1)].offset == 11
        with pytest.raises(CoordinatorLoadInProgress):
            broker.groups.committed(damaged_group, [("t", 1)])
        with pytest.raises(CoordinatorLoadInProgress):
            await broker.groups.commit(damaged_group, {("t", 1): CommittedOffset(99)})
        await broker.compact_topic(OFFSETS_TOPIC)  # cannot repair it: left alone, reported
        assert 0 in await broker.table_damage(OFFSETS_TOPIC)
        await broker.close()

    asyncio.run(restart())


def _txn_id_on(partition: int, partitions: int) -> str:
    return next(t for t in (f"txn{i}" for i in range(1000)) if partition_for_group(t, partitions) == partition)


def test_a_damaged_transaction_state_partition_refuses_only_its_transactional_ids(tmp_path):
    """A damaged ``__transaction_state`` partition is isolated like a ``__consumer_offsets``
    one: its transactional ids get COORDINATOR_LOAD_IN_PROGRESS, every other one is served,
    and once its leader repaired it, its state is loaded (the epoch goes on from where it
    was). Before: the whole load failed, and every transactional id, every group too, was
    refused COORDINATOR_LOAD_IN_PROGRESS until the repair."""
    clock = ManualClock()
    data = tmp_path / "data"
    damaged_id, healthy_id = _txn_id_on(0, 2), _txn_id_on(1, 2)

    def settings():
        return load_settings(None, env={}, data=str(data), offsets_topic_num_partitions=1,
                             transaction_state_log_num_partitions=2, tier_enabled=False)

    async def damage() -> dict[str, tuple[int, int]]:
        broker = Broker(settings(), clock=clock)
        await broker.start()
        await broker.create_topic("t", 1)
        await broker.groups.commit("g", {("t", 0): CommittedOffset(7)})
        sessions = {}
        for round_ in range(2):
            for txn_id in (damaged_id, healthy_id):
                pid, epoch = await broker.transactions.init_producer_id(txn_id)
                await broker.transactions.add_partitions(txn_id, pid, epoch, [("t", 0)])
                await broker.transactions.end(txn_id, pid, epoch, commit=round_ == 1)
                sessions[txn_id] = (pid, epoch)
            await broker.tierer.tier_now(TXN_TOPIC)  # table files per round
        uri = broker.tables.table_uri(TXN_TOPIC)
        first = broker.tables.files_by_partition(TXN_TOPIC)[0][0]
        _, add, _ = write_data_file(uri, 0, pq.read_table(f"{uri}/{first.path}"), clock.now_ms())
        DeltaTable(uri).create_write_transaction([add], mode="append", schema=RECORD_SCHEMA,
                                                 partition_by=["partition"])  # one range in two files
        await broker.close()
        for p in range(2):
            shutil.rmtree(Path(broker.settings.hot_log_dir) / f"{TXN_TOPIC}-{p}")
        return sessions

    sessions = asyncio.run(damage())

    async def restart() -> None:
        broker = Broker(settings(), clock=clock)
        await broker.start()
        await broker._first_load_attempt.wait()
        assert broker.coordinators_loaded  # before: the load failed on the damage, everything refused
        assert broker.transactions.unavailable.keys() == {0}
        assert broker.groups.committed("g", [("t", 0)])[("t", 0)].offset == 7
        pid, epoch = sessions[healthy_id]
        assert await broker.transactions.init_producer_id(healthy_id) == (pid, epoch + 1)
        with pytest.raises(CoordinatorLoadInProgress):
            await broker.transactions.init_producer_id(damaged_id)
        with pytest.raises(CoordinatorLoadInProgress):
            await broker.transactions.add_partitions(damaged_id, *sessions[damaged_id], [("t", 0)])
        with pytest.raises(CoordinatorLoadInProgress):  # its producer id is not known: it may be one of those
            await broker.transactions.check_transactional_produce(*sessions[damaged_id], "t", 0)
        assert await broker.compact_topic(TXN_TOPIC) >= 1  # the leader repairs it
        assert await broker.table_damage(TXN_TOPIC) == {}
        while broker.transactions.unavailable:  # the broker loads it again by itself
            await asyncio.sleep(0.05)
        pid, epoch = sessions[damaged_id]
        assert await broker.transactions.init_producer_id(damaged_id) == (pid, epoch + 1)
        await broker.close()

    asyncio.run(restart())
