"""``spark.read.format("laketail")``: rows equal what was produced, with the Kafka
source's columns, offsets, headers, isolation, data loss and group commits."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import httpx
import pytest

from laketail.spark.columns import source_ddl
from tests.spark.support import Txn, produce, read, retain_after_first_file, table_info, wait_tiered


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


@pytest.fixture
def two_partitions(broker: Any, make_topic: Any) -> tuple[str, dict[int, list[bytes]]]:
    """A two-partition topic: 30 records in partition 0 (three produce requests, so
    three table files) and 12 in partition 1, all tiered."""
    topic = make_topic(partitions=2)
    produced = {0: values("a", 30), 1: values("b", 12)}
    for chunk in range(3):
        produce(broker.url, topic, 0, produced[0][chunk * 10:(chunk + 1) * 10], keys=values("k", 10))
        wait_tiered(broker.url, topic)
    produce(broker.url, topic, 1, produced[1])
    wait_tiered(broker.url, topic)
    return topic, produced


def test_batch_read_returns_what_was_produced(spark: Any, broker: Any, two_partitions: Any) -> None:
    topic, produced = two_partitions
    frame = (spark.read.format("laketail").option("laketail.servers", broker.url)
             .option("subscribe", topic).load())
    assert frame.schema.simpleString() == spark.createDataFrame([], source_ddl(False)).schema.simpleString()
    rows = sorted(frame.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.partition, r.offset, bytes(r.value)) for r in rows] == (
        [(0, i, v) for i, v in enumerate(produced[0])] + [(1, i, v) for i, v in enumerate(produced[1])]
    )
    assert {r.topic for r in rows} == {topic}
    assert [bytes(r.key) for r in rows if r.partition == 0] == values("k", 10) * 3
    assert all(r.key is None for r in rows if r.partition == 1)
    assert all(r.timestampType == 0 and isinstance(r.timestamp, dt.datetime) for r in rows)


def test_starting_and_ending_offsets(spark: Any, broker: Any, two_partitions: Any) -> None:
    topic, produced = two_partitions
    got = read(spark, broker.url, topic,
               startingOffsets=json.dumps({topic: {"0": 12, "1": -2}}),
               endingOffsets=json.dumps({topic: {"0": 25, "1": 3}}))
    assert [(p, o) for p, o, _, _ in got] == [(0, o) for o in range(12, 25)] + [(1, o) for o in range(3)]
    assert [v for p, _, _, v in got if p == 0] == produced[0][12:25]
    latest = read(spark, broker.url, topic, startingOffsets=json.dumps({topic: {"0": -1, "1": 11}}))
    assert [(p, o) for p, o, _, _ in latest] == [(1, 11)]


def test_assign_pattern_and_min_partitions(spark: Any, broker: Any, two_partitions: Any) -> None:
    topic, produced = two_partitions
    reader = spark.read.format("laketail").option("laketail.servers", broker.url)
    assigned = reader.option("assign", json.dumps({topic: [1]})).load()
    assert assigned.count() == len(produced[1])
    by_pattern = (spark.read.format("laketail").option("laketail.servers", broker.url)
                  .option("subscribePattern", topic.replace("-", ".")).option("minPartitions", "7").load())
    assert by_pattern.rdd.getNumPartitions() >= 7
    rows = by_pattern.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == (
        [(0, o) for o in range(30)] + [(1, o) for o in range(12)]
    )


def test_headers_only_with_include_headers(spark: Any, broker: Any, topic: str) -> None:
    headers = [[("trace", b"t1"), ("empty", None)], None, []]
    produce(broker.url, topic, 0, values("h", 3), headers=[
        None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers
    ])
    plain = spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic).load()
    assert "headers" not in plain.columns
    rows = (spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic)
            .option("includeHeaders", "true").load().orderBy("offset").collect())
    got = [None if r.headers is None else [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers]
           for r in rows]
    assert got == headers


def test_records_not_tiered_yet_come_through_the_gateway(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={"table.flush.interval.ms": "3600000"})
    produce(broker.url, topic, 0, values("hot", 20))
    assert table_info(broker.url, topic)["partitions"][0]["tiered_offset"] == 0
    assert [v for _, _, _, v in read(spark, broker.url, topic)] == values("hot", 20)
    got = read(spark, broker.url, topic, startingOffsets=json.dumps({topic: {"0": 5}}),
               endingOffsets=json.dumps({topic: {"0": 8}}))
    assert [o for _, o, _, _ in got] == [5, 6, 7]


def test_starting_by_timestamp(spark: Any, broker: Any, topic: str) -> None:
    produce(broker.url, topic, 0, values("ts", 6), timestamps_ms=[1000, 2000, 3000, 4000, 5000, 6000])
    wait_tiered(broker.url, topic)
    got = read(spark, broker.url, topic, startingTimestamp="3500")
    assert [o for _, o, _, _ in got] == [3, 4, 5]
    got = read(spark, broker.url, topic, startingOffsetsByTimestamp=json.dumps({topic: {"0": 2000}}))
    assert [o for _, o, _, _ in got] == [1, 2, 3, 4, 5]
    with pytest.raises(Exception, match="no record"):
        read(spark, broker.url, topic, startingTimestamp="9000")
    assert read(spark, broker.url, topic, startingTimestamp="9000", startingOffsetsByTimestampStrategy="latest") == []


def test_read_committed_hides_aborted_records(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    produce(broker.url, topic, 0, [b"plain-0"])
    aborted = Txn(broker.url, f"{topic}-a")
    aborted.produce(topic, 0, [b"gone-1", b"gone-2"])
    committed = Txn(broker.url, f"{topic}-c")
    committed.produce(topic, 0, [b"kept-1"])
    committed.produce(topic, 1, [b"kept-2"])
    aborted.produce(topic, 1, [b"gone-3"])
    committed.end(commit=True)
    aborted.end(commit=False)
    produce(broker.url, topic, 0, [b"plain-1"])
    expected = {b"plain-0", b"kept-1", b"kept-2", b"plain-1"}
    # Markers may still be in the hot tier (the gateway decides), then in files.
    assert {v for *_, v in read(spark, broker.url, topic)} == expected
    wait_tiered(broker.url, topic)
    assert {v for *_, v in read(spark, broker.url, topic)} == expected
    everything = {v for *_, v in read(spark, broker.url, topic, **{"isolation.level": "read_uncommitted"})}
    assert everything == expected | {b"gone-1", b"gone-2", b"gone-3"}


def test_read_committed_stops_at_an_open_transaction(spark: Any, broker: Any, topic: str) -> None:
    produce(broker.url, topic, 0, [b"before"])
    txn = Txn(broker.url, f"{topic}-open")
    txn.produce(topic, 0, [b"pending"])
    produce(broker.url, topic, 0, [b"after"])
    wait_tiered(broker.url, topic)
    assert [v for *_, v in read(spark, broker.url, topic)] == [b"before"]
    uncommitted = read(spark, broker.url, topic, **{"isolation.level": "read_uncommitted"})
    assert [v for *_, v in uncommitted] == [b"before", b"pending", b"after"]
    txn.end(commit=True)
    assert [v for *_, v in read(spark, broker.url, topic)] == [b"before", b"pending", b"after"]


def test_fail_on_data_loss_names_what_was_lost(spark: Any, broker: Any, topic: str) -> None:
    produce(broker.url, topic, 0, values("old", 10))
    wait_tiered(broker.url, topic)
    produce(broker.url, topic, 0, values("new", 5))
    wait_tiered(broker.url, topic)
    retain_after_first_file(broker.data_dir, topic)
    start = json.dumps({topic: {"0": 3}})
    with pytest.raises(Exception, match=rf"{topic}-0 offsets \[3, 10\)"):
        read(spark, broker.url, topic, startingOffsets=start)
    got = read(spark, broker.url, topic, startingOffsets=start, failOnDataLoss="false")
    assert [o for _, o, _, _ in got] == list(range(10, 15))
    assert [o for _, o, _, _ in read(spark, broker.url, topic)] == list(range(10, 15))  # earliest: the log start


def test_group_id_commits_each_partition_end(spark: Any, broker: Any, two_partitions: Any) -> None:
    topic, _ = two_partitions
    group = f"{topic}-g"
    assert len(read(spark, broker.url, topic, groupId=group,
                    endingOffsets=json.dumps({topic: {"0": 20, "1": -1}}))) == 32
    resp = httpx.get(f"{broker.url}{broker.rest.v3(f'/consumer-groups/{group}/lags')}", timeout=60)
    assert resp.status_code == 200, resp.text
    lags = {(d["topic_name"], d["partition_id"]): d for d in resp.json()["data"]}
    assert lags[(topic, 0)]["current_offset"] == 20 and lags[(topic, 0)]["lag"] == 10
    assert lags[(topic, 1)]["current_offset"] == 12 and lags[(topic, 1)]["lag"] == 0


def test_a_transaction_whose_end_is_not_tiered_is_decided_by_the_gateway(
    spark: Any, broker: Any, make_topic: Any
) -> None:
    topic = make_topic(partitions=2)
    kept, dropped = Txn(broker.url, f"{topic}-k"), Txn(broker.url, f"{topic}-d")
    kept.produce(topic, 0, [b"kept-1", b"kept-2"])
    dropped.produce(topic, 1, [b"gone-1"])
    produce(broker.url, topic, 0, [b"plain-0"])
    produce(broker.url, topic, 1, [b"plain-1"])
    wait_tiered(broker.url, topic)
    resp = httpx.post(f"{broker.url}{broker.rest.v3(f'/topics/{topic}/configs:alter')}", timeout=60,
                      json={"data": [{"name": "table.flush.interval.ms", "value": "3600000"}]})
    assert resp.status_code in (200, 204), resp.text
    kept.end(commit=True)
    dropped.end(commit=False)
    info = table_info(broker.url, topic)
    assert [p["tiered_offset"] for p in info["partitions"]] == [3, 2]  # records in files, markers not
    got = read(spark, broker.url, topic)
    assert [(p, v) for p, _, _, v in got] == [(0, b"kept-1"), (0, b"kept-2"), (0, b"plain-0"), (1, b"plain-1")]
