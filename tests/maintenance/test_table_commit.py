"""Maintenance commits on a real Delta table (no broker): rewrite, retention, conflicts, vacuum."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction

from laketail.config import TopicConfig
from laketail.maintenance.retention import plan_retention
from laketail.maintenance.rewrite import compact_keys, rewrite_locally
from laketail.maintenance.runs import plan_compaction, run_compaction, run_retention
from laketail.maintenance.table_commit import MaintenanceConflict, TableSnapshot, commit_retention, commit_rewrite
from laketail.maintenance.topics import MaintainedTopic
from laketail.records import HEADER_TYPE, RECORD_SCHEMA, TIMESTAMP_TYPE
from laketail.storage.data_files import write_data_file
from laketail.storage.table_reader import TableReader, log_start_app_id, tier_app_id

NOW_MS = 1_700_000_000_000


def _rows(first: int, keys: list[bytes | None], values: list[bytes | None], ts_ms: int, *,
          transactional: bool = False, control: str | None = None) -> pa.Table:
    n = len(values)
    return pa.table({
        "offset": pa.array(range(first, first + n), pa.int64()),
        "timestamp": pa.array([ts_ms * 1000] * n, TIMESTAMP_TYPE),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.nulls(n, HEADER_TYPE),
        "producer_id": pa.array([7 if transactional else -1] * n, pa.int64()),
        "producer_epoch": pa.array([0 if transactional else -1] * n, pa.int16()),
        "sequence": pa.array([-1] * n, pa.int32()),
        "transactional": pa.array([transactional] * n),
        "control": pa.array([control] * n, pa.string()),
        "leader_epoch": pa.array([0] * n, pa.int32()),
    })


class Table:
    """A topic table filled the way the tierer fills it (one file per commit, tier txn)."""

    def __init__(self, root: Path, topic: str = "t") -> None:
        self.root = str(root)
        self.topic = topic
        self.reader = TableReader(self.root)
        self.reader.create_table(topic)
        self.uri = self.reader.table_uri(topic)

    def tier(self, partition: int, rows: pa.Table) -> None:
        dt = DeltaTable(self.uri)
        _, add, _ = write_data_file(self.uri, partition, rows, NOW_MS)
        end = rows.column("offset")[-1].as_py() + 1
        tiered = CommitProperties(app_transactions=[Transaction(tier_app_id(partition), end)])
        dt.create_write_transaction([add], mode="append", schema=RECORD_SCHEMA, partition_by=["partition"],
                                    commit_properties=tiered)

    def rows(self) -> list[tuple]:
        table = DeltaTable(self.uri).to_pyarrow_table()
        return sorted(zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "key", "value"))))

    def parquet_files(self) -> list[str]:
        return sorted(str(p.relative_to(self.uri)) for p in Path(self.uri).glob("partition=*/*.parquet"))

    def last_commit(self) -> list[dict]:
        log = sorted(Path(self.uri, "_delta_log").glob("*.json"))[-1]
        return [json.loads(line) for line in log.read_text().splitlines()]


def _topic(policy: str = "delete", **overrides) -> MaintainedTopic:
    return MaintainedTopic("t", 2, TopicConfig(cleanup_policy=policy, **overrides))


def _fill(table: Table, files: int = 4, per_file: int = 5, ts_step_ms: int = 1000) -> None:
    for i in range(files):
        for p in (0, 1):
            values = [f"p{p}-{i}-{j}".encode() for j in range(per_file)]
            table.tier(p, _rows(i * per_file, [None] * per_file, values, NOW_MS - (files - i) * ts_step_ms))


def test_file_compaction_rewrites_without_changing_a_row(tmp_path):
    table = Table(tmp_path)
    _fill(table)
    before = table.rows()
    result = run_compaction(table.root, _topic(), NOW_MS, target_file_bytes=1 << 20)
    assert result.files_removed == 8 and len(result.outputs) == 2
    assert table.rows() == before
    commit = table.last_commit()
    assert {a["remove"]["dataChange"] for a in commit if "remove" in a} == {False}
    assert {a["add"]["dataChange"] for a in commit if "add" in a} == {False}
    assert commit[0]["commitInfo"]["laketail.operation"] == "compaction"
    dt = DeltaTable(table.uri)
    assert dt.transaction_version(tier_app_id(0)) == 20  # the tierer's bookkeeping is untouched
    snapshot = TableSnapshot.load(table.root, "t", 2)
    assert [(f.first_offset, f.last_offset, f.num_records) for f in snapshot.files[0]] == [(0, 19, 20)]
    staging = Path(table.uri) / "_laketail_staging"
    assert not staging.exists() or not any(staging.iterdir())


def test_key_compaction_keeps_the_latest_per_key_and_young_tombstones(tmp_path):
    table = Table(tmp_path)
    table.tier(0, _rows(0, [b"a", b"b", b"c"], [b"a1", b"b1", b"c1"], NOW_MS - 5000))
    table.tier(0, _rows(3, [b"a", b"b", None], [b"a2", None, b"keyless"], NOW_MS - 4000))
    table.tier(0, _rows(6, [b"c"], [None], NOW_MS - 10))
    topic = _topic("compact", delete_retention_ms=1000)
    run_compaction(table.root, topic, NOW_MS, target_file_bytes=1 << 20)
    got = [(o, k, v) for _, o, k, v in table.rows()]
    # b's tombstone (4 s old) is past delete.retention.ms: gone with b; c's is 10 ms old: kept.
    assert got == [(3, b"a", b"a2"), (5, None, b"keyless"), (6, b"c", None)]


def test_key_compaction_respects_min_compaction_lag(tmp_path):
    table = Table(tmp_path)
    table.tier(0, _rows(0, [b"a"], [b"1"], NOW_MS - 5000))
    table.tier(0, _rows(1, [b"a"], [b"2"], NOW_MS - 4000))
    table.tier(0, _rows(2, [b"a"], [b"3"], NOW_MS - 10))
    run_compaction(table.root, _topic("compact", min_compaction_lag_ms=1000), NOW_MS, target_file_bytes=1,
                   min_files=2)
    assert [o for _, o, _, _ in table.rows()] == [1, 2]  # the young record is never compacted


def test_transactional_records_neither_replace_nor_are_replaced():
    rows = pa.concat_tables([
        _rows(0, [b"a"], [b"plain"], NOW_MS - 5000),
        _rows(1, [b"a"], [b"txn"], NOW_MS - 5000, transactional=True),
        _rows(2, [None], [None], NOW_MS - 5000, transactional=True, control="COMMIT"),
        _rows(3, [b"b"], [b"txn-b"], NOW_MS - 5000, transactional=True),
        _rows(4, [b"b"], [None], NOW_MS - 5000),
        _rows(5, [b"c"], [b"c1"], NOW_MS - 5000),
        _rows(6, [b"c"], [None], NOW_MS - 5000),
    ])
    out = compact_keys(rows, tombstone_cutoff_us=NOW_MS * 1000)
    # a: both kept (the transactional one may have been aborted); b's old tombstone stays
    # because a transactional b survives; c's old tombstone goes with c.
    assert out.column("offset").to_pylist() == [0, 1, 2, 3, 4]


def test_retention_commits_the_log_start_with_its_removes_and_vacuums(tmp_path):
    table = Table(tmp_path)
    _fill(table, files=4, ts_step_ms=10_000)  # files' newest records: now-40s .. now-10s
    before = table.parquet_files()
    result = run_retention(table.root, _topic(retention_ms=25_000), NOW_MS, vacuum_after_ms=3_600_000)
    assert result.log_start_offsets == {0: 10, 1: 10} and result.files_removed == 4
    dt = DeltaTable(table.uri)
    assert dt.transaction_version(log_start_app_id(0)) == 10 and dt.transaction_version(log_start_app_id(1)) == 10
    commit = table.last_commit()
    assert sum("remove" in a for a in commit) == 4 and sum("txn" in a for a in commit) == 2
    assert [o for p, o, _, _ in table.rows() if p == 0] == list(range(10, 20))
    assert table.parquet_files() == before  # still on disk inside the safety window
    again = run_retention(table.root, _topic(retention_ms=25_000), NOW_MS, vacuum_after_ms=0)
    assert again.files_removed == 0 and again.vacuumed == 4
    assert len(table.parquet_files()) == 4
    reader = TableReader(table.root)
    assert reader.log_start_offset("t", 0) == 10


def _stale_rewrite(snapshot: TableSnapshot):
    """A compaction planned and written from ``snapshot``, not yet committed."""
    tasks = plan_compaction(snapshot, _topic(), NOW_MS, target_file_bytes=1 << 20)
    staging = snapshot.staging_uri()
    return staging, tasks, rewrite_locally(snapshot.uri, staging, tasks, NOW_MS)


def test_a_plan_made_before_a_concurrent_removal_conflicts_and_leaves_nothing(tmp_path):
    table = Table(tmp_path)
    _fill(table, files=3)
    stale = TableSnapshot.load(table.root, "t", 2)
    staging, tasks, outputs = _stale_rewrite(stale)
    fresh = TableSnapshot.load(table.root, "t", 2)
    plans = plan_retention(fresh.files, tiered_offsets=fresh.tiered_offsets, log_start_offsets={}, now_ms=NOW_MS,
                           retention_ms=0, retention_bytes=-1)
    commit_retention(fresh, plans)
    files_before = table.parquet_files()
    with pytest.raises(MaintenanceConflict):
        commit_rewrite(stale, staging, tasks, outputs)
    assert table.parquet_files() == files_before  # its outputs were taken back
    assert not Path(staging).exists()
    assert table.rows() == []


def test_compaction_commits_over_a_concurrent_tier_append(tmp_path):
    table = Table(tmp_path)
    _fill(table, files=3)
    snapshot = TableSnapshot.load(table.root, "t", 2)
    staging, tasks, outputs = _stale_rewrite(snapshot)
    table.tier(0, _rows(15, [None], [b"late"], NOW_MS))  # the tierer commits meanwhile
    commit_rewrite(snapshot, staging, tasks, outputs)
    assert [o for p, o, _, _ in table.rows() if p == 0] == list(range(16))
    assert DeltaTable(table.uri).transaction_version(tier_app_id(0)) == 16
    assert len(TableSnapshot.load(table.root, "t", 2).files[0]) == 2  # the merged file and the new one


def test_data_files_use_dictionaries_only_for_columns_that_repeat(tmp_path):
    table = Table(tmp_path)
    keys = [b"k1", b"k2"] * 50
    table.tier(0, _rows(0, keys, [bytes([i]) * 10 for i in range(100)], NOW_MS))
    (rel,) = table.parquet_files()
    meta = pq.ParquetFile(Path(table.uri, rel)).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for e in encodings["offset"] + encodings["value"])
    assert any("DICTIONARY" in e for e in encodings["key"])
    assert table.rows() == [(0, i, keys[i], bytes([i]) * 10) for i in range(100)]


def test_two_compactions_of_the_same_files_commit_once(tmp_path):
    """delta-rs does not see two rewrites removing the same files (``dataChange=false``)
    as a conflict: both committed and every row was in the table twice. The second now
    fails, and a tier append between plan and commit still lets a rewrite through."""
    table = Table(tmp_path)
    _fill(table, files=3)
    before = table.rows()
    stale = TableSnapshot.load(table.root, "t", 2)
    staging, tasks, outputs = _stale_rewrite(stale)
    first = TableSnapshot.load(table.root, "t", 2)
    first_staging, first_tasks, first_outputs = _stale_rewrite(first)
    table.tier(0, _rows(100, [b"k"], [b"after"], NOW_MS))
    commit_rewrite(first, first_staging, first_tasks, first_outputs)
    files_after = table.parquet_files()
    with pytest.raises(MaintenanceConflict, match="removed by a concurrent commit"):
        commit_rewrite(stale, staging, tasks, outputs)
    assert table.rows() == sorted(before + [(0, 100, b"k", b"after")])
    assert table.parquet_files() == files_after  # the losing rewrite's outputs are gone
