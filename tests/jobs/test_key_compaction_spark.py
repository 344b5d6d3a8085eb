"""Key compaction computed by Spark (the maintenance application's path, whatever the
size): the latest offset per key as a Spark aggregation, the survivors written per chunk
of input by Spark tasks, one Delta commit. The result is Kafka's compaction -- latest per
key, order and offsets kept, tombstones kept until ``delete.retention.ms`` -- and
consumers read exactly what the in-process path gives on the same records."""

from __future__ import annotations

import time

import pytest
from integration.support import wait_until

from laketail.jobs.compaction import spark_rewriter
from laketail.jobs.key_compaction import chunk_inputs
from laketail.maintenance.rewrite import rewrite_locally
from laketail.maintenance.runs import run_compaction
from laketail.maintenance.topics import maintained_topics

from .support import TABLE_ONLY, fetch_all, produce_rounds, table_files

pytestmark = pytest.mark.integration

COMPACT = {**TABLE_ONLY, "cleanup.policy": "compact"}


def test_chunks_are_consecutive_files_up_to_the_size():
    sizes = [("a", 4), ("b", 4), ("c", 9), ("d", 1), ("e", 1)]
    assert chunk_inputs(sizes, 8) == [["a", "b"], ["c"], ["d", "e"]]
    assert chunk_inputs(sizes, 1) == [["a"], ["b"], ["c"], ["d"], ["e"]]


def _record(half: int):
    """Six records: keys k0..k3, one keyless record, k0 again. Tombstones: k1 and k3 in
    the first half, k2 in the second; the second half writes k3 again and k1 not at all."""

    def record(r: int, p: int, i: int) -> dict:
        if i == 4:
            return {"value": f"nokey-{half}{r}-{p}".encode()}
        key = f"k{0 if i == 5 or (half, i) == (1, 1) else i}".encode()
        tombstone = half == 0 and key in (b"k1", b"k3") or half == 1 and key == b"k2"
        return {"key": key, "value": None if tombstone else f"{key.decode()}-{half}{r}{i}-{p}".encode()}

    return record


def _expected(records: list[tuple], expired_before: int) -> list[tuple]:
    """Kafka's compaction of ``records`` (offset, key, value): the latest per key, keyless
    ones kept, a latest tombstone dropped when its offset is below ``expired_before``."""
    latest = {key: offset for offset, key, _ in records if key is not None}
    return [(o, k, v) for o, k, v in records
            if k is None or (latest[k] == o and not (v is None and o < expired_before))]


def test_spark_key_compaction_equals_kafka_semantics_and_the_local_path(spark, broker, make_topic):
    local_topic, spark_topic = make_topic(2, COMPACT), make_topic(2, COMPACT)
    for topic in (local_topic, spark_topic):
        produce_rounds(broker, topic, 2, rounds=1, per_round=6, record=_record(0))
    time.sleep(0.01)
    mark_ms = int(time.time() * 1000)  # tombstones before it are past delete.retention.ms
    time.sleep(0.01)
    for topic in (local_topic, spark_topic):
        produce_rounds(broker, topic, 2, rounds=1, per_round=6, record=_record(1))
    root = str(broker.data_dir)
    topics = {t.name: t for t in maintained_topics(root, broker.url, [local_topic, spark_topic])}
    now_ms = mark_ms + topics[spark_topic].config.delete_retention_ms
    before = {p: fetch_all(broker, spark_topic, p) for p in (0, 1)}
    assert before == {p: fetch_all(broker, local_topic, p) for p in (0, 1)}  # the same records
    assert all(len(files) == 2 for files in table_files(broker, spark_topic, 2).values())

    local = run_compaction(root, topics[local_topic], now_ms, target_file_bytes=1 << 27, rewriter=rewrite_locally)
    done = run_compaction(root, topics[spark_topic], now_ms, target_file_bytes=1 << 27,
                          rewriter=spark_rewriter(lambda: spark, chunk_bytes=1))
    assert [t.rule for t in done.tasks] == ["keys", "keys"] and done.version is not None
    # Computed by Spark and written per chunk: one file per input file with survivors,
    # where the in-process rewrite writes one file per task.
    assert len(done.outputs) > len(done.tasks) and len(local.outputs) == len(local.tasks)

    for p in (0, 1):
        second_half = before[p][6][0]  # the first offset produced after the mark
        expected = _expected(before[p], expired_before=second_half)
        assert [k for _, k, v in expected if v is None] == [b"k2"]  # the young tombstone stays
        assert b"k1" not in {k for _, k, _ in expected}  # the old one went
        wait_until(lambda p=p, expected=expected: fetch_all(broker, spark_topic, p) == expected,
                   "consumers to read the compacted table")
        assert fetch_all(broker, local_topic, p) == fetch_all(broker, spark_topic, p)
        files = table_files(broker, spark_topic, 2)[p]
        assert sum(f.num_records for f in files) == len(expected)
        spans = [(f.first_offset, f.last_offset) for f in files]
        assert spans == sorted(spans) and all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
