"""The console's pure decisions: pages, offset reset targets, the SQL grammar, lag
points, transaction rows."""

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


def test_sql_grammar():
    q = sql.parse("select partition, `offset`, key from `my-topic` where partition = 3 and key = 'it''s' "
                  "and value is not null order by offset desc limit 5;")
    assert (q.table, q.columns, q.order_by, q.descending, q.limit) == (
        "my-topic", ["partition", "offset", "key"], "offset", True, 5)
    assert [(c.column, c.op, c.value) for c in q.where] == [
        ("partition", "==", 3), ("key", "==", "it's"), ("value", "is_not_null", None)]
    assert sql.parse("SELECT COUNT(*) FROM t").count
    assert sql.parse("SELECT * FROM t").columns is None
    for bad in ("", "SELECT", "SELECT * FROM", "SELECT * FROM t WHERE", "SELECT * FROM t LIMIT -1",
                "SELECT nope FROM t", "SELECT * FROM t; DROP TABLE t", "SELECT COUNT(key) FROM t",
                "SELECT * FROM t WHERE offset ~ 3", "SELECT * FROM select"):
        with pytest.raises(InvalidRequest):
            sql.parse(bad)


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
