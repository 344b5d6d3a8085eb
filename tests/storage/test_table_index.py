"""The table tier's file index (``table_reader._Index``): a file the tierer adds gives the
index a fresh build of the same files would give, and the index a reader already holds
(without the topic's lock) does not change under it; the files a read (or Spark's
planning) takes for a range are those holding its offsets, in any layout."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from laketail.spark.snapshot import TableFile, TableSnapshot
from laketail.storage.table_reader import DataFile, _Index, disjoint

_FILE = st.builds(lambda first, length: DataFile(first, first + length, f"f-{first}-{length}.parquet"),
                  st.integers(0, 200), st.integers(0, 30))


@given(st.dictionaries(st.integers(0, 3), st.lists(_FILE, max_size=5)),
       st.dictionaries(st.integers(0, 4), _FILE, min_size=1))
def test_an_added_file_gives_the_index_a_build_would(files, added):
    before = _Index.of({p: sorted(lst) for p, lst in files.items()})
    held = {p: list(lst) for p, lst in before.files.items()}
    after = before.adding(added)
    rebuilt = {p: sorted([*files.get(p, []), *([added[p]] if p in added else [])]) for p in {*files, *added}}
    assert after == _Index.of(rebuilt)
    assert before.files == held  # what a reader holds is as it was
    assert after.overlapping >= before.overlapping


def test_an_overlapping_addition_sends_its_partition_to_the_merging_read():
    index = _Index.of({0: [DataFile(0, 9, "a"), DataFile(10, 19, "b")], 1: [DataFile(0, 4, "c")]})
    assert not index.overlapping
    index = index.adding({0: DataFile(15, 24, "c")})
    assert index.overlapping == {0}
    assert [f.path for f in index.between(0, 12, 16)] == ["b", "c"]
    assert [f.path for f in index.between(1, 0, 100)] == ["c"]


@given(st.lists(_FILE, max_size=8), st.integers(0, 240), st.integers(0, 60))
def test_the_files_of_a_range_are_those_holding_its_offsets(files, start, length):
    files = sorted(files)
    end = start + length
    holding = [f for f in files if f.first_offset < end and f.last_offset >= start]
    assert _Index.of({0: files}).between(0, start, end) == holding
    spark_files = tuple(TableFile(f.first_offset, f.last_offset, f.path) for f in files)
    snapshot = TableSnapshot("u", 0, {0: spark_files}, {}, {})
    assert [(f.first_offset, f.last_offset) for f in snapshot.overlapping(0, start, end)] == [
        (f.first_offset, f.last_offset) for f in holding]
    assert (0 in _Index.of({0: files}).overlapping) == (not disjoint(files))
