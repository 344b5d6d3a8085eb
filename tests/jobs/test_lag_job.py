"""The lag job: rows appended to ``_system/consumer_lag`` agree with the lag API."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from laketail.client import Consumer, TopicPartition
from laketail.jobs import lag
from laketail.maintenance.lag import LAG_SCHEMA, lag_table_uri

from .support import run_job

pytestmark = pytest.mark.integration


def test_lag_rows_agree_with_the_lag_api(broker, make_topic, tmp_path):
    topic = make_topic(2)
    rest = broker.rest
    for p, n in ((0, 7), (1, 4)):
        assert rest.produce_binary(topic, [{"value": b"x"}] * n, partition=p).status_code == 200
    group = f"{topic}-lag"
    consumer = Consumer({"bootstrap.servers": broker.url, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 4)], asynchronous=False)
    consumer.close()

    table = str(tmp_path / "consumer_lag")
    (report,) = run_job(lag.main, "--servers", broker.url, "--table", table, "--group", group)
    assert report["rows"] == 2 and report["total_lag"] == 2, report
    api = {(d["topic_name"], d["partition_id"]): d
           for d in rest.http.get(rest.v3(f"/consumer-groups/{group}/lags")).json()["data"]}
    rows = DeltaTable(table).to_pyarrow_table()
    assert rows.schema == LAG_SCHEMA
    for row in rows.to_pylist():
        doc = api[(row["topic"], row["partition"])]
        assert row["group_id"] == group
        assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (
            doc["current_offset"], doc["log_end_offset"], doc["lag"])
        assert (row["time_lag_ms"] > 0) == (doc["time_lag_ms"] > 0)
    assert sorted((r["partition"], r["lag"]) for r in rows.to_pylist()) == [(0, 2), (1, 0)]

    # Streaming: a measurement per interval, appended; the default table under the data root.
    reports = run_job(lag.main, "--servers", broker.url, "--data", str(broker.data_dir), "--group", group,
                      "--streaming", "--interval-s", "0.1", "--max-rounds", "2")
    assert [r["round"] for r in reports] == [1, 2]
    # the shared broker's lag table also holds what other tests measured (the console's): this group's rows
    everything = DeltaTable(lag_table_uri(str(broker.data_dir))).to_pyarrow_table().to_pylist()
    measured = [r for r in everything if r["group_id"] == group]
    assert len(measured) == 4 and len({r["time"] for r in measured}) == 2


def test_batch_and_streaming_agree_on_assigned_partitions_without_commits(broker, make_topic, tmp_path):
    """One definition of the rows, kafka-consumer-groups --describe's: a partition a member
    holds without having committed there is a row (current offset -1, describe's ``-``, lag
    from the log start) in both modes. The streaming query left it out (rows=7 against
    the batch's 11 on the issue's data)."""
    topic = make_topic(2)
    rest = broker.rest
    for p, n in ((0, 7), (1, 4)):
        assert rest.produce_binary(topic, [{"value": b"x"}] * n, partition=p).status_code == 200
    group = f"{topic}-assigned"
    consumer = Consumer({"bootstrap.servers": broker.url, "group.id": group, "enable.auto.commit": False,
                         "client.id": "lag-member"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 120
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "the member never got both partitions"
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)

        batch_table, stream_table = str(tmp_path / "batch_lag"), str(tmp_path / "stream_lag")
        (report,) = run_job(lag.main, "--servers", broker.url, "--table", batch_table, "--group", group)
        assert report["rows"] == 2, report
        run_job(lag.main, "--servers", broker.url, "--table", stream_table, "--group", group,
                "--streaming", "--interval-s", "0.1", "--max-rounds", "1",
                "--checkpoint", str(tmp_path / "stream_checkpoint"))
    finally:
        consumer.close()

    def rows(table: str) -> list[tuple]:
        return sorted((r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                       r["client_id"], bool(r["consumer_id"]))
                      for r in DeltaTable(table).to_pyarrow_table().to_pylist())

    expected = [(topic, 0, 5, 7, 2, "lag-member", True), (topic, 1, -1, 4, 4, "lag-member", True)]
    assert rows(batch_table) == expected
    assert rows(stream_table) == expected
