"""kafka-python (the pure-Python client) against a real broker's Kafka listener: the
client matrix's second column (docs/kafka-protocol.md)."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

pytestmark = pytest.mark.integration


def _topic(kafka_broker, partitions: int = 1) -> str:
    name = f"kpy-{uuid.uuid4().hex[:10]}"
    assert kafka_broker.rest.create_topic(name, partitions).status_code in (200, 201)
    return name


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_produce_with_each_acks_and_consume_from_the_beginning(kafka_broker, acks):
    topic = _topic(kafka_broker)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks=acks, compression_type="gzip")
    futures = [producer.send(topic, key=b"k", value=b"v%d" % i, headers=[("n", b"%d" % i)]) for i in range(10)]
    metas = [f.get(timeout=60) for f in futures]
    producer.close()
    if acks != 0:
        assert [m.offset for m in metas] == list(range(10))
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=30_000)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == 10:
            break
    consumer.close()
    assert [(m.offset, m.value, m.headers) for m in got] == [(i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(10)]


def test_idempotent_producer(kafka_broker):
    topic = _topic(kafka_broker, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", enable_idempotence=True)
    metas = [producer.send(topic, key=b"key-%d" % (i % 3), value=b"%d" % i).get(timeout=60) for i in range(30)]
    producer.close()
    per_partition: dict[int, list[int]] = {}
    for m in metas:
        per_partition.setdefault(m.partition, []).append(m.offset)
    assert all(offs == list(range(len(offs))) for offs in per_partition.values())


def test_group_consumer_commits_and_list_offsets_by_timestamp(kafka_broker):
    topic = _topic(kafka_broker)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    base = 1_700_000_000_000
    for i in range(6):
        producer.send(topic, value=b"%d" % i, timestamp_ms=base + i * 1000)
    producer.flush(60)
    producer.close()
    group = f"kpy-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=30_000)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == 6:
            break
    assert [m.timestamp for m in got] == [base + i * 1000 for i in range(6)]
    consumer.commit()
    tp = TopicPartition(topic, 0)
    assert consumer.committed(tp) == 6
    found = consumer.offsets_for_times({tp: base + 3500})
    assert found[tp].offset == 4 and found[tp].timestamp == base + 4000
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 6}
    consumer.close()
