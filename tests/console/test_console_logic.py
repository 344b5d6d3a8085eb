"""The console's decisions: pages, offset reset targets, which SQL runs and over what
(DataFusion over small Delta tables written here), lag points, transaction rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from laketail.console import reset, sql
from laketail.console.lag_history import LagPoint, points_of
from laketail.console.pages import MAX_LIMIT, page
from laketail.console.transactions import transaction_rows
from laketail.coordinator.transactions import TxnMetadata
from laketail.errors import InvalidRequest


def test_a_page_is_bounded_and_knows_the_total():
    items = list(range(2500))
    first = page(items)
    assert first.rows == list(range(100)) and first.meta() == {"total": 2500, "limit": 100, "offset": 0}
    assert page(items, MAX_LIMIT, 2000).rows == list(range(2000, 2500))
    assert page(items, 10, 9999).rows == []
    for limit, offset in ((0, 0), (MAX_LIMIT + 1, 0), (10, -1)):
        with pytest.raises(InvalidRequest):
            page(items, limit, offset)


@pytest.mark.parametrize(("to", "kwargs", "expected"), [
    ("earliest", {}, 5),
    ("latest", {}, 50),
    ("offset", {"offset": 20}, 20),
    ("offset", {"offset": 2}, 5),       # clamped up to the log start
    ("offset", {"offset": 99}, 50),     # clamped down to the high watermark
    ("datetime", {"offset_for_time": 30}, 30),
    ("datetime", {"offset_for_time": None}, 50),  # every record is older: the end
])
def test_reset_targets_follow_kafka_consumer_groups(to, kwargs, expected):
    assert reset.reset_target(to, 5, 50, **kwargs) == expected


def test_reset_options_are_checked_before_any_io():
    reset.check_spec("earliest", None, None)
    for to, offset, when in (("offset", None, None), ("offset", -1, None), ("datetime", None, None)):
        with pytest.raises(InvalidRequest):
            reset.check_spec(to, offset, when)


def test_sql_lets_through_one_query_and_refuses_everything_else():
    assert sql.check_read_only("  select 1 -- done\n;") == "select 1"
    assert sql.check_read_only("/* c */ WITH x AS (SELECT 1) SELECT * FROM x;") == (
        "WITH x AS (SELECT 1) SELECT * FROM x")
    assert sql.check_read_only("(SELECT 'a;--b')") == "(SELECT 'a;--b')"
    assert sql.check_read_only("VALUES (1)") == "VALUES (1)"
    for bad in ("", " ; ", "-- nothing", "DROP TABLE t", "/* hidden */ COPY (SELECT 1) TO '/tmp/x'",
                "CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '/etc/passwd'", "SET datafusion.a = 1",
                "INSERT INTO t VALUES (1)", "DELETE FROM t", "EXPLAIN ANALYZE SELECT 1", "SELECT 1 /* open"):
        with pytest.raises(InvalidRequest):
            sql.check_read_only(bad)


def test_sql_reads_the_missing_table_from_datafusions_error():
    assert sql.missing_table("Error during planning: table 'datafusion.public.clicks' not found") == "clicks"
    assert sql.missing_table("Error during planning: table 'datafusion.public.my.topic' not found") == "my.topic"
    assert sql.missing_table("Error during planning: table 'datafusion.my.topic' not found") == "datafusion.my.topic"
    assert sql.missing_table("Schema error: No field named nope.") is None


def test_sql_committed_view_leaves_out_aborted_ranges_and_undecided_records():
    from laketail.spark.isolation import TransactionRanges

    assert sql.committed_view("raw", {}) == 'SELECT r.* FROM "raw" AS r WHERE r.control IS NULL'
    view = sql.committed_view("raw", {
        0: TransactionRanges([(7, -1, 3), (9, 4, 8)], stable_offset=12, aborted_producers=frozenset({9})),
        2: TransactionRanges([], stable_offset=None),
    })
    assert "VALUES (0, 7, -1, 3), (0, 9, -1, 9223372036854775807)" in view  # 9 aborted everything: by id
    assert 'CASE r.partition WHEN 0 THEN 12 ELSE 9223372036854775807 END' in view
    assert "WHEN 2" not in view


def _table(path, rows):
    """A topic table of ``rows`` ``(partition, offset, value, producer_id, transactional, control)``."""
    from datetime import datetime, timezone

    from deltalake import write_deltalake

    from laketail.records import RECORD_SCHEMA

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    columns = {
        "partition": [r[0] for r in rows], "offset": [r[1] for r in rows], "timestamp": [now] * len(rows),
        "timestamp_type": [0] * len(rows), "key": [None] * len(rows), "value": [r[2] for r in rows],
        "headers": [[]] * len(rows), "producer_id": [r[3] for r in rows], "producer_epoch": [0] * len(rows),
        "sequence": [0] * len(rows), "transactional": [r[4] for r in rows], "control": [r[5] for r in rows],
        "leader_epoch": [0] * len(rows),
    }
    write_deltalake(str(path), pa.table(columns, schema=RECORD_SCHEMA), partition_by=["partition"])
    return str(path)


def test_sql_runs_group_by_over_committed_rows_of_a_delta_table(tmp_path):
    uri = _table(tmp_path / "t", [
        (0, 0, b"plain", 1, False, None),
        (0, 1, b"aborted", 2, True, None), (0, 2, None, 2, True, "ABORT"),
        (0, 3, b"kept", 3, True, None), (0, 4, None, 3, True, "COMMIT"),
        (1, 0, b"one", 1, False, None), (1, 1, b"open", 4, True, None), (1, 2, b"after-open", 1, False, None),
    ])
    asked = []

    def resolve(name):
        asked.append(name)
        return sql.Table("clicks", uri, "all" if name.endswith("_all") else "committed")

    result = sql.run("SELECT partition, count(*) AS n FROM clicks GROUP BY partition ORDER BY partition",
                     resolve, max_rows=10)
    assert result.rows.to_pylist() == [{"partition": 0, "n": 2}, {"partition": 1, "n": 1}]
    assert asked == ["clicks"] and not result.truncated
    values = sql.run('SELECT value FROM clicks ORDER BY partition, "offset"', resolve, max_rows=10).rows
    assert values.column("value").to_pylist() == [b"plain", b"kept", b"one"]
    every = sql.run("SELECT count(*) AS n FROM clicks_all", resolve, max_rows=10).rows
    assert every.to_pylist() == [{"n": 8}]
    capped = sql.run("SELECT * FROM clicks_all", resolve, max_rows=3)
    assert capped.rows.num_rows == 3 and capped.truncated
    small = sql.run("SELECT * FROM clicks_all", resolve, max_rows=10, max_bytes=1)
    assert small.rows.num_rows == 0 and small.truncated
    for bad in ("SELECT 1 INTO copy_of_it", "WITH a AS (SELECT 1) INSERT INTO clicks SELECT * FROM clicks",
                "SELECT nope FROM clicks", "SELECT 1; SELECT 2"):
        with pytest.raises(InvalidRequest):
            sql.run(bad, resolve, max_rows=10)


def test_sql_over_a_topic_without_a_table_yet_is_empty(tmp_path):
    empty = sql.Table("fresh", str(tmp_path / "none"), "committed")
    result = sql.run("SELECT count(*) AS n FROM fresh", lambda name: empty, max_rows=10)
    assert result.rows.to_pylist() == [{"n": 0}]


def test_sql_deadline_and_query_slot_bound_a_query(tmp_path):
    from laketail.errors import RequestTimedOut

    uri = _table(tmp_path / "t", [(0, i, b"x", 1, False, None) for i in range(5)])
    ticks = iter(range(1000))  # every look at the clock is one second later
    with pytest.raises(RequestTimedOut):
        sql.run("SELECT * FROM t", lambda name: sql.Table("t", uri, "committed"), max_rows=10, timeout_ms=2500,
                clock=lambda: float(next(ticks)))
    assert sql.SLOTS.acquire(timeout=1)  # the slot was given back
    try:
        with pytest.raises(RequestTimedOut):  # another query holds the broker's slot
            sql.run("SELECT 1", lambda name: sql.Table("t", uri, "committed"), max_rows=10, timeout_ms=50)
    finally:
        sql.SLOTS.release()


def test_lag_points_sum_each_measurement_and_keep_the_newest():
    rows = pa.table({
        "time": pa.array([2_000_000, 1_000_000, 1_000_000, 3_000_000, 2_000_000], pa.timestamp("us", "UTC")),
        "partition": pa.array([0, 0, 1, 0, 1], pa.int32()),
        "lag": pa.array([7, 10, 5, 1, 3], pa.int64()),
        "time_lag_ms": pa.array([70, 100, 400, 10, 30], pa.int64()),
    })
    assert points_of(rows, 10) == [LagPoint(1000, 15, 400, 2), LagPoint(2000, 10, 70, 2), LagPoint(3000, 1, 10, 1)]
    assert points_of(rows, 2) == [LagPoint(2000, 10, 70, 2), LagPoint(3000, 1, 10, 1)]
    assert points_of(rows.slice(0, 0), 10) == []


def test_transactions_open_past_their_timeout_are_hanging_and_come_first():
    metas = [
        TxnMetadata("done", 1, 0, 60_000, "CompleteCommit", start_ms=100),
        TxnMetadata("young", 2, 0, 60_000, "Ongoing", {("t", 0)}, start_ms=90_000),
        TxnMetadata("stuck", 3, 4, 60_000, "Ongoing", {("t", 1), ("t", 0)}, start_ms=10_000),
        TxnMetadata("preparing", 4, 0, 1_000, "PrepareCommit", {("u", 0)}, start_ms=95_000),
    ]
    rows = transaction_rows(metas, now_ms=100_000)
    assert [(r["transactional_id"], r["age_ms"], r["hanging"]) for r in rows] == [
        ("stuck", 90_000, True), ("young", 10_000, False), ("preparing", 5_000, True), ("done", None, False)]
    assert rows[0]["partitions"] == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
