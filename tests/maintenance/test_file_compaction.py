"""File compaction plans: runs of small adjacent files under the target size."""

from laketail.maintenance.file_compaction import plan_file_compaction
from laketail.storage.table_reader import DataFile


def _files(*sizes, start=0):
    out, offset = [], start
    for i, size in enumerate(sizes):
        out.append(DataFile(offset, offset + 9, f"f{i}", 10, size_bytes=size))
        offset += 10
    return out


def _runs(plans):
    return [(p.partition, [f.path for f in p.inputs]) for p in plans]


def test_small_files_are_grouped_under_the_target():
    plans = plan_file_compaction({0: _files(40, 40, 40, 40, 40)}, target_file_bytes=100)
    assert _runs(plans) == [(0, ["f0", "f1"]), (0, ["f2", "f3"])]  # f4 alone: nothing to merge
    assert plans[0].first_offset == 0 and plans[0].last_offset == 19 and plans[0].size_bytes == 80


def test_a_large_file_ends_a_run_and_is_never_rewritten():
    plans = plan_file_compaction({0: _files(10, 10, 500, 10, 10, 10)}, target_file_bytes=100)
    assert _runs(plans) == [(0, ["f0", "f1"]), (0, ["f3", "f4", "f5"])]


def test_a_file_exactly_at_the_target_is_left_alone():
    assert plan_file_compaction({0: _files(100, 100)}, target_file_bytes=100) == []


def test_min_files_and_partitions_are_independent():
    files = {1: _files(10, 10, 10), 0: _files(10, 10)}
    assert _runs(plan_file_compaction(files, target_file_bytes=100, min_files=3)) == [(1, ["f0", "f1", "f2"])]
    assert [p.partition for p in plan_file_compaction(files, target_file_bytes=100)] == [0, 1]


def test_files_are_planned_in_offset_order_whatever_the_input_order():
    files = list(reversed(_files(10, 10, 10)))
    (plan,) = plan_file_compaction({0: files}, target_file_bytes=100)
    assert [f.first_offset for f in plan.inputs] == [0, 10, 20]


def test_excluded_files_end_a_run():
    plans = plan_file_compaction({0: _files(10, 10, 10, 10, 10)}, target_file_bytes=100, exclude=frozenset({"f2"}))
    assert _runs(plans) == [(0, ["f0", "f1"]), (0, ["f3", "f4"])]
