"""The Python client's Producer against a real broker, written as confluent-kafka code is.

Delivery reports carry the offsets the broker gave; keyed records land where Kafka's
partitioner puts them; ``flush()`` returns what is still queued; retriable failures
are retried until ``delivery.timeout.ms``; local checks raise at ``produce()``.
"""

from __future__ import annotations

import pytest
from conftest import free_port

from laketail.client import (
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

pytestmark = pytest.mark.integration


def read_back(servers: str, clients, topic: str, partitions: int, count: int) -> list:
    """``count`` records of ``topic`` read with an assigned consumer, from the start."""
    consumer = clients(Consumer({"bootstrap.servers": servers, "auto.offset.reset": "earliest"}))
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    out = []
    while len(out) < count:
        msg = consumer.poll(30.0)
        assert msg is not None, f"only {len(out)} of {count} records came back"
        assert msg.error() is None, msg.error()
        out.append(msg)
    return out


def test_confluent_style_produce_with_delivery_reports(servers, clients, make_topic):
    topic = make_topic(partitions=3)
    producer = clients(Producer({"bootstrap.servers": servers, "client.id": "test-producer"}))
    delivered = []

    def delivery_report(err, msg):
        """Called once for each message produced, from poll() or flush()."""
        assert err is None, err
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for i in range(300):
        producer.poll(0)
        producer.produce(topic, f"value-{i}".encode(), key=f"key-{i % 17}", on_delivery=delivery_report)
    assert producer.flush() == 0
    assert len(producer) == 0
    assert len(delivered) == 300

    by_partition: dict[int, list[int]] = {}
    for partition, offset, _, _ in delivered:
        by_partition.setdefault(partition, []).append(offset)
    for offsets in by_partition.values():  # dense from 0, each offset reported once
        assert sorted(offsets) == list(range(len(offsets)))

    stored = {(m.partition(), m.offset()): (m.key(), m.value()) for m in read_back(servers, clients, topic, 3, 300)}
    assert stored == {(p, o): (k, v) for p, o, k, v in delivered}


def test_keyed_records_land_where_kafka_puts_them(servers, clients, make_topic):
    topic = make_topic(partitions=4)
    producer = clients(Producer({"bootstrap.servers": servers}))
    reports = {}
    # murmur2 of these keys is pinned by Kafka's UtilsTest; (h & 0x7fffffff) % 4
    expected = {b"21": 0, b"foobar": 2, b"abc": 3}
    for key in expected:
        producer.produce(topic, b"v", key=key, callback=lambda err, msg: reports.__setitem__(msg.key(), msg))
    assert producer.flush(60) == 0
    assert {k: m.partition() for k, m in reports.items()} == expected
    assert all(m.error() is None and m.offset() == 0 for m in reports.values())


def test_explicit_partition_headers_and_timestamp_round_trip(servers, clients, make_topic):
    topic = make_topic(partitions=2)
    producer = clients(Producer({"bootstrap.servers": servers}))
    results = []
    producer.produce(topic, value=b"payload", key=None, partition=1, timestamp=1_700_000_000_123,
                     headers=[("trace", b"abc"), ("empty", None), ("text", "héllo")],
                     on_delivery=lambda err, msg: results.append((err, msg)))
    producer.produce(topic, value=None, key=b"tombstone", partition=1, headers={"h": b"1"},
                     on_delivery=lambda err, msg: results.append((err, msg)))
    assert producer.flush(60) == 0
    assert [(err, msg.partition(), msg.offset()) for err, msg in results] == [(None, 1, 0), (None, 1, 1)]
    assert results[0][1].timestamp() == (TIMESTAMP_CREATE_TIME, 1_700_000_000_123)

    first, second = read_back(servers, clients, topic, 2, 2)
    assert (first.partition(), first.offset(), first.value(), first.key()) == (1, 0, b"payload", None)
    assert first.headers() == [("trace", b"abc"), ("empty", None), ("text", "héllo".encode())]
    assert first.timestamp() == (TIMESTAMP_CREATE_TIME, 1_700_000_000_123)
    assert (second.value(), second.key(), second.headers()) == (None, b"tombstone", [("h", b"1")])
    assert len(first) == len(b"payload")


def test_keyless_records_of_one_batch_stick_to_one_partition(servers, clients, make_topic):
    topic = make_topic(partitions=5)
    producer = clients(Producer({"bootstrap.servers": servers, "linger.ms": 600_000}))
    partitions = []
    for i in range(20):
        producer.produce(topic, f"{i}".encode(), on_delivery=lambda err, msg: partitions.append(msg.partition()))
    assert len(producer) == 20  # still lingering: nothing is sent before flush
    assert producer.flush(60) == 0
    assert len(partitions) == 20 and len(set(partitions)) == 1


def test_flush_returns_what_is_still_queued(clients):
    dead = f"http://127.0.0.1:{free_port()}"
    producer = clients(Producer({"bootstrap.servers": dead, "delivery.timeout.ms": 600_000, "retry.backoff.ms": 50}))
    for _ in range(7):
        producer.produce("nowhere", b"x", partition=0)
    assert producer.flush(0.5) == 7
    assert len(producer) == 7
    assert producer.close(0) == 7  # no waiting for a server that is not there


def test_undeliverable_records_time_out_with_msg_timed_out(clients):
    dead = f"http://127.0.0.1:{free_port()}"
    producer = clients(Producer({"bootstrap.servers": dead, "delivery.timeout.ms": 300, "retry.backoff.ms": 20}))
    errors = []
    for _ in range(3):
        producer.produce("nowhere", b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    while len(producer):
        producer.poll(1.0)
    assert [e.code() for e in errors] == [KafkaError._MSG_TIMED_OUT] * 3


def test_a_dead_bootstrap_server_is_skipped(servers, clients, make_topic):
    topic = make_topic()
    dead = f"http://127.0.0.1:{free_port()}"
    producer = clients(Producer({"bootstrap.servers": f"{dead},{servers}"}))
    offsets = []
    for _ in range(3):
        producer.produce(topic, b"v", on_delivery=lambda err, msg: offsets.append((err, msg.offset())))
    assert producer.flush(60) == 0
    assert offsets == [(None, 0), (None, 1), (None, 2)]


def test_unknown_topic_is_reported_to_the_delivery_callback(servers, clients):
    # an internal (__) name: auto.create.topics.enable (on, Kafka's default) never creates one
    producer = clients(Producer({"bootstrap.servers": servers}))
    reports = []
    producer.produce("__no-such-topic-anywhere", b"v", on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(60) == 0
    (err, msg), = reports
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART == 3
    assert err.name() == "UNKNOWN_TOPIC_OR_PART"
    assert (msg.topic(), msg.offset(), msg.error()) == ("__no-such-topic-anywhere", OFFSET_INVALID, err)


def test_local_checks_raise_at_produce(servers, clients, make_topic):
    topic = make_topic(partitions=2)
    producer = clients(Producer({"bootstrap.servers": servers, "message.max.bytes": 1000}))
    with pytest.raises(KafkaException) as too_big:
        producer.produce(topic, b"x" * 1001)
    assert too_big.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    with pytest.raises(KafkaException) as bad_partition:
        producer.produce(topic, b"x", partition=2)
    assert bad_partition.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    with pytest.raises(TypeError):
        producer.produce(topic, 12345)
    with pytest.raises(KafkaException) as bad_conf:
        Producer({"bootstrap.servers": servers, "no.such.property": 1})
    assert bad_conf.value.args[0].code() == KafkaError._INVALID_ARG
    assert len(producer) == 0


def test_acks_zero_delivers_without_offsets(servers, clients, make_topic):
    topic = make_topic()
    producer = clients(Producer({"bootstrap.servers": servers, "acks": 0}))
    reports = []
    producer.produce(topic, b"fire-and-forget", on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(60) == 0
    assert reports == [(None, OFFSET_INVALID)]
    assert [m.value() for m in read_back(servers, clients, topic, 1, 1)] == [b"fire-and-forget"]


def test_error_cb_hears_all_brokers_down(clients):
    dead = f"http://127.0.0.1:{free_port()}"
    errors = []
    producer = clients(Producer({"bootstrap.servers": dead, "error_cb": errors.append, "retry.backoff.ms": 20}))
    producer.produce("nowhere", b"x", partition=0)
    while not errors:
        producer.poll(1.0)
    assert errors[0].code() == KafkaError._ALL_BROKERS_DOWN
    producer.close(0)
