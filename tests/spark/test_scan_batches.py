"""Row groups wholly inside a range are read together, so ``format("laketail")`` hands
Spark Arrow batches of up to 64k rows instead of one per 8k-row group (benchmark 6);
ranges that start or end inside a row group still read exactly their offsets."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

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
