"""Row groups wholly inside a range are read together, so ``format("laketail")`` hands
Spark Arrow batches of up to 64k rows instead of one per 8k-row group (benchmark 6);
ranges that start or end inside a row group still read exactly their offsets."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laketail.spark.scan import READ_GROUPS, read_rows
from laketail.spark.snapshot import TableFile

GROUP = 1_000


def _file(tmp_path, first: int, n: int) -> TableFile:
    path = str(tmp_path / "f.parquet")
    rows = pa.table({"offset": pa.array(range(first, first + n), pa.int64()),
                     "value": pa.array([b"v%d" % i for i in range(n)])})
    pq.write_table(rows, path, row_group_size=GROUP)
    return TableFile(first, first + n - 1, path, n)


def test_whole_row_groups_come_in_batches_of_several_groups(tmp_path):
    data_file = _file(tmp_path, 100, 20 * GROUP)
    pieces = list(read_rows(data_file, 100, 100 + 20 * GROUP, ["offset", "value"]))
    assert [p.num_rows for p in pieces] == [READ_GROUPS * GROUP, READ_GROUPS * GROUP, 4 * GROUP]
    offsets = pa.concat_tables(pieces).column("offset").to_pylist()
    assert offsets == list(range(100, 100 + 20 * GROUP))


def test_ranges_inside_row_groups_read_exactly_their_offsets(tmp_path):
    data_file = _file(tmp_path, 0, 20 * GROUP)
    start, end = GROUP // 2, 15 * GROUP + 7  # partial first and last groups, whole ones between
    pieces = list(read_rows(data_file, start, end, ["offset"]))
    assert [p.num_rows for p in pieces] == [GROUP // 2, READ_GROUPS * GROUP, 6 * GROUP, 7]
    assert pa.concat_tables(pieces).column("offset").to_pylist() == list(range(start, end))
    assert list(read_rows(data_file, 20 * GROUP, 30 * GROUP, ["offset"])) == []


def _kafka_columns_only(tmp_path, n: int) -> str:
    """A file with the Kafka columns and none of the transaction columns."""
    path = str(tmp_path / "plain.parquet")
    pq.write_table(pa.table({
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array([b"v%d" % i for i in range(n)]),
    }), path)
    return path


def test_a_file_proven_plain_is_read_without_its_transaction_columns(tmp_path):
    from laketail.spark.planning import OffsetRange
    from laketail.spark.scan import RangeReader, ScanSettings

    path = _kafka_columns_only(tmp_path, 5)
    settings = ScanSettings(("http://127.0.0.1:9",), "read_committed", False, True)
    plain = TableFile(0, 4, path, 5, has_control=False, transactional=False)
    batches = list(RangeReader(settings, OffsetRange("t", 0, 1, 4, 5, (plain,))).batches())
    assert pa.Table.from_batches(batches).column("value").to_pylist() == [b"v1", b"v2", b"v3"]
    # Statistics that do not say: the transaction columns are read (and here missing).
    unknown = TableFile(0, 4, path, 5, has_control=False, transactional=None)
    with pytest.raises(KeyError, match="control"):
        list(RangeReader(settings, OffsetRange("t", 0, 1, 4, 5, (unknown,))).batches())
