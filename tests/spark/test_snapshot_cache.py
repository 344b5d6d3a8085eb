"""The snapshot cache a Spark Python worker keeps from query to query: later commits are
caught up, a table made again at the same path (its topic deleted and created again)
is never read on top of the old log, and the cache holds a bounded number of tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from laketail.records import RECORD_SCHEMA
from laketail.spark.snapshot import SnapshotCache, log_identity


def _commit(path: Path, partition: int, offsets: range) -> None:
    n = len(offsets)
    rows = pa.table({
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(list(offsets), pa.int64()),
        "timestamp": pa.array([0] * n, pa.int64()),
        "value": pa.array([b"v"] * n, pa.binary()),
    })
    columns = {f.name: (rows.column(f.name).cast(f.type) if f.name in rows.column_names
                        else pa.nulls(n, f.type)) for f in RECORD_SCHEMA}
    for f in RECORD_SCHEMA:  # the non-nullable columns laketail fills in
        if not f.nullable and f.name not in rows.column_names:
            columns[f.name] = pa.array([False if f.type == pa.bool_() else 0] * n, f.type)
    write_deltalake(str(path), pa.table(columns, schema=RECORD_SCHEMA), mode="append", partition_by=["partition"])


def _offsets(cache: SnapshotCache, path: Path) -> list[tuple[int, int]]:
    return [(f.first_offset, f.last_offset) for f in cache.latest(str(path), 1).partition_files(0)]


def test_later_commits_are_caught_up(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _commit(table, 0, range(0, 5))
    cache = SnapshotCache()
    assert _offsets(cache, table) == [(0, 4)]
    _commit(table, 0, range(5, 8))
    assert _offsets(cache, table) == [(0, 4), (5, 7)]


def test_a_table_made_again_at_the_path_is_read_afresh(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for start in (0, 10):  # versions 0 and 1
        _commit(table, 0, range(start, start + 10))
    cache = SnapshotCache()
    assert _offsets(cache, table) == [(0, 9), (10, 19)]
    shutil.rmtree(table)
    for start in (0, 3, 6, 9):  # versions 0-3: catching up from version 1 would read 2 and 3 only
        _commit(table, 0, range(start, start + 3))
    assert _offsets(cache, table) == [(0, 2), (3, 5), (6, 8), (9, 11)]


def test_the_first_commit_names_the_log(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert log_identity(str(table)) is None
    _commit(table, 0, range(0, 2))
    first = log_identity(str(table))
    _commit(table, 0, range(2, 4))
    assert first is not None and log_identity(str(table)) == first
    assert log_identity("s3://bucket/topics/t") is None


def test_the_least_recently_used_table_is_dropped(tmp_path: Path) -> None:
    cache = SnapshotCache(max_tables=1)
    for name in ("a", "b"):
        _commit(tmp_path / name, 0, range(0, 3))
    _offsets(cache, tmp_path / "a")
    _offsets(cache, tmp_path / "b")
    assert list(cache._tables) == [str(tmp_path / "b")]
    assert list(cache._snapshots) == [str(tmp_path / "b")]
