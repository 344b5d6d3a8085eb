"""Live SQL over topics: views registered once see later commits, and ``USING laketail``
works from SQL alone (planned by Spark at every query)."""

from __future__ import annotations

import pkgutil
from typing import Any

from laketail.spark import jvm, register_topics, stop_following
from tests.spark.support import produce, wait_tiered, wait_until


def _count(spark: Any, view: str) -> int:
    return spark.sql(f"SELECT count(*) AS n FROM `{view}`").collect()[0].n


def test_views_registered_once_see_every_later_commit(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    # Registered before anything was tiered: the frozen views answered [] forever.
    assert register_topics(spark, broker.url, [topic]) == {topic: topic}
    assert _count(spark, topic) == 0
    produce(broker.url, topic, 0, [b"a", b"b", b"c"])
    produce(broker.url, topic, 1, [b"d"])
    wait_tiered(broker.url, topic)
    wait_until(lambda: _count(spark, topic) == 4, f"view {topic} to show the first commits", timeout_s=30)
    produce(broker.url, topic, 1, [b"e", b"f"])
    wait_tiered(broker.url, topic)
    wait_until(lambda: _count(spark, topic) == 6, f"view {topic} to show later commits", timeout_s=30)
    wait_until(lambda: _count(spark, f"{topic}_all") == 6, f"view {topic}_all to follow too", timeout_s=30)
    rows = spark.sql(f"SELECT partition, count(*) AS n FROM `{topic}` GROUP BY partition ORDER BY partition")
    assert [(r.partition, r.n) for r in rows.collect()] == [(0, 3), (1, 3)]
    # With laketail's jar a stopped follower changes nothing for records outside
    # transactions (each query reads the Delta log); without it the views stay where
    # the follower left them until registered again.
    stop_following(spark)
    produce(broker.url, topic, 0, [b"g"])
    wait_tiered(broker.url, topic)
    assert _count(spark, topic) == (7 if jvm.jar() is not None else 6)
    register_topics(spark, broker.url, [topic])  # registering again: current at once
    assert _count(spark, topic) == 7


def test_sql_alone_reads_topics_live_with_using_laketail(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    produce(broker.url, topic, 0, [b"x", b"y"])
    view = f"sqlonly_{topic.replace('-', '_')}"
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {view} USING laketail "
        f"OPTIONS ('laketail.servers' '{broker.url}', subscribe '{topic}')"
    )
    assert _count(spark, view) == 2
    produce(broker.url, topic, 0, [b"z"])  # acknowledged, not tiered yet: the next query sees it
    rows = spark.sql(f"SELECT offset, CAST(value AS STRING) AS v FROM {view} ORDER BY offset").collect()
    assert [(r.offset, r.v) for r in rows] == [(0, "x"), (1, "y"), (2, "z")]


def test_spark_finds_the_data_source_without_a_python_call() -> None:
    """Spark 4 registers ``pyspark_*.DefaultSource`` of the workers' Python at startup
    (``pyspark.sql.worker.lookup_data_sources``, which lists top-level modules with
    ``pkgutil.iter_modules``): that is how ``spark-sql`` gets it. An editable install
    (this checkout's) hides the module from that listing behind its import hook; a
    regular install puts it in site-packages, where the listing finds it."""
    import pyspark_laketail

    editable = "__editable__" in " ".join(m.name for m in pkgutil.iter_modules())
    assert editable or "pyspark_laketail" in {m.name for m in pkgutil.iter_modules()}
    from pyspark.sql.datasource import DataSource

    assert issubclass(pyspark_laketail.DefaultSource, DataSource)
    assert pyspark_laketail.DefaultSource.name() == "laketail"
