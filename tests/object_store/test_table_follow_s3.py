"""On a bucket, a table followed commit by commit: another writer's tier commit is read
from its commit file in the bucket (one GET) and extends the index without a rebuild;
data files written by the tierer are objects in the bucket, and the broker's working
directory holds its hot logs only. Deleting the topic deletes its table from the bucket."""

from __future__ import annotations

import asyncio
import threading

import pyarrow as pa
from deltalake import DeltaTable

from laketail.broker import Broker
from laketail.config import load_settings
from laketail.storage.table_reader import tier_commit_files
from laketail.storage.tierer import run_pass
from tests.object_store.conftest import Bucket, local_s3_folders

PARTITIONS = 2


async def _produce(broker: Broker, round_: int) -> None:
    for p in range(PARTITIONS):
        values = [f"r{round_}p{p}v{i}".encode() for i in range(4)]
        batch = pa.RecordBatch.from_pydict({"value": values, "partition": pa.array([p] * 4, pa.int32())})
        await broker.produce("t", batch)


def test_another_writers_tier_commit_in_the_bucket_extends_the_index(bucket: Bucket, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    root = bucket.uri("follow")

    async def scenario() -> None:
        settings = load_settings(None, env={}, data=root, tier_enabled=False, tier_process=False,
                                 maintenance_enabled=False)
        broker = Broker(settings)
        await broker.start()
        try:
            await broker.create_topic("t", PARTITIONS)
            tables = broker.tables
            rebuilds: list[int] = []
            rebuild = tables._reload_locked
            tables._reload_locked = lambda entry: (rebuilds.append(entry.version), rebuild(entry))[1]

            await _produce(broker, 0)
            assert await broker.tierer.tier_now("t") == 4 * PARTITIONS
            tables.refresh("t")
            rebuilds.clear()

            # Another writer (a sibling request process's tier child) commits partition 1.
            await _produce(broker, 1)
            request, led = broker.tierer._plan("t")
            request = {**request, "parts": [part for part in request["parts"] if part["partition"] == 1]}
            theirs = run_pass(DeltaTable(tables.table_uri("t")), threading.Lock(), request)
            assert "error" not in theirs, theirs
            led[1].mark_tiered(theirs["ends"][1])
            added = tier_commit_files(tables.table_uri("t"), theirs["version"])
            assert added is not None and set(added) == {1}
            assert tables.refresh("t")
            assert rebuilds == []
            files = broker.tables._index("t").files
            assert [len(files[p]) for p in range(PARTITIONS)] == [1, 2]
            keys = bucket.keys("follow/topics/t/")
            assert all(f"follow/topics/t/{f.path}" in keys for p in range(PARTITIONS) for f in files[p])

            await broker.delete_topic("t")  # its table goes with it: data files and log
            assert bucket.keys("follow/topics/t/") == []
        finally:
            await broker.close()

    asyncio.run(scenario())
    assert local_s3_folders(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["laketail-logs"]
