"""A topic table followed commit by commit: another request process's tier commits
extend the index without a rebuild; anything else still rebuilds and validates it."""

import asyncio
import threading

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from laketail.broker import Broker
from laketail.config import load_settings
from laketail.storage.table_reader import tier_commit_files
from laketail.storage.tierer import run_pass

PARTITIONS = 4


async def _produce_round(broker: Broker, round_: int) -> None:
    for p in range(PARTITIONS):
        values = [f"r{round_}p{p}v{i}".encode() for i in range(5)]
        batch = pa.RecordBatch.from_pydict({"value": values, "partition": pa.array([p] * 5, pa.int32())})
        await broker.produce("t", batch)


def _pass_for(broker: Broker, partitions: set[int], dt: DeltaTable, lock) -> tuple[dict, dict]:
    """One tier pass over ``partitions`` committed through ``dt``; the sibling's passes
    also mark its partitions tiered here, as only their owner would plan them."""
    request, led = broker.tierer._plan("t")
    request = {**request, "parts": [part for part in request["parts"] if part["partition"] in partitions]}
    result = run_pass(dt, lock, request)
    assert "error" not in result, result
    return {p: led[p] for p in partitions}, result


def _sibling_pass(broker: Broker, dt: DeltaTable, lock) -> dict:
    led, result = _pass_for(broker, {2, 3}, dt, lock)
    for partition, end in result["ends"].items():
        led[int(partition)].mark_tiered(end)
    return result


def _files(broker: Broker) -> dict:
    return {p: list(files) for p, files in broker.tables._index("t").files.items()}


def test_another_processs_tier_commits_extend_the_index_and_others_rebuild_it(tmp_path):
    async def scenario():
        settings = load_settings(None, env={}, data=str(tmp_path), tier_enabled=False, tier_process=False)
        broker = Broker(settings)
        await broker.start()
        await broker.create_topic("t", PARTITIONS)
        tables = broker.tables
        rebuilds = []
        rebuild = tables._reload_locked
        tables._reload_locked = lambda entry: (rebuilds.append(entry.version), rebuild(entry))[1]

        await _produce_round(broker, 0)
        assert await broker.tierer.tier_now("t") == 5 * PARTITIONS
        own, own_lock = tables.delta_table("t")
        sibling, sibling_lock = DeltaTable(tables.table_uri("t")), threading.Lock()
        tables.refresh("t")
        rebuilds.clear()

        for round_ in (1, 2):
            # The sibling process's child commits partitions 2 and 3 through its own handle;
            # then this broker commits 0 and 1 and learns its version from the answer.
            await _produce_round(broker, round_)
            theirs = _sibling_pass(broker, sibling, sibling_lock)
            assert set(tier_commit_files(tables.table_uri("t"), theirs["version"])) == {2, 3}
            led, mine = _pass_for(broker, {0, 1}, own, own_lock)
            assert mine["version"] == theirs["version"] + 1
            broker.tierer._apply("t", led, mine)
        assert rebuilds == []
        followed = _files(broker)
        assert [len(followed[p]) for p in range(PARTITIONS)] == [3] * PARTITIONS

        # A third sibling commit, seen by following the table.
        await _produce_round(broker, 3)
        _sibling_pass(broker, sibling, sibling_lock)
        assert tables.refresh("t")
        assert rebuilds == []
        followed = _files(broker)
        entry = tables._get("t")
        with entry.lock:  # what a rebuild from the log alone finds: the same files, same fields
            rebuild(entry)
        assert _files(broker) == followed
        assert [len(followed[p]) for p in range(PARTITIONS)] == [3, 3, 4, 4]
        rebuilds.clear()

        # An outside writer's append (one row again) is not a tier commit: rebuilt, validated.
        uri = tables.table_uri("t")
        table = DeltaTable(uri)
        write_deltalake(uri, table.to_pyarrow_table().slice(0, 1), mode="append", partition_by=["partition"])
        assert tier_commit_files(uri, table.version() + 1) is None
        assert tables.refresh("t")
        assert len(rebuilds) == 1
        assert sum(len(files) for files in _files(broker).values()) == 15
        await broker.close()

    asyncio.run(scenario())
