"""Topics named by id (KIP-516): Metadata v10+ gives each topic its id, and Fetch v13+
names topics by that id, in requests, sessions and answers; an id no topic has is
UNKNOWN_TOPIC_ID for its partitions while the rest are answered. librdkafka 2.16 fetches
with v16 once the broker offers it, so every confluent-kafka consumer test reads through
this path too."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer

from laketail.kafka import records
from tests.kafka_listener.test_listener import _call, _connect, _produce_body

pytestmark = pytest.mark.integration

UNKNOWN_TOPIC_ID = 100


def _topic_id(sock, topic: str) -> uuid.UUID:
    meta = _call(sock, 3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False}, correlation_id=3)
    assert int(meta.topics[0].error_code) == 0
    return meta.topics[0].topic_id


def _fetch_by_id(session_id: int, epoch: int, parts: dict, forgotten: list | None = None) -> dict:
    by_topic: dict[uuid.UUID, list[dict]] = {}
    for (topic_id, p), offset in parts.items():
        by_topic.setdefault(topic_id, []).append({"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
                                                  "last_fetched_epoch": -1, "log_start_offset": -1,
                                                  "partition_max_bytes": 1 << 20})
    return {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "rack_id": "",
            "topics": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [{"topic_id": t, "partitions": [p]} for t, p in forgotten or []]}


def _by_partition(answer) -> dict[tuple[uuid.UUID, int], object]:
    return {(t.topic_id, p.partition_index): p for t in answer.responses for p in t.partitions}


def _values(part) -> list[bytes]:
    return [v for b in records.split_batches(part.records) for v in records.decode_batch(b).values]


def test_metadata_names_each_topic_by_a_stable_id(kafka_broker):
    a, b = f"ids-{uuid.uuid4().hex[:8]}", f"ids-{uuid.uuid4().hex[:8]}"
    for name in (a, b):
        assert kafka_broker.rest.create_topic(name, 1).status_code in (200, 201)
    with _connect(kafka_broker) as sock:
        first = _topic_id(sock, a)
        assert first.int != 0 and first == _topic_id(sock, a) and first != _topic_id(sock, b)


@pytest.mark.parametrize("version", [13, 16])
def test_fetch_by_topic_id_reads_and_answers_unknown_ids_apart(kafka_broker, version):
    topic = f"ids-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 2).status_code in (200, 201)
    stranger = uuid.uuid4()
    with _connect(kafka_broker) as sock:
        for value in (b"a", b"b"):
            answer = _call(sock, 0, 9, _produce_body(topic, records.encode_batch(0, [0], [1000], [None], [value],
                                                                                 [None])), correlation_id=4)
            assert int(answer.responses[0].partition_responses[0].error_code) == 0
        topic_id = _topic_id(sock, topic)

        got = _by_partition(_call(sock, 1, version, _fetch_by_id(0, -1, {(topic_id, 0): 0, (topic_id, 1): 0,
                                                                       (stranger, 0): 0}), correlation_id=5))
        assert sorted(got) == sorted([(topic_id, 0), (topic_id, 1), (stranger, 0)])
        assert int(got[(topic_id, 0)].error_code) == 0 and _values(got[(topic_id, 0)]) == [b"a", b"b"]
        assert got[(topic_id, 0)].high_watermark == 2
        assert int(got[(stranger, 0)].error_code) == UNKNOWN_TOPIC_ID and _values(got[(stranger, 0)]) == []


def test_a_fetch_session_by_topic_id_follows_and_forgets_partitions(kafka_broker):
    topic = f"ids-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 2).status_code in (200, 201)

    def produce(sock, partition: int, value: bytes) -> None:
        body = _produce_body(topic, records.encode_batch(0, [0], [1000], [None], [value], [None]))
        body["topic_data"][0]["partition_data"][0]["index"] = partition
        assert int(_call(sock, 0, 9, body, correlation_id=6).responses[0].partition_responses[0].error_code) == 0

    with _connect(kafka_broker) as sock:
        topic_id = _topic_id(sock, topic)
        full = _call(sock, 1, 16, _fetch_by_id(0, 0, {(topic_id, 0): 0, (topic_id, 1): 0}))
        assert int(full.error_code) == 0 and full.session_id > 0
        session_id = full.session_id
        produce(sock, 1, b"one")
        got = _by_partition(_call(sock, 1, 16, _fetch_by_id(session_id, 1, {})))
        assert list(got) == [(topic_id, 1)] and _values(got[(topic_id, 1)]) == [b"one"]

        forget = _call(sock, 1, 16, _fetch_by_id(session_id, 2, {(topic_id, 1): 1}, forgotten=[(topic_id, 0)]))
        assert _by_partition(forget) == {}
        produce(sock, 0, b"zero")  # forgotten: not answered again
        produce(sock, 1, b"two")
        got = _by_partition(_call(sock, 1, 16, _fetch_by_id(session_id, 3, {})))
        assert list(got) == [(topic_id, 1)] and _values(got[(topic_id, 1)]) == [b"two"]


def test_confluent_kafka_consumes_through_fetch_by_topic_id(kafka_broker):
    """librdkafka 2.16 offers Fetch up to v16 and so names topics by id here: a consumer
    that reads everything back exercises the id path end to end."""
    topic = f"ids-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 3).status_code in (200, 201)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "acks": "all"})
    sent = {f"v{i}".encode() for i in range(60)}
    for value in sorted(sent):
        producer.produce(topic, value, key=value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) >= len(sent):
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
