"""SQL over topics: ``register_topics`` views on the Delta tables, ``laketail sql``, and
``format("delta")`` where the Delta Lake jars are on Spark's classpath."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from laketail.cli import cli
from laketail.spark import jvm, register_topics
from laketail.spark import sql as sql_module
from tests.spark.support import Txn, aborted_then_committed, produce, read, wait_tiered


@pytest.fixture
def mixed_topic(broker: Any, make_topic: Any) -> str:
    """Partition 0: plain records, an aborted and a committed transaction, and a
    producer that aborts then commits (same producer id, next epoch); partition 1:
    plain records and, last, a transaction still open. All tiered."""
    topic = make_topic(partitions=2)
    produce(broker.url, topic, 0, [b"p0-a", b"p0-b"])
    aborted_then_committed(broker.url, topic)
    retried = Txn(broker.url, f"{topic}-r")
    retried.produce(topic, 0, [b"gone-3"])
    retried.end(commit=False)
    retried = Txn(broker.url, f"{topic}-r")
    retried.produce(topic, 0, [b"kept-2"])
    retried.end(commit=True)
    produce(broker.url, topic, 1, [b"p1-a"])
    Txn(broker.url, f"{topic}-o").produce(topic, 1, [b"open"])
    produce(broker.url, topic, 1, [b"p1-after-open"])
    wait_tiered(broker.url, topic)
    return topic


COMMITTED = [(0, b"p0-a"), (0, b"p0-b"), (0, b"kept"), (0, b"kept-2"), (1, b"p1-a")]


@pytest.mark.parametrize(("live", "ranges_as_filter"), [(True, 64), (False, 64), (False, 0)],
                         ids=["jvm", "file-lists-filter", "file-lists-anti-join"])
def test_views_show_committed_data_and_every_row(
    spark: Any, broker: Any, mixed_topic: str, live: bool, ranges_as_filter: int, monkeypatch: Any
) -> None:
    """With the jar (when built) Spark works out the transactions at the query; without
    it the driver computes aborted ranges, as a filter or a broadcast anti-join."""
    if live and jvm.jar() is None:
        pytest.skip("the laketail jar is not built (no javac)")
    if not live:
        monkeypatch.setattr(sql_module.jvm, "attach", lambda spark: False)
    monkeypatch.setattr(sql_module, "_RANGES_AS_FILTER", ranges_as_filter)
    topic = mixed_topic
    assert register_topics(spark, broker.url, [topic], follow=False) == {topic: topic}
    plan = spark.table(f"`{topic}`")._jdf.queryExecution().executedPlan().toString()
    assert ("TopicFileIndex" in plan) is live
    committed = spark.sql(f"SELECT partition, offset, value FROM `{topic}` ORDER BY partition, offset").collect()
    assert [(r.partition, bytes(r.value)) for r in committed] == COMMITTED
    assert [(r.partition, r.offset) for r in committed] == [
        (p, o) for p, o, _, _ in read(spark, broker.url, topic)
    ]  # the same rows the read_committed source returns
    every = spark.sql(
        f"SELECT partition, offset, value, control FROM `{topic}_all` ORDER BY partition, offset"
    ).collect()
    assert [r.control for r in every if r.control] == ["ABORT", "COMMIT", "ABORT", "COMMIT"]
    assert len(every) == 2 + 3 + 2 + 2 + 2 + 3  # data and markers of partition 0, partition 1
    pruned = spark.sql(f"SELECT count(*) AS n FROM `{topic}_all` WHERE partition = 1")
    assert pruned.collect()[0].n == 3
    assert "PartitionFilters: [isnotnull(partition" in pruned._jdf.queryExecution().executedPlan().toString()


def test_register_every_topic_and_plain_names(spark: Any, few_topics_broker: Any, make_topic: Any) -> None:
    broker = few_topics_broker  # every topic's views: a broker with few (tests/spark/conftest.py)
    topic = make_topic(name=f"plain_{__import__('uuid').uuid4().hex[:8]}", broker=broker)
    produce(broker.url, topic, 0, [b"x", b"y"])
    wait_tiered(broker.url, topic)
    names = register_topics(spark, broker.url)
    assert topic in names
    assert spark.sql(f"SELECT count(*) AS n FROM {topic}").collect()[0].n == 2
    assert spark.sql(f"SELECT count(*) AS n FROM {topic}_all").collect()[0].n == 2


def test_laketail_sql_prints_a_table(spark: Any, broker: Any, mixed_topic: str) -> None:
    result = CliRunner().invoke(cli, [
        "sql", f"SELECT partition, offset, value FROM `{mixed_topic}` ORDER BY partition, offset",
        "--server", broker.url, "--topic", mixed_topic,
    ])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.strip().splitlines()]
    assert lines[0] == ["partition", "offset", "value"]
    assert [line[2] for line in lines[1:]] == [v.decode() for _, v in COMMITTED]
    assert "5 rows" in result.stderr
    bad = CliRunner().invoke(cli, ["sql", "SELECT nope FROM nowhere", "--server", broker.url, "--topic", mixed_topic])
    assert bad.exit_code == 1 and "error:" in bad.stderr


def _delta_jars_loaded(spark: Any) -> bool:
    try:
        spark._jvm.java.lang.Class.forName("org.apache.spark.sql.delta.sources.DeltaDataSource")
        return True
    except Exception:
        return False


def test_format_delta_reads_the_same_table(spark: Any, broker: Any, mixed_topic: str) -> None:
    if not _delta_jars_loaded(spark):
        pytest.skip("Delta Lake's jars are not on Spark's classpath (Maven is out of reach here); "
                    "format('delta') is documented, not testable")
    uri = (broker.data_dir / "topics" / mixed_topic).as_posix()
    delta = spark.read.format("delta").load(uri).orderBy("partition", "offset").collect()
    register_topics(spark, broker.url, [mixed_topic])
    ours = spark.sql(f"SELECT * FROM `{mixed_topic}_all` ORDER BY partition, offset").collect()
    assert [r.asDict() for r in delta] == [r.asDict() for r in ours]
