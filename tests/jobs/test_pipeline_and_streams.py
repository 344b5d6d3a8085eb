"""Spark over compacted topics: a batch query reads the same rows before and after
compaction, and the exactly-once pipeline job, run again from its checkpoint after
compaction, picks up only the new records (stream positions are offsets: nothing is
replayed) and writes each input to the sink exactly once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from laketail.jobs import compaction, eos_pipeline

from .support import TABLE_ONLY, fetch_all, produce_rounds, run_job, table_files

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _batch(spark: Any, broker: Any, topic: str) -> list[tuple]:
    frame = spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic).load()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in frame.collect())


def _sink_values(broker: Any, topic: str, partitions: int) -> Counter:
    return Counter(v for p in range(partitions) for _, _, v in fetch_all(broker, topic, p))


def test_compaction_between_pipeline_runs_replays_nothing(spark, broker, make_topic, tmp_path):
    source = make_topic(2, TABLE_ONLY)
    sink = make_topic(2)
    produce_rounds(broker, source, 2, rounds=3, per_round=10)
    before = _batch(spark, broker, source)
    assert len(before) == 60

    argv = ["--servers", broker.url, "--source", source, "--sink", sink,
            "--checkpoint", str(tmp_path / "checkpoint"), "--available-now"]
    run_job(eos_pipeline.main, *argv)
    expected = Counter(v.upper() for _, _, v in before)
    assert _sink_values(broker, sink, 2) == expected

    (report,) = run_job(compaction.main, "--data", str(broker.data_dir), "--topic", source, "--engine", "local")
    assert report["files_removed"] == 6 and report["files_added"] == 2, report
    assert all(len(files) == 1 for files in table_files(broker, source, 2).values())
    assert _batch(spark, broker, source) == before

    produce_rounds(broker, source, 2, rounds=1, per_round=5, record=lambda r, p, i: {"value": f"new-p{p}-{i}".encode()})
    run_job(eos_pipeline.main, *argv)
    expected.update(f"NEW-P{p}-{i}".encode() for p in (0, 1) for i in range(5))
    assert _sink_values(broker, sink, 2) == expected  # each input once: nothing replayed, nothing lost


def test_the_pipeline_transform_is_pure(spark):
    frame = spark.createDataFrame([(b"k", b"hello")], "key BINARY, value BINARY")
    out = eos_pipeline.transform(frame).collect()
    assert [(bytes(r.key), bytes(r.value)) for r in out] == [(b"k", b"HELLO")]
