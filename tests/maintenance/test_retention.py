"""Retention plans: whole files, oldest first, the log start offset after them."""

import pytest

from laketail.maintenance.retention import plan_retention
from laketail.storage.table_reader import DataFile

NOW_MS = 1_000_000


def _files(*specs):
    """specs: (first, last, max_timestamp_ms, size_bytes)"""
    return [DataFile(a, b, f"f{a}", b - a + 1, max_timestamp_us=ts * 1000, size_bytes=size) for a, b, ts, size in specs]


FILES = _files((0, 9, 100, 10), (10, 19, 200, 10), (20, 29, 900_000, 10), (30, 39, 950_000, 10))


def _plan(files=FILES, tiered=40, start=0, retention_ms=-1, retention_bytes=-1):
    return plan_retention(
        {0: files}, tiered_offsets={0: tiered}, log_start_offsets={0: start}, now_ms=NOW_MS,
        retention_ms=retention_ms, retention_bytes=retention_bytes,
    )


def test_no_limits_delete_nothing():
    assert _plan() == []


def test_retention_ms_deletes_the_expired_prefix():
    (plan,) = _plan(retention_ms=500_000)  # horizon 500_000 ms: f0 and f1 are older
    assert [f.path for f in plan.removed] == ["f0", "f10"]
    assert plan.log_start_offset == 20 and plan.size_bytes == 20


def test_retention_ms_stops_at_the_first_young_file():
    files = _files((0, 9, 100, 10), (10, 19, 999_000, 10), (20, 29, 100, 10), (30, 39, 999_000, 10))
    (plan,) = _plan(files, retention_ms=500_000)
    assert [f.path for f in plan.removed] == ["f0"] and plan.log_start_offset == 10


def test_retention_bytes_keeps_at_least_the_limit():
    (plan,) = _plan(retention_bytes=15)  # 40 bytes: dropping two leaves 20 >= 15, a third would leave 10
    assert [f.path for f in plan.removed] == ["f0", "f10"] and plan.log_start_offset == 20
    (plan,) = _plan(retention_bytes=20)
    assert plan.log_start_offset == 20
    assert _plan(retention_bytes=40) == []


def test_either_limit_deletes():
    (plan,) = _plan(retention_ms=850_000, retention_bytes=25)  # time: f0, f1; size: f0 only
    assert plan.log_start_offset == 20


def test_everything_old_goes_and_the_log_start_is_the_end_of_the_table():
    (plan,) = _plan(retention_ms=0)
    assert len(plan.removed) == 4 and plan.log_start_offset == 40


@pytest.mark.parametrize("tiered", [35, 39])
def test_never_a_file_at_or_above_the_tiered_offset(tiered):
    (plan,) = _plan(tiered=tiered, retention_ms=0)
    assert [f.path for f in plan.removed] == ["f0", "f10", "f20"] and plan.log_start_offset == 30


def test_unknown_timestamps_are_never_old():
    files = [DataFile(0, 9, "nostats", 10, size_bytes=10)] + FILES[1:]
    assert _plan(files, retention_ms=0) == []


def test_files_below_the_log_start_always_go_and_the_start_never_moves_back():
    (plan,) = _plan(start=25)
    assert [f.path for f in plan.removed] == ["f0", "f10"] and plan.log_start_offset == 25


def test_gaps_left_by_key_compaction_start_the_log_at_the_first_kept_record():
    files = _files((0, 7, 100, 10), (15, 19, 999_000, 10))
    (plan,) = _plan(files, tiered=20, retention_ms=500_000)
    assert plan.log_start_offset == 15


def test_partitions_are_planned_independently():
    plans = plan_retention(
        {0: FILES, 1: FILES[2:]}, tiered_offsets={0: 40, 1: 40}, log_start_offsets={}, now_ms=NOW_MS,
        retention_ms=500_000, retention_bytes=-1,
    )
    assert [p.partition for p in plans] == [0]
