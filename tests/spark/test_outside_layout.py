"""The Spark reader's table side (planning's file choice and a task's range read) on
files an outside writer left overlapping and out of order: every offset of the range,
once. Runs without a JVM: these are the pure-Python parts a Spark task calls."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laketail.errors import CorruptMessage
from laketail.records import RECORD_SCHEMA
from laketail.spark.planning import OffsetRange
from laketail.spark.scan import RangeReader, ScanSettings
from laketail.spark.snapshot import TableFile, TableSnapshot
from laketail.storage.data_files import FILE_SCHEMA


def _file(tmp_path, name: str, offsets: list[int]) -> TableFile:
    n = len(offsets)
    rows = pa.table({
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array([1_000] * n, pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array([f"v{o}".encode() for o in offsets], pa.binary()),
        "headers": pa.array([[]] * n, RECORD_SCHEMA.field("headers").type),
        "producer_id": pa.array([-1] * n, pa.int64()),
        "producer_epoch": pa.array([-1] * n, pa.int16()),
        "sequence": pa.array([-1] * n, pa.int32()),
        "transactional": pa.array([False] * n),
        "control": pa.array([None] * n, pa.string()),
        "leader_epoch": pa.array([0] * n, pa.int32()),
    }).select(FILE_SCHEMA.names).cast(FILE_SCHEMA)
    path = str(tmp_path / name)
    pq.write_table(rows, path)
    return TableFile(min(offsets), max(offsets), path, n, has_control=False, transactional=False)


def test_overlapping_unsorted_files_are_all_planned_and_read_once(tmp_path):
    # two files splitting 0..19 by parity, rows newest first (as delta-rs OPTIMIZE wrote them)
    even = _file(tmp_path, "even.parquet", list(range(18, -1, -2)))
    odd = _file(tmp_path, "odd.parquet", list(range(19, 0, -2)))
    snapshot = TableSnapshot("unused", 1, {0: (even, odd)}, {0: 20}, {0: 0})
    for start, end in ((0, 20), (5, 12), (19, 20)):
        files = tuple(snapshot.overlapping(0, start, end))
        assert set(files) == ({odd} if start == 19 else {even, odd})
        work = OffsetRange("t", 0, start, end, 20, files)
        reader = RangeReader(ScanSettings(("http://127.0.0.1:9",), "read_uncommitted", False, False), work)
        got = sorted(o for rows, _ in reader._rows() for o in rows.column("offset").to_pylist())
        assert got == list(range(start, end)), (start, end)


def test_a_range_holding_one_offset_twice_fails_before_yielding_anything(tmp_path):
    tiered = _file(tmp_path, "tiered.parquet", list(range(10)))
    appended = _file(tmp_path, "appended.parquet", [7])  # an outside append at an existing offset
    work = OffsetRange("t", 0, 0, 10, 10, (tiered, appended))
    reader = RangeReader(ScanSettings(("http://127.0.0.1:9",), "read_uncommitted", False, False), work)
    rows = reader._rows()
    with pytest.raises(CorruptMessage, match="offset 7 more than once"):
        next(rows)
