"""kafka-python 3.x's transactional producer and read_committed consumer against the
Kafka listener: the transactions cell of the client matrix's second column."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer

pytestmark = pytest.mark.integration


def _topic(kafka_broker) -> str:
    name = f"kpy-txn-{uuid.uuid4().hex[:10]}"
    assert kafka_broker.rest.create_topic(name, 1).status_code in (200, 201)
    return name


def _read(kafka_broker, topic: str, isolation: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest",
                             isolation_level=isolation, consumer_timeout_ms=5_000)
    got: list[bytes] = []
    try:
        # the iteration ends 5 s after the last record, time for one that must not come to show
        for msg in consumer:
            got.append(msg.value)
            if len(got) > count:
                break
    finally:
        consumer.close()
    return got


def test_commit_and_abort_with_read_committed(kafka_broker):
    topic = _topic(kafka_broker)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap,
                             transactional_id=f"kpy-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    assert _read(kafka_broker, topic, "read_committed", 1) == [b"committed"]
    assert _read(kafka_broker, topic, "read_uncommitted", 2) == [b"aborted", b"committed"]
