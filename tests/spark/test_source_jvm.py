"""``format("laketail")`` where laketail's jar is loaded: the jar's ``laketail.DefaultSource``,
whose batch scan (``BatchPlan``) reads the fully tiered ranges of plain table files with
Spark's Parquet reader and hands the rest to the Python source, registered as
``laketail_python``.

Every read here is made twice with the same options, through ``laketail`` (the jar) and
``laketail_python`` (the Python source alone), and both answers are compared with each
other and with what was produced. The physical plan names how the jar read it:
``laketail(N ranges by Spark's Parquet reader from F files, M by the Python source)`` or
``laketail(every range by the Python source)``; each case asserts which.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from laketail.jobs import compaction
from laketail.spark import jvm
from tests.jobs.support import run_job
from tests.spark.support import (
    Txn,
    aborted_then_committed,
    delete_topic,
    make_again,
    produce,
    retain_after_first_file,
    table_info,
    wait_tiered,
)

pytestmark = pytest.mark.skipif(jvm.jar() is None, reason="the laketail jar is not built (no javac)")

JAR = "laketail"
PYTHON = "laketail_python"
ALL_PYTHON = "every range by the Python source"
SCAN = re.compile(r"laketail\((every range by the Python source|\d+ ranges? by Spark's Parquet reader "
                  r"from \d+ files?, \d+ by the Python source)\)")
#: A record's timestamp, as produced: 1 s apart from here (CreateTime, timestampType 0).
T0_MS = 1_700_000_000_000


def load(spark: Any, source: str, url: str, **options: str) -> Any:
    reader = spark.read.format(source).option("laketail.servers", url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def both(spark: Any, url: str, **options: str) -> tuple[Any, Any]:
    """The same read through the jar and through the Python source alone."""
    return load(spark, JAR, url, **options), load(spark, PYTHON, url, **options)


def scan(frame: Any) -> str:
    """How the jar's scan reads ``frame``, from its physical plan: the one ``laketail(...)``."""
    plan = frame._jdf.queryExecution().executedPlan().toString()
    found = SCAN.findall(plan)
    assert len(found) == 1, plan
    return str(found[0])


def parquet(ranges: int, files: int, tails: int) -> str:
    """The scan of ``ranges`` heads read from ``files`` table files and ``tails`` Python tails."""
    def count(n: int, noun: str) -> str:
        return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

    return (f"{count(ranges, 'range')} by Spark's Parquet reader from {count(files, 'file')}, "
            f"{tails} by the Python source")


def plain(value: Any) -> Any:
    """A collected value as comparable Python: bytes for binary, tuples for structs."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):  # a Row
        return tuple(plain(v) for v in value)
    return value


def rows(frame: Any) -> list[dict[str, Any]]:
    """Every row as {column: value}, in (topic, partition, offset) order where those are read."""
    out = [{name: plain(row[name]) for name in frame.columns} for row in frame.collect()]
    return sorted(out, key=lambda r: tuple(r.get(c, 0) for c in ("topic", "partition", "offset")))


def timestamp(ms: int) -> dt.datetime:
    """``ms`` as PySpark collects a TimestampType (naive, in this process's local time)."""
    return dt.datetime.fromtimestamp(ms // 1000).replace(microsecond=(ms % 1000) * 1000)


def record(topic: str, partition: int, offset: int, value: bytes, key: bytes | None = None) -> dict[str, Any]:
    """The row ``format("laketail")`` reads for a record produced with :func:`produce_at`."""
    return {"key": key, "value": value, "topic": topic, "partition": partition, "offset": offset,
            "timestamp": timestamp(T0_MS + offset * 1000), "timestampType": 0}


def produce_at(url: str, topic: str, partition: int, values: list[bytes], first: int,
               keys: list[bytes | None] | None = None, **columns: Any) -> list[int]:
    """:func:`produce` with each record's timestamp from its offset (``first`` the next one)."""
    stamps = [T0_MS + (first + i) * 1000 for i in range(len(values))]
    offsets = produce(url, topic, partition, values, keys=keys, timestamps_ms=stamps, **columns)
    assert offsets == list(range(first, first + len(values)))
    return offsets


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def values_read(frame: Any) -> list[bytes]:
    """The values ``frame`` reads, in offset order."""
    return [r["value"] for r in rows(frame)]


def set_config(url: str, topic: str, name: str, value: str) -> None:
    cluster = httpx.get(f"{url}/v3/clusters", timeout=30).json()["data"][0]["cluster_id"]
    resp = httpx.post(f"{url}/v3/clusters/{cluster}/topics/{topic}/configs:alter", timeout=60,
                      json={"data": [{"name": name, "value": value}]})
    assert resp.status_code in (200, 204), resp.text


class Tiered:
    """A two-partition topic, fully tiered: partition 0 holds 30 keyed records in three
    files (three produce requests, each tiered before the next), partition 1 twelve
    records without keys in one file. Tests only read it."""

    def __init__(self, url: str, topic: str) -> None:
        self.url = url
        self.topic = topic
        for chunk in range(3):
            first = chunk * 10
            produce_at(url, topic, 0, values("a", 30)[first:first + 10], first, keys=values("k", 10))
            wait_tiered(url, topic)
        produce_at(url, topic, 1, values("b", 12), 0)
        wait_tiered(url, topic)
        keys = values("k", 10) * 3
        self.expected = ([record(topic, 0, o, v, k) for o, (v, k) in enumerate(zip(values("a", 30), keys))]
                         + [record(topic, 1, o, v) for o, v in enumerate(values("b", 12))])

    def between(self, starts: dict[int, int], ends: dict[int, int]) -> list[dict[str, Any]]:
        return [r for r in self.expected if starts[r["partition"]] <= r["offset"] < ends[r["partition"]]]


@pytest.fixture(scope="module")
def tiered(broker: Any) -> Tiered:
    """One :class:`Tiered` topic for the module's read-only cases (made once: ~4 s of tiering)."""
    topic = f"jvm-source-{uuid.uuid4().hex[:10]}"
    resp = broker.rest.create_topic(topic, 2, configs={"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text
    return Tiered(broker.url, topic)


# -- 1, 10: the jar's path, whole topics ---------------------------------------------------------


def test_the_jar_answers_format_laketail_in_local_sessions(spark: Any, tiered: Tiered) -> None:
    assert str(jvm.jar()) in spark.conf.get("spark.jars")
    frame = (spark.read.format("laketail").option("laketail.servers", tiered.url)
             .option("subscribe", tiered.topic).load())
    assert "by Spark's Parquet reader" in scan(frame)
    assert len(frame.collect()) == len(tiered.expected) == 42


def test_a_tiered_topic_every_column_as_produced(spark: Any, tiered: Tiered) -> None:
    jar, python = both(spark, tiered.url, subscribe=tiered.topic)
    assert jar.schema == python.schema
    assert jar.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    got = rows(jar)
    assert got == rows(python)
    assert got == tiered.expected
    assert scan(jar) == parquet(2, 4, 0)


def test_log_append_time_null_keys_and_values(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={"message.timestamp.type": "LogAppendTime"})
    produce(broker.url, topic, 0, [b"v", None, b""], keys=[None, b"k", b""])
    wait_tiered(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic)
    got = rows(jar)
    assert got == rows(python)
    assert [(r["key"], r["value"], r["timestampType"]) for r in got] == [
        (None, b"v", 1), (b"k", None, 1), (b"", b"", 1)]
    assert scan(jar) == parquet(1, 1, 0)


def test_two_topics_in_one_read(spark: Any, tiered: Tiered, make_topic: Any) -> None:
    other = make_topic()
    produce_at(tiered.url, other, 0, values("o", 3), 0)
    wait_tiered(tiered.url, other)
    expected = sorted(tiered.expected + [record(other, 0, o, v) for o, v in enumerate(values("o", 3))],
                      key=lambda r: (r["topic"], r["partition"], r["offset"]))
    jar, python = both(spark, tiered.url, subscribe=f"{tiered.topic},{other}")
    assert rows(jar) == rows(python) == expected
    assert scan(jar) == parquet(3, 5, 0)
    starts = json.dumps({tiered.topic: {"0": 25, "1": -2}, other: {"0": 1}})
    jar, python = both(spark, tiered.url, assign=json.dumps({tiered.topic: [0, 1], other: [0]}), startingOffsets=starts)
    assert rows(jar) == rows(python) == [
        r for r in expected if r["offset"] >= {tiered.topic: {0: 25, 1: 0}, other: {0: 1}}[r["topic"]][r["partition"]]]
    assert scan(jar) == parquet(3, 3, 0)


def test_an_empty_topic_and_a_server_down(spark: Any, tiered: Tiered, topic: str) -> None:
    jar, python = both(spark, tiered.url, subscribe=topic)
    assert rows(jar) == rows(python) == []
    assert scan(jar) == ALL_PYTHON  # nothing to read: no plain head
    # The first of laketail.servers refuses connections: both ask the next one.
    servers = f"http://127.0.0.1:1,{tiered.url}"
    jar, python = (spark.read.format(source).option("laketail.servers", servers)
                   .option("subscribe", tiered.topic).load() for source in (JAR, PYTHON))
    assert rows(jar) == rows(python) == tiered.expected
    assert scan(jar) == parquet(2, 4, 0)


def test_concurrent_reads_from_threads(spark: Any, tiered: Tiered) -> None:
    """Queries planned at once on several threads share the jar's cache of table logs."""
    t = tiered.topic
    reads = [({"subscribe": t}, tiered.expected),
             ({"subscribe": t, "startingOffsets": json.dumps({t: {"0": 15, "1": 2}})},
              tiered.between({0: 15, 1: 2}, {0: 30, 1: 12})),
             ({"assign": json.dumps({t: [0]}), "endingOffsets": json.dumps({t: {"0": 21}})},
              tiered.between({0: 0, 1: 12}, {0: 21, 1: 12}))] * 2

    def read(options: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
        frame = load(spark, JAR, tiered.url, **options)
        return scan(frame), rows(frame)

    with ThreadPoolExecutor(max_workers=3) as pool:
        got = list(pool.map(read, [options for options, _ in reads]))
    assert [r for _, r in got] == [expected for _, expected in reads]
    assert all("by Spark's Parquet reader" in plan and plan.endswith(", 0 by the Python source") for plan, _ in got)


# -- 2: JSON offsets inside files ------------------------------------------------------------------


def test_json_offsets_in_the_middle_of_files(spark: Any, tiered: Tiered) -> None:
    t = tiered.topic
    starts, ends = {0: 12, 1: 0}, {0: 25, 1: 3}
    jar, python = both(spark, tiered.url, subscribe=t,
                       startingOffsets=json.dumps({t: {"0": 12, "1": -2}}),
                       endingOffsets=json.dumps({t: {"0": 25, "1": 3}}))
    got = rows(jar)
    assert got == rows(python) == tiered.between(starts, ends)
    assert scan(jar) == parquet(2, 3, 0)  # partition 0's files 2 and 3 straddle, partition 1's one
    # A range on file boundaries and one inside a single file; -1 ends at the high watermark.
    jar, python = both(spark, tiered.url, assign=json.dumps({t: [0, 1]}),
                       startingOffsets=json.dumps({t: {"0": 10, "1": 5}}),
                       endingOffsets=json.dumps({t: {"0": 20, "1": -1}}))
    assert rows(jar) == rows(python) == tiered.between({0: 10, 1: 5}, {0: 20, 1: 12})
    assert scan(jar) == parquet(2, 2, 0)
    # One partition of two assigned.
    jar, python = both(spark, tiered.url, assign=json.dumps({t: [1]}))
    assert rows(jar) == rows(python) == [r for r in tiered.expected if r["partition"] == 1]
    assert scan(jar) == parquet(1, 1, 0)
    # An empty range (start == end) reads nothing from its partition.
    jar, python = both(spark, tiered.url, subscribe=t,
                       startingOffsets=json.dumps({t: {"0": 7, "1": 12}}),
                       endingOffsets=json.dumps({t: {"0": 9, "1": 12}}))
    assert rows(jar) == rows(python) == tiered.between({0: 7, 1: 12}, {0: 9, 1: 12})
    assert scan(jar) == parquet(1, 1, 0)


# -- 3: a tiered head, an untiered tail ------------------------------------------------------------

def tiered_then_hot(url: str, topic: str) -> list[dict[str, Any]]:
    """Ten records tiered, then the topic's tiering put off for an hour and five more produced:
    tiered offset 10, high watermark 15. The rows a read of all of it returns."""
    produce_at(url, topic, 0, values("cold", 10), 0)
    wait_tiered(url, topic)
    set_config(url, topic, "table.flush.interval.ms", "3600000")
    produce_at(url, topic, 0, values("hot", 5), 10)
    partition = table_info(url, topic)["partitions"][0]
    assert (partition["tiered_offset"], partition["high_watermark"]) == (10, 15)
    return [record(topic, 0, o, v) for o, v in enumerate(values("cold", 10) + values("hot", 5))]


@pytest.mark.parametrize("bounds", [None, (4, 12)], ids=["everything", "file-middle-to-tail-middle"])
def test_a_tiered_head_and_an_untiered_tail(spark: Any, broker: Any, make_topic: Any,
                                           bounds: tuple[int, int] | None) -> None:
    topic = make_topic()
    expected = tiered_then_hot(broker.url, topic)
    options = {"subscribe": topic}
    if bounds is not None:
        options["startingOffsets"] = json.dumps({topic: {"0": bounds[0]}})
        options["endingOffsets"] = json.dumps({topic: {"0": bounds[1]}})
        expected = expected[bounds[0]:bounds[1]]
    jar, python = both(spark, broker.url, **options)
    assert scan(jar) == parquet(1, 1, 1)
    assert rows(python) == expected
    assert rows(jar) == expected


def test_headers_and_columns_across_head_and_tail(spark: Any, broker: Any, make_topic: Any) -> None:
    """Partition 0 split between a tiered file and an untiered tail, partition 1 all tiered:
    the tail's assign names partition 0 alone; headers and pruned columns line up in the union."""
    topic = make_topic(partitions=2)
    expected: list[tuple[int, bytes, list[tuple[str, bytes]]]] = []

    def produce_with_headers(partition: int, prefix: str, n: int, first: int) -> None:
        headers = [[(f"{prefix}-h", f"{first + i}".encode())] for i in range(n)]
        produce_at(broker.url, topic, partition, values(prefix, n), first,
                   headers=[[{"key": k, "value": v} for k, v in h] for h in headers])
        expected.extend((partition, v, h) for v, h in zip(values(prefix, n), headers))

    produce_with_headers(0, "cold", 4, 0)
    produce_with_headers(1, "one", 3, 0)
    wait_tiered(broker.url, topic)
    set_config(broker.url, topic, "table.flush.interval.ms", "3600000")
    produce_with_headers(0, "hot", 2, 4)
    assert [p["tiered_offset"] for p in table_info(broker.url, topic)["partitions"]] == [4, 3]
    jar, python = both(spark, broker.url, subscribe=topic, includeHeaders="true")
    assert scan(jar) == parquet(2, 2, 1)
    got = rows(jar)
    assert got == rows(python)
    assert [(r["partition"], r["value"], r["headers"]) for r in got] == sorted(expected, key=lambda e: e[0])
    pruned = jar.select("partition", "offset", "headers")
    assert rows(pruned) == rows(python.select("partition", "offset", "headers"))
    assert scan(pruned) == parquet(2, 2, 1)


def test_a_range_all_untiered_is_the_python_sources(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    expected = tiered_then_hot(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 10}}))
    assert rows(jar) == rows(python) == expected[10:]
    assert scan(jar) == ALL_PYTHON  # no plain head: the whole read as it is
    # The tiered part alone is Parquet's only.
    jar, python = both(spark, broker.url, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 10}}))
    assert rows(jar) == rows(python) == expected[:10]
    assert scan(jar) == parquet(1, 1, 0)


# -- 4: transactions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_transactions_as_the_python_source_reads_them(spark: Any, broker: Any, make_topic: Any,
                                                      isolation: str) -> None:
    topic = make_topic()
    produce(broker.url, topic, 0, [b"plain-0", b"plain-1"])
    wait_tiered(broker.url, topic)
    aborted_then_committed(broker.url, topic)  # offsets 2-3 aborted, 4 its marker, 5 kept, 6 its marker
    wait_tiered(broker.url, topic)
    produce(broker.url, topic, 0, [b"plain-2"])
    wait_tiered(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic, **{"kafka.isolation.level": isolation})
    # The plain file before the transactions is Parquet's; from the first marked file on, Python's.
    assert scan(jar) == parquet(1, 1, 1)
    aborted = [b"gone-1", b"gone-2"] if isolation == "read_uncommitted" else []
    assert values_read(python) == [b"plain-0", b"plain-1", *aborted, b"kept", b"plain-2"]
    assert rows(jar) == rows(python)


def open_transaction(url: str, topic: str) -> Txn:
    """``before`` (a plain file), then ``pending`` in a transaction left open and ``after``, all
    tiered: the last stable offset is 1."""
    produce(url, topic, 0, [b"before"])
    wait_tiered(url, topic)
    txn = Txn(url, f"{topic}-open")
    txn.produce(topic, 0, [b"pending"])
    produce(url, topic, 0, [b"after"])
    wait_tiered(url, topic)
    assert table_info(url, topic)["partitions"][0]["last_stable_offset"] == 1
    return txn


def test_read_committed_stops_at_an_open_transaction_as_python_does(
    spark: Any, broker: Any, make_topic: Any
) -> None:
    topic = make_topic()
    open_transaction(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic)
    assert rows(jar) == rows(python)
    assert values_read(jar) == [b"before"]
    assert scan(jar) == parquet(1, 1, 0)  # [0, LSO) is the plain file's


def test_an_open_transaction_read_uncommitted_then_committed(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    txn = open_transaction(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic, **{"isolation.level": "read_uncommitted"})
    assert scan(jar) == parquet(1, 1, 1)
    assert values_read(python) == [b"before", b"pending", b"after"]
    assert rows(jar) == rows(python)
    txn.end(commit=True)
    wait_tiered(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic)
    assert values_read(python) == [b"before", b"pending", b"after"]
    assert rows(jar) == rows(python)


# -- 5: headers --------------------------------------------------------------------------------------


def test_headers_as_the_python_source_reads_them(spark: Any, broker: Any, topic: str) -> None:
    produced = [[("trace", b"t1"), ("empty", None)], None, [], [("dup", b"1"), ("dup", b"2")]]
    produce_at(broker.url, topic, 0, values("h", 4), 0,
               headers=[None if h is None else [{"key": k, "value": v} for k, v in h] for h in produced])
    wait_tiered(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic, includeHeaders="true")
    assert jar.schema == python.schema
    got = rows(jar)
    assert got == rows(python)
    assert [r["headers"] for r in got] == [None if h is None else [tuple(x) for x in h] for h in produced]
    assert [r["value"] for r in got] == values("h", 4)
    assert scan(jar) == parquet(1, 1, 0)
    assert "headers" not in load(spark, JAR, broker.url, subscribe=topic).columns


# -- 6: columns and filters --------------------------------------------------------------------------


def test_pruned_columns_counts_and_filters(spark: Any, tiered: Tiered) -> None:
    jar, python = both(spark, tiered.url, subscribe=tiered.topic)
    only_values = jar.select("value")
    plan = only_values._jdf.queryExecution().executedPlan().toString()
    assert "ReadSchema: struct<value:binary>" in plan, plan
    assert sorted(bytes(r.value) for r in only_values.collect()) == sorted(r["value"] for r in tiered.expected)
    assert scan(only_values) == parquet(2, 4, 0)

    assert jar.count() == python.count() == 42
    # No column read, but the straddling files' offset filter still applies.
    middle = {"startingOffsets": json.dumps({tiered.topic: {"0": 12, "1": 5}}),
              "endingOffsets": json.dumps({tiered.topic: {"0": 25, "1": 7}})}
    jar_middle, python_middle = both(spark, tiered.url, subscribe=tiered.topic, **middle)
    assert jar_middle.count() == python_middle.count() == 13 + 2
    offsets = jar_middle.select("offset")
    assert sorted(r.offset for r in offsets.collect()) == sorted(list(range(12, 25)) + [5, 6])
    assert scan(offsets) == parquet(2, 3, 0)

    one = jar.where("partition = 1")
    assert rows(one) == rows(python.where("partition = 1")) == [r for r in tiered.expected if r["partition"] == 1]
    assert scan(one) == parquet(2, 4, 0)


def test_a_key_compacted_topic_with_gaps(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={"cleanup.policy": "compact"})
    produce_at(broker.url, topic, 0, values("r0-", 4), 0, keys=values("k", 4))
    wait_tiered(broker.url, topic)
    produce_at(broker.url, topic, 0, values("r1-", 2), 4, keys=values("k", 2))
    wait_tiered(broker.url, topic)
    (report,) = run_job(compaction.main, "--data", str(broker.data_dir), "--servers", broker.url,
                        "--topic", topic, "--engine", "local")
    assert report["files_added"] == 1, report
    kept = [record(topic, 0, o, v, k) for o, v, k in
            [(2, b"r0-2", b"k2"), (3, b"r0-3", b"k3"), (4, b"r1-0", b"k0"), (5, b"r1-1", b"k1")]]
    jar, python = both(spark, broker.url, subscribe=topic)
    assert rows(jar) == rows(python) == kept
    assert scan(jar) == parquet(1, 1, 0)
    # Starting at an offset compaction removed, and inside the merged file.
    for start, expected in ((1, kept), (3, kept[1:])):
        jar, python = both(spark, broker.url, subscribe=topic, startingOffsets=json.dumps({topic: {"0": start}}))
        assert rows(jar) == rows(python) == expected
        assert scan(jar) == parquet(1, 1, 0)


# -- 7: what goes to the Python source whole ---------------------------------------------------------


@pytest.mark.parametrize("options", [
    pytest.param({"subscribePattern": "{topic}"}, id="subscribePattern"),
    pytest.param({"subscribe": "{topic}", "minPartitions": "5"}, id="minPartitions"),
    pytest.param({"subscribe": "{topic}", "groupId": "{topic}-g"}, id="groupId"),
])
def test_options_it_does_not_plan_go_to_python_whole(spark: Any, tiered: Tiered, options: dict[str, str]) -> None:
    resolved = {k: v.format(topic=re.escape(tiered.topic)) if k == "subscribePattern" else v.format(topic=tiered.topic)
                for k, v in options.items()}
    jar, python = both(spark, tiered.url, **resolved)
    assert rows(jar) == rows(python) == tiered.expected
    assert scan(jar) == ALL_PYTHON


def test_a_json_spec_naming_some_partitions_fails_as_kafka_says(spark: Any, tiered: Tiered) -> None:
    t = tiered.topic
    for source in (JAR, PYTHON):
        with pytest.raises(Exception, match="you must specify all TopicPartitions") as caught:
            load(spark, source, tiered.url, subscribe=t, startingOffsets=json.dumps({t: {"0": 0}})).collect()
        assert f"Assigned: [{t}-0, {t}-1]" in str(caught.value)


def test_data_loss_below_the_log_start(spark: Any, broker: Any, topic: str) -> None:
    produce_at(broker.url, topic, 0, values("old", 10), 0)
    wait_tiered(broker.url, topic)
    produce_at(broker.url, topic, 0, values("new", 5), 10)
    wait_tiered(broker.url, topic)
    retain_after_first_file(broker.data_dir, topic)
    start = json.dumps({topic: {"0": 3}})
    for source in (JAR, PYTHON):
        with pytest.raises(Exception, match=rf"{topic}-0 offsets \[3, 10\)"):
            load(spark, source, broker.url, subscribe=topic, startingOffsets=start).collect()
    expected = [record(topic, 0, o, v) for o, v in enumerate(values("old", 10) + values("new", 5))][10:]
    jar, python = both(spark, broker.url, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert rows(jar) == rows(python) == expected
    assert scan(jar) == ALL_PYTHON  # an offset outside the log is the Python source's to resolve
    jar, python = both(spark, broker.url, subscribe=topic)  # earliest: the log start, 10
    assert rows(jar) == rows(python) == expected
    assert scan(jar) == parquet(1, 1, 0)


def test_an_unknown_topic_fails_as_in_the_python_source(spark: Any, broker: Any) -> None:
    missing = f"missing-{uuid.uuid4().hex[:10]}"
    errors = []
    for source in (JAR, PYTHON):
        with pytest.raises(Exception) as caught:
            load(spark, source, broker.url, subscribe=missing).collect()
        errors.append(caught.value)
    jar, python = errors
    assert type(jar) is type(python)
    assert str(jar) == str(python)  # the Python source's own error, raised by the same planner
    assert f"UNKNOWN_TOPIC_OR_PARTITION: topic '{missing}' does not exist" in str(jar)


def outcome(frame: Any) -> tuple[str, Any]:
    """``("rows", rows)`` or ``("error", its class name and message)`` of collecting ``frame``."""
    try:
        return "rows", rows(frame)
    except Exception as exc:  # the error itself is what is compared
        return "error", (type(exc).__name__, str(exc))


@pytest.mark.parametrize("options, message", [
    ({"failOnDataLoss": "maybe"}, "option 'failondataloss' must be true or false"),
    ({"includeHeaders": "yes"}, "option 'includeheaders' must be true or false"),
    ({"isolation.level": "READ_COMMITTED"}, "isolation.level must be read_committed or read_uncommitted"),
    ({"startingOffsets": "latest"}, "startingOffsets=latest is for streaming queries"),
    ({"endingOffsets": '{"T": {"0": -2, "1": -1}}'}, "endingOffsets cannot be -2"),
    ({"startingOffsets": '{"T": {"0": 20, "1": 0}}', "endingOffsets": '{"T": {"0": 10, "1": 12}}'},
     "startingOffsets 20 is after endingOffsets 10"),
    ({"startingOffsets": '{"T": {"0": -5, "1": 0}}'}, "is out of range"),
    ({"assign": '{"T": [0]}'}, "exactly one of 'subscribe', 'subscribePattern' or 'assign'"),
], ids=["failOnDataLoss", "includeHeaders", "isolation", "latest-start", "earliest-end", "start-after-end",
        "below-minus-2", "subscribe-and-assign"])
def test_bad_options_fail_as_in_the_python_source(spark: Any, tiered: Tiered, options: dict[str, str],
                                                  message: str) -> None:
    given = {k: v.replace('"T"', json.dumps(tiered.topic)) for k, v in options.items()}
    jar, python = (outcome(load(spark, source, tiered.url, subscribe=tiered.topic, **given))
                   for source in (JAR, PYTHON))
    assert python[0] == "error" and message in python[1][1], python
    assert jar == python


# -- 8, 9: views and topics made again ---------------------------------------------------------------


def test_a_view_using_laketail_is_fresh_at_every_query(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    produce_at(broker.url, topic, 0, values("a", 3), 0)
    produce_at(broker.url, topic, 1, values("b", 2), 0)
    wait_tiered(broker.url, topic)
    view = f"v_{topic.replace('-', '_')}"
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} USING laketail "
              f"OPTIONS ('laketail.servers' '{broker.url}', subscribe '{topic}')")
    query = f"SELECT partition, offset, value FROM {view}"
    first = spark.sql(query)
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in first.collect()) == (
        [(0, o, v) for o, v in enumerate(values("a", 3))] + [(1, o, v) for o, v in enumerate(values("b", 2))])
    assert scan(first) == parquet(2, 2, 0)

    produce_at(broker.url, topic, 0, values("a", 5)[3:], 3)
    produce_at(broker.url, topic, 1, values("b", 4)[2:], 2)
    wait_tiered(broker.url, topic)
    again = spark.sql(query)
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in again.collect())
    assert got == [(0, o, v) for o, v in enumerate(values("a", 5))] + [(1, o, v) for o, v in enumerate(values("b", 4))]
    assert got == sorted((r["partition"], r["offset"], r["value"])
                         for r in rows(load(spark, PYTHON, broker.url, subscribe=topic)))
    assert scan(again) == parquet(2, 4, 0)


#: Spark's PythonDataSourceV2 keeps the Python data source and read it made for its first scan's
#: options; a tail read through one shared provider repeated the first query's tail (15 rows, not
#: 18) or, after a first read by the Python source whole, the user's whole range (25, not 15).
@pytest.mark.parametrize("how", ["view", "dataframe"])
def test_a_python_tail_is_fresh_at_every_query(spark: Any, broker: Any, make_topic: Any, how: str) -> None:
    topic = make_topic()
    expected = tiered_then_hot(broker.url, topic)
    frames = {}
    for source in (JAR, PYTHON):
        if how == "view":
            view = f"{source}_{topic.replace('-', '_')}"
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} USING {source} "
                      f"OPTIONS ('laketail.servers' '{broker.url}', subscribe '{topic}')")
            frames[source] = lambda view=view: spark.sql(f"SELECT * FROM {view}")
        else:
            frame = load(spark, source, broker.url, subscribe=topic)
            frames[source] = lambda frame=frame: frame.select("*")  # a new query over the same relation
    first = frames[JAR]()
    assert rows(first) == rows(frames[PYTHON]()) == expected
    assert scan(first) == parquet(1, 1, 1)
    produce_at(broker.url, topic, 0, values("more", 3), 15)  # not tiered: the tail grows
    expected += [record(topic, 0, o, v) for o, v in zip(range(15, 18), values("more", 3))]
    again = frames[JAR]()
    assert scan(again) == parquet(1, 1, 1)
    assert rows(frames[PYTHON]()) == expected
    assert rows(again) == expected


def test_a_dataframe_read_whole_by_python_then_split(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={"table.flush.interval.ms": "3600000"})
    produce_at(broker.url, topic, 0, values("a", 10), 0)
    jar, python = both(spark, broker.url, subscribe=topic)
    expected = [record(topic, 0, o, v) for o, v in enumerate(values("a", 10))]
    assert rows(jar) == rows(python) == expected
    assert scan(jar) == ALL_PYTHON  # nothing tiered yet
    set_config(broker.url, topic, "table.flush.interval.ms", "100")
    wait_tiered(broker.url, topic)
    set_config(broker.url, topic, "table.flush.interval.ms", "3600000")
    produce_at(broker.url, topic, 0, values("b", 5), 10)
    expected += [record(topic, 0, o, v) for o, v in zip(range(10, 15), values("b", 5))]
    again = jar.select("*")  # a new query over the same relation: now a head and a tail
    assert scan(again) == parquet(1, 1, 1)
    assert rows(python.select("*")) == expected
    assert rows(again) == expected


@pytest.mark.parametrize("old_files", [1, 3], ids=["same-versions", "fewer-versions-after"])
def test_a_topic_made_again_reads_only_its_new_records(spark: Any, broker: Any, make_topic: Any,
                                                       old_files: int) -> None:
    topic = make_topic()
    for n in range(old_files):
        produce_at(broker.url, topic, 0, values("old", 4 * old_files)[4 * n:4 * n + 4], 4 * n)
        wait_tiered(broker.url, topic)
    old = load(spark, JAR, broker.url, subscribe=topic)
    assert values_read(old) == values("old", 4 * old_files)
    assert scan(old) == parquet(1, old_files, 0)  # the jar now holds this table's log

    delete_topic(broker.url, topic, table_info(broker.url, topic)["uri"])
    make_again(make_topic, topic)
    # One file: with one old file, the same versions, offsets and sizes as the old table's.
    produce_at(broker.url, topic, 0, values("new", 4), 0)
    wait_tiered(broker.url, topic)
    jar, python = both(spark, broker.url, subscribe=topic)
    assert rows(python) == [record(topic, 0, o, v) for o, v in enumerate(values("new", 4))]
    assert rows(jar) == rows(python)
    assert scan(jar) == parquet(1, 1, 0)
