"""The compaction job against a real broker: file compaction changes no record, no
offset and no consumer position while producers, the tierer and fetches go on; key
compaction keeps the latest record per key; ``laketail jobs run`` runs it through
spark-submit."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from integration.support import read_table, rows_by_offset, wait_until

from laketail.client import Consumer, TopicPartition
from laketail.jobs import compaction

from .support import TABLE_ONLY, fetch_all, hot_segments, produce_rounds, run_job, table_files

pytestmark = pytest.mark.integration


def _committed_consumer(broker, topic: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.url, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})


def test_file_compaction_changes_no_record_offset_or_position(broker, make_topic):
    topic = make_topic(2, TABLE_ONLY)
    produce_rounds(broker, topic, 2, rounds=5, per_round=20)
    assert all(len(files) == 5 for files in table_files(broker, topic, 2).values())
    wait_until(lambda: all(_hot_start(broker, topic, p) > 30 for p in (0, 1)),
               "hot segments to go (reads hit the table)")
    before = {p: fetch_all(broker, topic, p) for p in (0, 1)}

    # A group reads 30 records of each partition and commits.
    consumer = _committed_consumer(broker, topic, f"{topic}-g")
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    seen = []
    while len(seen) < 60:
        msg = consumer.poll(1.0)
        if msg is not None and not msg.error() and msg.offset() < 30:
            seen.append((msg.partition(), msg.offset()))
    consumer.commit(offsets=[TopicPartition(topic, 0, 30), TopicPartition(topic, 1, 30)], asynchronous=False)
    consumer.close()

    # Producers and the tierer keep going while the job runs.
    stop = threading.Event()
    produced = []

    def produce() -> None:
        rest = broker.new_client()
        while not stop.is_set():
            resp = rest.produce_binary(topic, [{"value": b"during"}], partition=0)
            assert resp.status_code == 200, resp.text
            produced.append(resp.json()["offsets"][0]["offset"])
        rest.close()

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        (report,) = run_job(compaction.main, "--data", str(broker.data_dir), "--servers", broker.url,
                            "--topic", topic, "--engine", "local")
    finally:
        stop.set()
        producer.join()
    assert report["files_removed"] >= 10 and report["files_added"] == 2, report  # + files tiered meanwhile

    # Every record is where it was, and the ones produced meanwhile follow them.
    after = {p: fetch_all(broker, topic, p) for p in (0, 1)}
    assert after[1] == before[1]
    assert after[0][: len(before[0])] == before[0]
    assert [o for o, _, v in after[0][len(before[0]):]] == produced
    end = broker.rest.end_offsets(topic)
    table = wait_until(lambda: (t := read_table(broker.table_path(topic))).num_rows == sum(end.values()) and t,
                       "the records produced during compaction in the table")
    rows_by_offset(table)  # no offset twice
    files = table_files(broker, topic, 2)
    assert files[1][0].first_offset == 0 and files[1][0].last_offset == 99

    # The group resumes where it committed: nothing replayed, nothing skipped.
    consumer = _committed_consumer(broker, topic, f"{topic}-g")
    consumer.subscribe([topic])
    firsts: dict[int, int] = {}
    wait_until(lambda: _first_offsets(consumer, firsts) and len(firsts) == 2, "the group to resume")
    consumer.close()
    assert firsts == {0: 30, 1: 30}


def _hot_start(broker, topic: str, partition: int) -> int:
    segments = hot_segments(broker, topic, partition)
    return int(segments[0].stem) if segments else -1


def _first_offsets(consumer: Consumer, firsts: dict[int, int]) -> bool:
    msg = consumer.poll(0.5)
    if msg is not None and not msg.error():
        firsts.setdefault(msg.partition(), msg.offset())
    return True


@pytest.mark.spark
def test_key_compaction_through_laketail_jobs_run_keeps_the_latest_per_key(broker, make_topic):
    topic = make_topic(1, {**TABLE_ONLY, "cleanup.policy": "compact"})
    keys = [b"a", b"b", b"c"]

    def record(r: int, p: int, i: int) -> dict:
        if r == 3 and keys[i] == b"b":
            return {"key": b"b", "value": None}  # a tombstone, younger than delete.retention.ms
        return {"key": keys[i], "value": f"{keys[i].decode()}{r}".encode()}

    produce_rounds(broker, topic, 1, rounds=4, per_round=3, record=record)
    wait_until(lambda: _hot_start(broker, topic, 0) > 0, "hot segments to go (reads hit the table)")
    run = subprocess.run(
        [sys.executable, "-m", "laketail.cli", "jobs", "run", "compaction", "--master", "local[1]",
         "--data", str(broker.data_dir), "--servers", broker.url, "--topic", topic, "--engine", "spark"],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"compaction {topic}: " in run.stdout and "key_compactions=1" in run.stdout, run.stdout

    table = read_table(broker.table_path(topic))
    survivors = sorted(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                           table.column("value").to_pylist()))
    assert survivors == [(9, b"a", b"a3"), (10, b"b", None), (11, b"c", b"c3")]
    # Offsets did not move: a fetch from 0 (below the hot tier) skips the compacted gap.
    wait_until(lambda: fetch_all(broker, topic, 0) == survivors, "fetches to read the compacted table")


def test_file_compaction_keeps_the_typed_value_column(broker, make_topic):
    """A table with typed columns (``laketail.table.mode``) written in three commits, the
    last by a wider schema version, compacted into one file: ``value_struct`` keeps every
    value, in the widened type."""
    from tests.schemas.test_typed_columns import ORDER_V1, ORDER_V2, TYPED, _produce_avro, _table_rows

    topic = make_topic(1, {**TABLE_ONLY, **TYPED})
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "a", "amount": 1.0}])
    _table_rows(broker, topic, 1)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "b", "amount": 2.0}])
    _table_rows(broker, topic, 2)
    _produce_avro(broker.rest, topic, ORDER_V2, [{"id": "c", "amount": 3.0, "note": {"string": "n"}}])
    before = _table_rows(broker, topic, 3)
    assert len(table_files(broker, topic, 1)[0]) == 3
    (report,) = run_job(compaction.main, "--data", str(broker.data_dir), "--servers", broker.url,
                        "--topic", topic, "--engine", "local")
    assert report["files_removed"] == 3 and report["files_added"] == 1, report
    assert len(table_files(broker, topic, 1)[0]) == 1
    after = _table_rows(broker, topic, 3)
    assert after.column("value_struct").to_pylist() == before.column("value_struct").to_pylist() == [
        {"id": "a", "amount": 1.0, "note": None}, {"id": "b", "amount": 2.0, "note": None},
        {"id": "c", "amount": 3.0, "note": "n"}]
    assert after.column("value").to_pylist() == before.column("value").to_pylist()
