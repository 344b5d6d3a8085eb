"""The committed view ``<topic>`` with laketail's jar is strict for transactions too: what a
transaction's marker decides, and each partition's last stable offset, are worked out by
Spark at every query from the table's latest version, so no view follower runs.

Against a real broker, real transactional producers (``/v1/producers``), real Delta tables
and the real compaction job. Each check registers its views once and asserts that no
follower thread exists; every later query sees the table as tiered at that moment."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from deltalake import DeltaTable

from laketail.jobs import compaction
from laketail.spark import jvm, register_topics
from laketail.spark import sql as sql_module
from tests.jobs.support import run_job
from tests.spark.support import Txn, delete_topic, make_again, produce, read, table_info, wait_tiered

pytestmark = pytest.mark.skipif(jvm.jar() is None, reason="the laketail jar is not built (no javac)")


def _values(spark: Any, view: str) -> list[tuple[int, bytes]]:
    rows = spark.sql(f"SELECT partition, value FROM `{view}` ORDER BY partition, offset").collect()
    return [(r.partition, bytes(r.value)) for r in rows]


def _no_follower(spark: Any) -> None:
    assert id(spark) not in sql_module._FOLLOWERS
    assert not [t for t in threading.enumerate() if t.name == "laketail-view-follower"]


def _register(spark: Any, broker: Any, topic: str) -> None:
    assert register_topics(spark, broker.url, [topic]) == {topic: topic}
    _no_follower(spark)


def test_transactions_show_at_the_next_query_once_decided(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    _register(spark, broker, topic)
    produce(broker.url, topic, 0, [b"p0-before"])
    produce(broker.url, topic, 1, [b"p1-before"])
    committed = Txn(broker.url, f"{topic}-c")
    committed.produce(topic, 0, [b"c-1", b"c-2"])
    aborted = Txn(broker.url, f"{topic}-a")
    aborted.produce(topic, 0, [b"gone"])
    produce(broker.url, topic, 0, [b"p0-after-open"])
    produce(broker.url, topic, 1, [b"p1-after"])
    wait_tiered(broker.url, topic)
    # Both transactions are open in the table: partition 0 stops at the first undecided
    # record (its last stable offset), records outside transactions after it included;
    # partition 1 has none and is not cut.
    assert _values(spark, topic) == [(0, b"p0-before"), (1, b"p1-before"), (1, b"p1-after")]
    assert len(_values(spark, f"{topic}_all")) == 7  # every row, undecided ones included

    committed.end(commit=True)  # its marker lands in a later file than its records
    wait_tiered(broker.url, topic)
    # The aborted-to-be transaction is still open and sits before p0-after-open.
    assert _values(spark, topic) == [(0, b"p0-before"), (0, b"c-1"), (0, b"c-2"), (1, b"p1-before"),
                                     (1, b"p1-after")]
    aborted.end(commit=False)
    wait_tiered(broker.url, topic)
    expected = [(0, b"p0-before"), (0, b"c-1"), (0, b"c-2"), (0, b"p0-after-open"), (1, b"p1-before"),
                (1, b"p1-after")]
    assert _values(spark, topic) == expected
    assert spark.sql(f"SELECT count(*) AS n FROM `{topic}` WHERE control IS NOT NULL").collect()[0].n == 0
    # The same rows as the read_committed source, which asks the broker.
    offsets = spark.sql(f"SELECT partition, offset FROM `{topic}` ORDER BY partition, offset").collect()
    assert [(r.partition, r.offset) for r in offsets] == [(p, o) for p, o, _, _ in read(spark, broker.url, topic)]
    _no_follower(spark)


def test_a_producer_aborting_then_committing_and_many_transactions(spark: Any, broker: Any, make_topic: Any) -> None:
    """One transactional id (one producer id, epochs going up) alternating aborts and
    commits: each record goes by the first marker after it, not by any later one."""
    topic = make_topic()
    _register(spark, broker, topic)
    expected = []
    for i in range(6):
        txn = Txn(broker.url, f"{topic}-same")
        txn.produce(topic, 0, [f"t{i}-a".encode(), f"t{i}-b".encode()])
        txn.end(commit=i % 2 == 1)
        if i % 2 == 1:
            expected += [(0, f"t{i}-a".encode()), (0, f"t{i}-b".encode())]
        produce(broker.url, topic, 0, [f"plain-{i}".encode()])
        expected.append((0, f"plain-{i}".encode()))
    wait_tiered(broker.url, topic)
    assert _values(spark, topic) == expected


def test_compaction_of_mixed_files_keeps_the_rows(spark: Any, broker: Any, make_topic: Any) -> None:
    """File compaction merges plain files (records outside transactions only) with marked
    ones (transactional records, markers): the merged file is marked by its statistics,
    and the view shows the same rows before and after, though made before."""
    topic = make_topic()
    _register(spark, broker, topic)
    produce(broker.url, topic, 0, [b"plain-1", b"plain-2"])
    wait_tiered(broker.url, topic)
    txn = Txn(broker.url, f"{topic}-c")
    txn.produce(topic, 0, [b"txn-1"])
    wait_tiered(broker.url, topic)
    txn.end(commit=True)
    wait_tiered(broker.url, topic)
    gone = Txn(broker.url, f"{topic}-a")
    gone.produce(topic, 0, [b"gone"])
    gone.end(commit=False)
    produce(broker.url, topic, 0, [b"plain-3"])
    wait_tiered(broker.url, topic)
    uri = table_info(broker.url, topic)["uri"]
    assert jvm.topic_table(spark, uri, rows="plain").count() >= 2  # the first file at least
    before = _values(spark, topic)
    assert before == [(0, b"plain-1"), (0, b"plain-2"), (0, b"txn-1"), (0, b"plain-3")]
    all_before = spark.sql(f"SELECT offset FROM `{topic}_all` ORDER BY offset").collect()

    assert len(DeltaTable(uri).file_uris()) >= 4
    (report,) = run_job(compaction.main, "--data", str(broker.data_dir), "--servers", broker.url,
                        "--topic", topic, "--engine", "local")
    assert report["files_added"] == 1, report
    assert len(DeltaTable(uri).file_uris()) == 1
    assert jvm.topic_table(spark, uri, rows="plain").count() == 0  # one merged file, marked
    assert _values(spark, topic) == before
    assert spark.sql(f"SELECT offset FROM `{topic}_all` ORDER BY offset").collect() == all_before
    _no_follower(spark)


def test_a_topic_made_again_under_its_name(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    _register(spark, broker, topic)
    txn = Txn(broker.url, f"{topic}-old")
    txn.produce(topic, 0, [b"old-txn"])
    txn.end(commit=True)
    produce(broker.url, topic, 0, [b"old-plain"])
    wait_tiered(broker.url, topic)
    assert _values(spark, topic) == [(0, b"old-txn"), (0, b"old-plain")]
    uri = table_info(broker.url, topic)["uri"]
    delete_topic(broker.url, topic, uri)
    with pytest.raises(Exception, match="is not a Delta table"):  # no follower dropped the view
        _values(spark, topic)

    make_again(make_topic, topic)
    assert table_info(broker.url, topic)["uri"] == uri
    # The new topic's open transaction hides the record after it; nothing old shows.
    new = Txn(broker.url, f"{topic}-new")
    new.produce(topic, 0, [b"new-txn"])
    produce(broker.url, topic, 0, [b"new-plain"])
    wait_tiered(broker.url, topic)
    assert _values(spark, topic) == []
    new.end(commit=True)
    wait_tiered(broker.url, topic)
    assert _values(spark, topic) == [(0, b"new-txn"), (0, b"new-plain")]
    _no_follower(spark)


def test_a_topic_without_transactions_plans_no_work_for_them(spark: Any, broker: Any, make_topic: Any) -> None:
    """The transactional part reads only marked files: none here, so its scans list no
    file, and Spark's adaptive execution drops the window and the anti-joins of the last
    stable offset from the plan it runs (what keeps benchmark 6's GROUP BY at the cost
    of the view without them)."""
    topic = make_topic(partitions=2)
    _register(spark, broker, topic)
    produce(broker.url, topic, 0, [b"a", b"b"])
    produce(broker.url, topic, 1, [b"c"])
    wait_tiered(broker.url, topic)
    uri = table_info(broker.url, topic)["uri"]
    assert jvm.topic_table(spark, uri, rows="marked").inputFiles() == []
    query = spark.sql(f"SELECT partition, count(*) AS n FROM `{topic}` GROUP BY partition ORDER BY partition")
    assert [(r.partition, r.n) for r in query.collect()] == [(0, 2), (1, 1)]
    plan = query._jdf.queryExecution().executedPlan().toString()
    ran, planned = plan.split("== Final Plan ==")[1].split("== Initial Plan ==")
    assert "Window" in planned and "LeftAnti" in planned
    assert "Window" not in ran and "LeftAnti" not in ran and "FileScan parquet" in ran
