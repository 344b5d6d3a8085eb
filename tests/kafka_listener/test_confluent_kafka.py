"""confluent-kafka (librdkafka) against a real broker's Kafka listener: the client
matrix's first column (docs/kafka-protocol.md), and interop with REST v2."""

from __future__ import annotations

import base64
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

pytestmark = pytest.mark.integration

QUIET = {"log_level": 0}  # librdkafka logs to stderr otherwise


def _topic(kafka_broker, partitions: int = 1) -> str:
    name = f"kafka-{uuid.uuid4().hex[:10]}"
    resp = kafka_broker.rest.create_topic(name, partitions)
    assert resp.status_code in (200, 201), resp.text
    return name


def _produce(bootstrap: str, topic: str, records: list[dict], **config) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET, **config})
    reports: list = []
    for r in records:
        producer.produce(topic, on_delivery=lambda err, msg: reports.append((err, msg)), **r)
    assert producer.flush(60) == 0
    return reports


def _consume(bootstrap: str, topics: list[str], count: int, **config) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                         "group.id": f"g-{uuid.uuid4().hex[:8]}", **QUIET, **config})
    consumer.subscribe(topics)
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_with_each_acks_then_consume_from_the_beginning(kafka_broker, acks):
    topic = _topic(kafka_broker)
    records = [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(20)]
    reports = _produce(kafka_broker.bootstrap, topic, records, acks=acks)
    assert [err for err, _ in reports] == [None] * 20
    if acks != "0":  # acks=0: the client never learns an offset
        assert [m.offset() for _, m in reports] == list(range(20))
    got = _consume(kafka_broker.bootstrap, [topic], 20)
    assert [(m.key(), m.value(), m.offset()) for m in got] == [(b"k%d" % i, b"v%d" % i, i) for i in range(20)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec(kafka_broker, codec):
    topic = _topic(kafka_broker)
    records = [{"value": b"value-%d" % i * 20} for i in range(100)]
    reports = _produce(kafka_broker.bootstrap, topic, records, **{"compression.type": codec, "linger.ms": 50})
    assert all(err is None for err, _ in reports)
    got = _consume(kafka_broker.bootstrap, [topic], 100)
    assert [m.value() for m in got] == [r["value"] for r in records]


def test_idempotent_producer_keeps_order_and_offsets(kafka_broker):
    topic = _topic(kafka_broker, partitions=3)
    records = [{"key": b"key-%d" % (i % 5), "value": b"%d" % i} for i in range(300)]
    reports = _produce(kafka_broker.bootstrap, topic, records, **{"enable.idempotence": True, "acks": "all"})
    assert all(err is None for err, _ in reports)
    by_partition: dict[int, list[int]] = {}
    for _, m in reports:
        by_partition.setdefault(m.partition(), []).append(m.offset())
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    state = httpx.get(f"{kafka_broker.url}/v3/clusters/{kafka_broker.rest.cluster_id}/topics/{topic}/partitions")
    assert state.status_code == 200


def test_consumer_group_commits_are_the_groups_offsets(kafka_broker):
    topic = _topic(kafka_broker, partitions=2)
    _produce(kafka_broker.bootstrap, topic, [{"value": b"x", "partition": i % 2} for i in range(10)])
    group = f"group-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == 10
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
    assert sorted(tp.offset for tp in committed) == [5, 5]
    consumer.close()
    # the same group, seen over HTTP (laketail's /v1 groups API)
    resp = httpx.post(f"{kafka_broker.url}/v1/groups/{group}/committed",
                      json={"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]})
    assert resp.status_code == 200, resp.text
    assert sorted(o["offset"] for o in resp.json()["offsets"]) == [5, 5]
    # a new member of the group starts where the commits are: it reads only what came after
    _produce(kafka_broker.bootstrap, topic, [{"value": b"after", "partition": p} for p in (0, 1)])
    again = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", **QUIET})
    again.subscribe([topic])
    later = []
    deadline = time.monotonic() + 60
    while len(later) < 2 and time.monotonic() < deadline:
        msg = again.poll(1.0)
        if msg is not None and msg.error() is None:
            later.append(msg)
    again.close()
    assert sorted((m.partition(), m.offset(), m.value()) for m in later) == [(0, 5, b"after"), (1, 5, b"after")]


def test_list_offsets_by_timestamp(kafka_broker):
    topic = _topic(kafka_broker)
    base = 1_700_000_000_000
    _produce(kafka_broker.bootstrap, topic, [{"value": b"%d" % i, "timestamp": base + i * 1000} for i in range(5)])
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "ts", **QUIET})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 2500)], timeout=30)
        assert found[0].offset == 3
        past_end = consumer.offsets_for_times([TopicPartition(topic, 0, base + 10_000)], timeout=30)
        assert past_end[0].offset == -1  # no record at or after it: Kafka's "no offset" (-1)
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        assert (low, high) == (0, 5)
    finally:
        consumer.close()


def test_metadata_auto_creates_a_topic_and_advertises_the_kafka_listener(kafka_broker):
    name = f"auto-{uuid.uuid4().hex[:8]}"
    reports = _produce(kafka_broker.bootstrap, name, [{"value": b"first"}])
    assert reports[0][0] is None
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})
    meta = producer.list_topics(name, timeout=30)
    assert list(meta.topics[name].partitions) == [0]
    assert [(b.host, b.port) for b in meta.brokers.values()] == [("127.0.0.1", kafka_broker.kafka_port)]
    assert meta.cluster_id == kafka_broker.rest.cluster_id


def test_unknown_topic_without_auto_create_is_unknown_topic_or_partition(kafka_broker):
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "x",
                         "allow.auto.create.topics": False, **QUIET})
    try:
        meta = consumer.list_topics("__laketail_missing", timeout=30)
        assert meta.topics["__laketail_missing"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()


def _rest_records(url: str, topic: str, partition: int, offset: int) -> list[dict]:
    resp = httpx.get(f"{url}/topics/{topic}/partitions/{partition}/records", params={"offset": offset},
                     headers={"Accept": "application/vnd.kafka.binary.v2+json"})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_record_produced_over_kafka_reads_the_same_over_rest_v2(kafka_broker):
    topic = _topic(kafka_broker, partitions=2)
    stamp = 1_760_000_000_123
    reports = _produce(kafka_broker.bootstrap, topic, [{
        "key": b"the-key", "value": b"\x00binary\xff", "partition": 1, "timestamp": stamp,
        "headers": [("trace", b"abc"), ("empty", None)],
    }])
    err, msg = reports[0]
    assert err is None and msg.partition() == 1
    got = _rest_records(kafka_broker.url, topic, 1, msg.offset())
    assert len(got) == 1
    rec = got[0]
    assert base64.b64decode(rec["key"]) == b"the-key"
    assert base64.b64decode(rec["value"]) == b"\x00binary\xff"
    assert (rec["partition"], rec["offset"], rec["timestamp"]) == (1, msg.offset(), stamp)
    assert rec["headers"] == [{"key": "trace", "value": base64.b64encode(b"abc").decode()},
                              {"key": "empty", "value": None}]


def test_a_record_produced_over_rest_v2_reads_the_same_over_kafka(kafka_broker):
    topic = _topic(kafka_broker, partitions=2)
    resp = httpx.post(f"{kafka_broker.url}/topics/{topic}", json={"records": [{
        "key": base64.b64encode(b"rest-key").decode(), "value": base64.b64encode(b"rest-value").decode(),
        "partition": 1, "headers": [{"key": "h", "value": base64.b64encode(b"v").decode()}],
    }]}, headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
    assert resp.status_code == 200, resp.text
    offset = resp.json()["offsets"][0]["offset"]
    stamp = _rest_records(kafka_broker.url, topic, 1, offset)[0]["timestamp"]  # v2 produce takes no timestamp
    got = _consume(kafka_broker.bootstrap, [topic], 1)
    assert len(got) == 1
    msg = got[0]
    assert (msg.key(), msg.value(), msg.partition(), msg.offset()) == (b"rest-key", b"rest-value", 1, offset)
    assert msg.timestamp()[1] == stamp
    assert msg.headers() == [("h", b"v")]


def test_read_committed_skips_an_aborted_rest_transaction_and_its_markers(kafka_broker):
    from tests.transactions.support import Session

    topic = _topic(kafka_broker)
    with httpx.Client(base_url=kafka_broker.url, timeout=60) as http:
        session = Session(http, f"txn-{uuid.uuid4().hex[:8]}")
        for values, end in (([b"aborted-1", b"aborted-2"], session.abort), ([b"committed"], session.commit)):
            assert session.begin().status_code in (200, 204)
            assert session.add_partitions([(topic, 0)]).status_code in (200, 204)
            assert session.produce(topic, 0, values).status_code == 200
            assert end().status_code in (200, 204)
        resp = http.post(f"/topics/{topic}/partitions/0", json={"records": [
            {"value": base64.b64encode(b"plain").decode()}]},
            headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
        assert resp.status_code == 200, resp.text
    committed = _consume(kafka_broker.bootstrap, [topic], 2, **{"isolation.level": "read_committed"})
    assert [m.value() for m in committed] == [b"committed", b"plain"]
    # the log: 2 aborted records, their marker, 1 committed record, its marker, 1 plain record
    assert [m.offset() for m in committed] == [3, 5]
    uncommitted = _consume(kafka_broker.bootstrap, [topic], 4, **{"isolation.level": "read_uncommitted"})
    assert [m.value() for m in uncommitted] == [b"aborted-1", b"aborted-2", b"committed", b"plain"]


def test_two_members_of_a_group_split_the_partitions_and_read_everything(kafka_broker):
    topic = _topic(kafka_broker, partitions=4)
    _produce(kafka_broker.bootstrap, topic, [{"value": b"%d" % i, "partition": i % 4} for i in range(40)])
    group = f"pair-{uuid.uuid4().hex[:8]}"
    members = [Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", **QUIET}) for _ in range(2)]
    for c in members:
        c.subscribe([topic])
    seen: dict[int, set[bytes]] = {0: set(), 1: set()}
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            for i, c in enumerate(members):
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    seen[i].add(msg.value())
            assignments = [sorted(tp.partition for tp in c.assignment()) for c in members]
            if len(seen[0] | seen[1]) == 40 and all(len(a) == 2 for a in assignments):
                break
        assignments = [sorted(tp.partition for tp in c.assignment()) for c in members]
        assert sorted(assignments[0] + assignments[1]) == [0, 1, 2, 3]  # rebalanced: two partitions each
        assert all(len(a) == 2 for a in assignments)
        assert seen[0] | seen[1] == {b"%d" % i for i in range(40)}
    finally:
        for c in members:
            c.close()
