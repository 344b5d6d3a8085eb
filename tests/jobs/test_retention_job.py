"""The retention job against a real broker: whole files go, the log start offset moves
with them, a consumer below it gets OFFSET_OUT_OF_RANGE or its auto.offset.reset, and
removed files are vacuumed after the safety window. The broker's scheduler runs the
same job through spark-submit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from integration.support import assert_error, wait_until

from laketail.client import Consumer, TopicPartition
from laketail.config import BrokerSettings
from laketail.jobs import retention
from laketail.maintenance.scheduler import MaintenanceScheduler

from .support import TABLE_ONLY, fetch_all, produce_rounds, run_job, table_files

pytestmark = pytest.mark.integration

RETENTION_MS = 60_000


def _expire_two_files(broker, make_topic) -> tuple[str, int, list[str]]:
    """A topic with four table files; the time at which the first two are past
    retention.ms (and the other two are not); the two files' paths."""
    topic = make_topic(1, {**TABLE_ONLY, "retention.ms": str(RETENTION_MS)})
    produce_rounds(broker, topic, 1, rounds=4, per_round=10)
    files = table_files(broker, topic, 1)[0]
    assert len(files) == 4 and files[1].max_timestamp_us < files[2].max_timestamp_us
    now_ms = files[1].max_timestamp_us // 1000 + RETENTION_MS + 1
    return topic, now_ms, [f.path for f in files[:2]]


def test_retention_deletes_whole_files_and_moves_the_log_start(broker, make_topic):
    topic, now_ms, expired = _expire_two_files(broker, make_topic)
    rest = broker.rest
    (report,) = run_job(retention.main, "--data", str(broker.data_dir), "--topic", topic, "--now-ms", str(now_ms))
    assert report["files_removed"] == 2 and report["log_start_offsets"] == {"0": 20}, report
    assert [f.first_offset for f in table_files(broker, topic, 1)[0]] == [20, 30]

    # The broker follows the table: its log start offset is the first kept record.
    wait_until(lambda: rest.offsets(topic, 0) == (20, 40), "the broker's log start offset to move to 20")
    assert_error(rest.fetch(topic, 0, 5), 416, 41601, "OFFSET_OUT_OF_RANGE")
    assert [o for o, _, _ in fetch_all(broker, topic, 0, 20)] == list(range(20, 40))

    # A consumer positioned below the log start resets as auto.offset.reset says.
    for reset, first in (("earliest", 20), ("latest", 40)):
        consumer = Consumer({"bootstrap.servers": broker.url, "group.id": f"{topic}-{reset}",
                             "auto.offset.reset": reset, "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 3)])
        if reset == "latest":
            wait_until(lambda consumer=consumer: consumer.poll(0.2) is None
                       and consumer.position([TopicPartition(topic, 0)])[0].offset == 40,
                       "the consumer to reset to the log end")
            rest.produce_binary(topic, [{"value": b"new"}], partition=0)
        msg = wait_until(lambda consumer=consumer: (m := consumer.poll(0.5)) is not None and not m.error() and m,
                         f"a record after the {reset} reset")
        assert msg.offset() == first
        consumer.close()

    # Removed files stay inside the safety window, then vacuum deletes them.
    table = broker.table_path(topic)
    assert all((table / path).exists() for path in expired)
    (report,) = run_job(retention.main, "--data", str(broker.data_dir), "--topic", topic, "--vacuum-after-ms", "0")
    assert report["files_removed"] == 0 and report["vacuumed"] == 2, report
    assert not any((table / path).exists() for path in expired)
    assert [o for o, _, _ in fetch_all(broker, topic, 0, 20)][:20] == list(range(20, 40))


def test_retention_bytes_keeps_the_newest_files(broker, make_topic):
    topic = make_topic(1, TABLE_ONLY)
    produce_rounds(broker, topic, 1, rounds=3, per_round=10)
    files = table_files(broker, topic, 1)[0]
    limit = files[1].size_bytes + files[2].size_bytes
    resp = broker.rest.http.post(broker.rest.v3(f"/topics/{topic}/configs:alter"),
                                 json={"data": [{"name": "retention.bytes", "value": str(limit)}]})
    assert resp.status_code == 204, resp.text
    (report,) = run_job(retention.main, "--data", str(broker.data_dir), "--servers", broker.url, "--topic", topic)
    assert report["log_start_offsets"] == {"0": 10}, report
    wait_until(lambda: broker.rest.offsets(topic, 0)[0] == 10, "the log start offset to move to 10")


@pytest.mark.spark
def test_the_broker_scheduler_runs_retention_through_spark_submit(broker, make_topic):
    topic = make_topic(1, {**TABLE_ONLY, "retention.ms": "1"})
    produce_rounds(broker, topic, 1, rounds=2, per_round=5)
    settings = BrokerSettings(data=str(broker.data_dir), advertised_url=broker.url, maintenance_interval_ms=3_600_000)
    scheduler = MaintenanceScheduler(settings, master="local[1]")
    assert asyncio.run(scheduler.run_once(["retention"])) == {"retention": 0}
    # Every record is past retention.ms=1: the whole table goes, the log starts at its end.
    wait_until(lambda: broker.rest.offsets(topic, 0) == (10, 10), "the log start offset to reach the log end")
    assert table_files(broker, topic, 1) == {}
    assert Path(broker.table_path(topic), "_delta_log").is_dir()
