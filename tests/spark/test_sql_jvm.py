"""SQL views fresh at every query: ``format("laketail_table")`` (the JVM relation whose file
index replays the Delta log each time Spark plans) and the views ``register_topics`` makes
over it, against a real broker, real Delta tables and the real compaction job.

Each freshness check makes its view once and runs no follower: what the next query sees
comes from the log at that query (transactions: tests/spark/test_sql_strict.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from laketail.jobs import compaction
from laketail.spark import jvm, register_topics, stop_following
from laketail.spark import sql as sql_module
from tests.jobs.support import run_job
from tests.spark.support import (
    aborted_then_committed,
    delete_topic,
    make_again,
    produce,
    table_info,
    wait_tiered,
    wait_until,
)

pytestmark = pytest.mark.skipif(jvm.jar() is None, reason="the laketail jar is not built (no javac)")


def _count(spark: Any, view: str, where: str = "") -> int:
    return spark.sql(f"SELECT count(*) AS n FROM `{view}` {where}").collect()[0].n


def _values(spark: Any, view: str) -> list[tuple[int, bytes]]:
    rows = spark.sql(f"SELECT partition, value FROM `{view}` ORDER BY partition, offset").collect()
    return [(r.partition, bytes(r.value)) for r in rows]


def _uri(broker: Any, topic: str) -> str:
    return table_info(broker.url, topic)["uri"]


def test_views_made_once_see_later_commits_without_a_follower(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    stop_following(spark)
    assert register_topics(spark, broker.url, [topic], follow=False) == {topic: topic}
    assert _count(spark, topic) == 0 and _count(spark, f"{topic}_all") == 0
    produce(broker.url, topic, 0, [b"a", b"b"])
    produce(broker.url, topic, 1, [b"c"])
    wait_tiered(broker.url, topic)
    # No follower runs and nothing was registered again: the next query sees the commits.
    assert _count(spark, f"{topic}_all") == 3
    assert _values(spark, topic) == [(0, b"a"), (0, b"b"), (1, b"c")]
    produce(broker.url, topic, 1, [b"d", b"e"])
    wait_tiered(broker.url, topic)
    assert _count(spark, topic) == 5 and _count(spark, f"{topic}_all") == 5


def test_sql_alone_with_using_laketail_table(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    uri = _uri(broker, topic)
    view = f"using_{topic.replace('-', '_')}"
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} USING laketail_table OPTIONS (path '{uri}')")
    assert _count(spark, view) == 0
    produce(broker.url, topic, 0, [b"x", b"y"])
    wait_tiered(broker.url, topic)
    rows = spark.sql(f"SELECT offset, CAST(value AS STRING) AS v FROM {view} ORDER BY offset").collect()
    assert [(r.offset, r.v) for r in rows] == [(0, "x"), (1, "y")]
    assert spark.table(view).columns == sql_module.RECORD_SCHEMA.names


def test_transactions_aborted_never_visible_committed_at_the_next_query(
    spark: Any, broker: Any, make_topic: Any
) -> None:
    topic = make_topic()
    register_topics(spark, broker.url, [topic])  # named topics: no follower with the jar
    assert id(spark) not in sql_module._FOLLOWERS
    aborted_then_committed(broker.url, topic)
    wait_tiered(broker.url, topic)
    # Both views are strict: every row, markers included, and the committed ones, at
    # the first query after tiering.
    assert _count(spark, f"{topic}_all") == 2 + 1 + 1 + 1
    assert [v for _, v in _values(spark, topic)] == [b"kept"]
    produce(broker.url, topic, 0, [b"plain"])
    wait_tiered(broker.url, topic)
    assert [v for _, v in _values(spark, topic)] == [b"kept", b"plain"]
    assert _count(spark, topic, "WHERE control IS NOT NULL") == 0
    # The files are split by their statistics: only the last one is proven plain.
    uri = _uri(broker, topic)
    assert [bytes(r.value) for r in jvm.topic_table(spark, uri, rows="plain").collect()] == [b"plain"]
    assert jvm.topic_table(spark, uri, rows="marked").count() == 5


def test_compaction_neither_duplicates_nor_drops_rows(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    stop_following(spark)
    register_topics(spark, broker.url, [topic], follow=False)
    expected = []
    for round_ in range(3):
        for p in (0, 1):
            values = [f"r{round_}-p{p}-{i}".encode() for i in range(4)]
            produce(broker.url, topic, p, values)
            expected += [(p, v) for v in values]
        wait_tiered(broker.url, topic)
    uri = _uri(broker, topic)
    files_before = len(DeltaTable(uri).file_uris())
    assert files_before >= 6
    assert sorted(_values(spark, topic)) == sorted(expected)
    (report,) = run_job(compaction.main, "--data", str(broker.data_dir), "--servers", broker.url,
                        "--topic", topic, "--engine", "local")
    assert report["files_removed"] >= 6 and report["files_added"] == 2, report
    assert len(DeltaTable(uri).file_uris()) == 2
    # The views were made before the compaction commit and nobody re-made them.
    assert sorted(_values(spark, topic)) == sorted(expected)
    offsets = spark.sql(f"SELECT partition, offset FROM `{topic}_all`").collect()
    assert len(offsets) == len({(r.partition, r.offset) for r in offsets}) == len(expected)


def test_partition_filters_prune_files(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=3)
    for p in range(3):
        produce(broker.url, topic, p, [b"v"] * (p + 1))
    wait_tiered(broker.url, topic)
    frame = jvm.topic_table(spark, _uri(broker, topic))
    frame.createOrReplaceTempView("pruned_all")
    query = spark.sql("SELECT count(*) AS n FROM pruned_all WHERE partition = 2")
    assert query.collect()[0].n == 3
    plan = query._jdf.queryExecution().executedPlan().toString()
    assert "TopicFileIndex" in plan and "PartitionFilters: [isnotnull(partition" in plan

    def files(where: str) -> set[str]:
        return {r.f for r in spark.sql(f"SELECT DISTINCT input_file_name() AS f FROM pruned_all {where}").collect()}

    every, one = files(""), files("WHERE partition = 2")
    assert len(one) == 1 and len(every) == 3 and one < every
    assert _count(spark, "pruned_all", "WHERE partition IN (0, 1)") == 3


def test_a_checkpoint_starts_the_replay(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    produce(broker.url, topic, 0, [b"a", b"b"])
    wait_tiered(broker.url, topic)
    uri = _uri(broker, topic)
    DeltaTable(uri).create_checkpoint()
    produce(broker.url, topic, 0, [b"c"])
    wait_tiered(broker.url, topic)
    assert jvm.topic_table(spark, uri).count() == 3  # checkpoint, then the commit after it
    assert (Path(uri) / "_delta_log" / "_last_checkpoint").exists()


def test_tiered_offsets_come_from_a_checkpoint_too(spark: Any, broker: Any, make_topic: Any) -> None:
    """format("laketail") through the jar takes each partition's tiered offset from the
    tierer's Delta transaction: partition 1's is only in the checkpoint here (the commit
    after it moves partition 0 alone), and without it that partition's head would go to
    the Python source."""
    topic = make_topic(partitions=2)
    produce(broker.url, topic, 0, [b"a0", b"a1"])
    produce(broker.url, topic, 1, [b"b0", b"b1", b"b2"])
    wait_tiered(broker.url, topic)
    DeltaTable(_uri(broker, topic)).create_checkpoint()
    produce(broker.url, topic, 0, [b"a2"])
    wait_tiered(broker.url, topic)
    frame = (spark.read.format("laketail").option("laketail.servers", broker.url)
             .option("subscribe", topic).load())
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "2 ranges by Spark's Parquet reader" in plan and "0 by the Python source" in plan
    rows = sorted((r.partition, r.offset, bytes(r.value)) for r in frame.collect())
    assert rows == [(0, 0, b"a0"), (0, 1, b"a1"), (0, 2, b"a2"), (1, 0, b"b0"), (1, 1, b"b1"), (1, 2, b"b2")]


def test_a_topic_deleted_and_made_again_is_read_afresh(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    produce(broker.url, topic, 0, [b"old-1", b"old-2"])
    wait_tiered(broker.url, topic)
    uri = _uri(broker, topic)
    jvm.topic_table(spark, uri).createOrReplaceTempView("remade_all")
    assert _values(spark, "remade_all") == [(0, b"old-1"), (0, b"old-2")]
    delete_topic(broker.url, topic, uri)

    make_again(make_topic, topic)
    produce(broker.url, topic, 0, [b"new"])  # the new table reaches the old one's version
    wait_tiered(broker.url, topic)
    assert _uri(broker, topic) == uri
    assert _values(spark, "remade_all") == [(0, b"new")]


def test_bad_locations_are_refused_with_the_reason(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="is not a Delta table"):
        jvm.topic_table(spark, str(tmp_path / "nothing-here"))
    other = str(tmp_path / "other")
    write_deltalake(other, pa.table({"x": pa.array([1], pa.int32()), "y": pa.array([2])}), partition_by=["x"])
    with pytest.raises(Exception, match="is not a laketail topic table"):
        jvm.topic_table(spark, other)
    with pytest.raises(Exception, match="rows must be all, plain or marked"):
        jvm.topic_table(spark, other, rows="some")
    with pytest.raises(Exception, match="needs the topic table's location"):
        spark.sql("CREATE OR REPLACE TEMPORARY VIEW no_path USING laketail_table")


def test_without_the_jar_the_follower_views_still_work(
    spark: Any, broker: Any, make_topic: Any, monkeypatch: Any
) -> None:
    topic = make_topic()
    produce(broker.url, topic, 0, [b"a"])
    wait_tiered(broker.url, topic)
    stop_following(spark)
    monkeypatch.setattr(sql_module.jvm, "attach", lambda spark: False)
    register_topics(spark, broker.url, [topic], follow=False)
    assert _count(spark, topic) == 1
    assert "TopicFileIndex" not in spark.sql(f"SELECT * FROM `{topic}`")._jdf.queryExecution().executedPlan().toString()
    produce(broker.url, topic, 0, [b"b"])
    wait_tiered(broker.url, topic)
    assert _count(spark, topic) == 1  # pinned: the fallback needs the follower (or registering again)
    try:
        register_topics(spark, broker.url, [topic])
        wait_until(lambda: _count(spark, topic) == 2, "the fallback's follower to re-make the view", timeout_s=30)
    finally:
        stop_following(spark)


def test_the_build_without_javac_says_so_and_succeeds(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no javac there
    done = subprocess.run([sys.executable, "-m", "laketail.spark.jvm", "build"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "javac was not found" in done.stderr and "falls back" in done.stderr
    assert jvm.jar() is not None  # the jar already built is left alone
