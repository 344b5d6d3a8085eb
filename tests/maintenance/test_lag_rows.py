"""Lag rows from the v3 lag documents."""

from laketail.maintenance.lag import LAG_SCHEMA, lag_rows, lag_table


def _doc(group, topic, partition, current, end, time_lag=0):
    return {
        "consumer_group_id": group, "topic_name": topic, "partition_id": partition,
        "current_offset": current, "log_end_offset": end, "lag": end - current if current >= 0 else end,
        "consumer_id": "", "client_id": "c1", "time_lag_ms": time_lag,
    }


def test_rows_are_sorted_and_carry_the_measurement_time():
    rows = lag_rows([_doc("g", "t", 1, 5, 9, 1200), _doc("g", "t", 0, -1, 3)], now_ms=1_700_000_000_000)
    assert [(r["partition"], r["current_offset"], r["lag"], r["time_lag_ms"]) for r in rows] == [
        (0, -1, 3, 0), (1, 5, 4, 1200),
    ]
    assert rows[0]["consumer_id"] is None and rows[0]["client_id"] == "c1"
    table = lag_table(rows)
    assert table.schema == LAG_SCHEMA
    assert table.column("time")[0].value == 1_700_000_000_000_000
