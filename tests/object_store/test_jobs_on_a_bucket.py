"""Compaction and the maintenance application on an object-store root (moto on
127.0.0.1): outputs are written into the table's partition folders in the bucket (no
rename there) and join the table by one delta-rs commit of ``remove`` + ``add``
(``dataChange=false``); nothing named ``s3:`` appears on the local disk."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from laketail.maintenance.rewrite import rewrite_locally
from laketail.maintenance.runs import plan_compaction, run_compaction, run_retention
from laketail.maintenance.table_commit import MaintenanceConflict, TableSnapshot, commit_rewrite
from laketail.storage import object_store
from tests.maintenance.test_table_commit import NOW_MS, Table, _rows, _topic
from tests.object_store.conftest import Bucket, local_s3_folders

pytestmark = pytest.mark.integration


def _fill(table: Table, files: int, per_file: int = 5) -> None:
    for p in range(2):
        for i in range(files):
            first = i * per_file
            keys = [f"k{(first + j) % 3}".encode() for j in range(per_file)]
            values = [f"v{p}-{first + j}".encode() for j in range(per_file)]
            table.tier(p, _rows(first, keys, values, NOW_MS - 10_000_000 + first))


def _commit_actions(uri: str) -> list[dict]:
    version = DeltaTable(uri).version()
    text = object_store.read_bytes(f"{uri}/_delta_log/{version:020d}.json").decode()
    return [json.loads(line) for line in text.splitlines()]


def _data_keys(bucket: Bucket, prefix: str) -> set[str]:
    return {k for k in bucket.keys(prefix) if k.endswith(".parquet")}


def test_file_compaction_on_a_bucket_commits_rewrites_without_renames(bucket: Bucket, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    table = Table(bucket.uri("jobs-a"))  # type: ignore[arg-type] - a URI where the helper takes a folder
    _fill(table, files=4)
    before = table.rows()

    result = run_compaction(table.root, _topic(), NOW_MS, target_file_bytes=1 << 20, rewriter=rewrite_locally)

    assert result.files_before == 8 and result.files_removed == 8 and len(result.outputs) == 2
    assert table.rows() == before
    actions = _commit_actions(table.uri)
    removes = [a["remove"] for a in actions if "remove" in a]
    adds = [a["add"] for a in actions if "add" in a]
    assert len(removes) == 8 and len(adds) == 2
    assert not any(a["dataChange"] for a in removes + adds)  # rows rearranged, nothing new to read
    files = [u.split("/topics/t/", 1)[1] for u in DeltaTable(table.uri).file_uris()]
    assert len(files) == 2 and all("-c" in f.rsplit("/", 1)[1] for f in files)
    keys = _data_keys(bucket, "jobs-a/topics/t/")
    assert {f"jobs-a/topics/t/{f}" for f in files} <= keys
    assert not [k for k in bucket.keys("jobs-a/topics/t/") if "_laketail_staging" in k]
    assert local_s3_folders(tmp_path) == [] and list(tmp_path.iterdir()) == []

    # Removed files go with vacuum, through delta-rs, once their window has passed.
    run_retention(table.root, _topic(retention_ms=-1), NOW_MS, vacuum_after_ms=0)
    assert _data_keys(bucket, "jobs-a/topics/t/") == {f"jobs-a/topics/t/{f}" for f in files}


def test_key_compaction_on_a_bucket_keeps_the_latest_value_per_key(bucket: Bucket) -> None:
    table = Table(bucket.uri("jobs-b"))  # type: ignore[arg-type]
    _fill(table, files=3)
    latest: dict[tuple[int, bytes], tuple[int, bytes]] = {}
    for partition, offset, key, value in table.rows():
        latest[(partition, key)] = (offset, value)

    result = run_compaction(table.root, _topic("compact"), NOW_MS, target_file_bytes=1 << 20,
                            rewriter=rewrite_locally)

    assert result.summary()["key_compactions"] == 2
    assert sorted((p, o, k, v) for (p, k), (o, v) in latest.items()) == table.rows()


def test_a_failed_rewrite_commit_on_a_bucket_leaves_no_output_behind(bucket: Bucket) -> None:
    """A rewrite planned before another compaction of the same files: its commit fails,
    and the outputs it wrote into the table's folders are deleted again."""
    table = Table(bucket.uri("jobs-c"))  # type: ignore[arg-type]
    _fill(table, files=2)
    before = table.rows()
    stale = TableSnapshot.load(table.root, "t", 2)
    run_compaction(table.root, _topic(), NOW_MS, target_file_bytes=1 << 20, rewriter=rewrite_locally)
    keys = _data_keys(bucket, "jobs-c/topics/t/")

    tasks = plan_compaction(stale, _topic(), NOW_MS, 1 << 20)
    staging = stale.staging_uri()
    assert staging == stale.uri  # an object store stages in the table itself
    outputs = rewrite_locally(stale.uri, staging, tasks, NOW_MS)
    assert _data_keys(bucket, "jobs-c/topics/t/") > keys
    with pytest.raises(MaintenanceConflict):
        commit_rewrite(stale, staging, tasks, outputs)
    assert _data_keys(bucket, "jobs-c/topics/t/") == keys
    assert table.rows() == before
