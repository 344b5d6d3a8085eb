"""Transactions over the Kafka listener with confluent-kafka's transactional producer
and read_committed consumers, and fencing across protocols: a Kafka producer and a REST
``/v1`` session of the same transactional.id share one epoch."""

from __future__ import annotations

import socket
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.transactions.support import Session, error_of

pytestmark = pytest.mark.integration
QUIET = {"log_level": 0}


def _topic(kafka_broker, partitions: int = 1) -> str:
    name = f"ktxn-{uuid.uuid4().hex[:10]}"
    resp = kafka_broker.rest.create_topic(name, partitions)
    assert resp.status_code in (200, 201), resp.text
    return name


def _producer(kafka_broker, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": transactional_id,
                         **QUIET})
    producer.init_transactions(60)
    return producer


def _read(kafka_broker, topic: str, count: int, isolation: str, idle_s: float = 0.0) -> list:
    """``count`` records of ``topic`` from the beginning, then (``idle_s``) whatever
    else arrives in that long: a consumer that must not see more proves it here."""
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False, **QUIET})
    consumer.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        idle_until = time.monotonic() + idle_s
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


def test_commit_and_abort_with_a_read_committed_consumer(kafka_broker):
    topic = _topic(kafka_broker, partitions=2)
    producer = _producer(kafka_broker, f"ktx-{uuid.uuid4().hex[:8]}")
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=b"aborted-%d" % i, partition=i % 2)
    producer.flush(60)
    producer.abort_transaction(60)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(60)

    committed = _read(kafka_broker, topic, 4, "read_committed", idle_s=2.0)
    assert sorted(m.value() for m in committed) == [b"committed-%d" % i for i in range(4)]
    uncommitted = _read(kafka_broker, topic, 8, "read_uncommitted")
    assert sorted(m.value() for m in uncommitted) == sorted(
        [b"aborted-%d" % i for i in range(4)] + [b"committed-%d" % i for i in range(4)])


def test_an_open_transaction_is_invisible_to_read_committed_until_it_commits(kafka_broker):
    topic = _topic(kafka_broker, partitions=2)
    producer = _producer(kafka_broker, f"ktx-{uuid.uuid4().hex[:8]}")
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    producer.flush(60)
    plain = Producer({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})
    plain.produce(topic, value=b"plain", partition=1)
    assert plain.flush(60) == 0
    # the consumer reads partition 1 (so it fetched both), and never the open transaction
    assert [m.value() for m in _read(kafka_broker, topic, 1, "read_committed", idle_s=1.0)] == [b"plain"]
    producer.commit_transaction(60)
    assert sorted(m.value() for m in _read(kafka_broker, topic, 2, "read_committed")) == [b"pending", b"plain"]


def test_send_offsets_to_transaction_commits_the_groups_offsets_only_on_commit(kafka_broker):
    source, sink = _topic(kafka_broker), _topic(kafka_broker)
    seed = Producer({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})
    for i in range(6):
        seed.produce(source, value=b"in-%d" % i)
    assert seed.flush(60) == 0
    group = f"eos-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed", **QUIET})
    consumer.subscribe([source])
    producer = _producer(kafka_broker, f"ktx-{uuid.uuid4().hex[:8]}")
    try:
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        got = got[:3]
        # first attempt: consumed 3, aborted -> the group keeps no offset
        producer.begin_transaction()
        for m in got:
            producer.produce(sink, value=m.value().replace(b"in", b"out"))
        producer.send_offsets_to_transaction([TopicPartition(source, 0, got[-1].offset() + 1)],
                                             consumer.consumer_group_metadata(), 60)
        producer.abort_transaction(60)
        assert consumer.committed([TopicPartition(source, 0)], timeout=30)[0].offset < 0
        # second attempt: committed -> the group's offset is 3, as v1 shows too
        producer.begin_transaction()
        for m in got:
            producer.produce(sink, value=m.value().replace(b"in", b"out"))
        producer.send_offsets_to_transaction([TopicPartition(source, 0, got[-1].offset() + 1)],
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        assert consumer.committed([TopicPartition(source, 0)], timeout=30)[0].offset == 3
    finally:
        consumer.close()
    resp = httpx.post(f"{kafka_broker.url}/v1/groups/{group}/committed",
                      json={"partitions": [{"topic": source, "partition": 0}]})
    assert resp.status_code == 200 and [o["offset"] for o in resp.json()["offsets"]] == [3]
    out = _read(kafka_broker, sink, 3, "read_committed", idle_s=1.0)
    assert [m.value() for m in out] == [b"out-0", b"out-1", b"out-2"]


def _fenced(exc: KafkaException) -> bool:
    err = exc.args[0]
    return err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def test_a_rest_session_fences_a_kafka_producer_of_the_same_transactional_id(kafka_broker):
    topic = _topic(kafka_broker)
    transactional_id = f"ktx-{uuid.uuid4().hex[:8]}"
    producer = _producer(kafka_broker, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, value=b"from-the-older-kafka-producer")
    producer.flush(60)
    with httpx.Client(base_url=kafka_broker.url, timeout=60) as http:
        rest = Session(http, transactional_id)  # InitProducerId over /v1: bumps the epoch
        state = http.get(rest.path).json()
        assert (state["producer_id"], state["producer_epoch"]) == (rest.producer_id, rest.epoch)
        assert rest.epoch >= 1
        with pytest.raises(KafkaException) as fenced:
            producer.commit_transaction(60)
        assert _fenced(fenced.value), fenced.value
        # the REST session is the live one: it commits
        assert rest.begin().status_code in (200, 204)
        assert rest.produce(topic, 0, [b"from-rest"]).status_code == 200
        assert rest.commit().status_code in (200, 204)
    # the older producer's open transaction was aborted by the fence
    assert [m.value() for m in _read(kafka_broker, topic, 1, "read_committed", idle_s=1.0)] == [b"from-rest"]


def test_a_kafka_producer_fences_a_rest_session_of_the_same_transactional_id(kafka_broker):
    topic = _topic(kafka_broker)
    transactional_id = f"ktx-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=kafka_broker.url, timeout=60) as http:
        rest = Session(http, transactional_id)
        assert rest.begin().status_code in (200, 204)
        assert rest.produce(topic, 0, [b"from-the-older-rest-session"]).status_code == 200
        producer = _producer(kafka_broker, transactional_id)  # InitProducerId over Kafka's protocol
        status, code = error_of(rest.commit())
        assert (status, code) == (409, 40915)  # PRODUCER_FENCED
        assert rest.produce(topic, 0, [b"late"]).status_code == 409
    producer.begin_transaction()
    producer.produce(topic, value=b"from-kafka")
    producer.commit_transaction(60)
    assert [m.value() for m in _read(kafka_broker, topic, 1, "read_committed", idle_s=1.0)] == [b"from-kafka"]


def test_transaction_requests_over_a_raw_socket_answer_kafkas_codes(kafka_broker):
    """What a client cannot easily provoke: a partial AddPartitionsToTxn adds nothing,
    and a fenced epoch is PRODUCER_FENCED only to versions that know it (KIP-588)."""
    from tests.kafka_listener.test_listener import _call

    topic = _topic(kafka_broker)
    transactional_id = f"ktx-raw-{uuid.uuid4().hex[:8]}"
    with socket.create_connection(("127.0.0.1", kafka_broker.kafka_port), timeout=30) as sock:
        first = _call(sock, 22, 1, {"transactional_id": transactional_id, "transaction_timeout": 60_000})
        assert first.error_code == 0
        pid, epoch = first.producer_id, first.producer_epoch
        added = _call(sock, 24, 1, {
            "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]},
                                    {"name": "no-such-topic-here", "partitions": [0]}]})
        codes = {r.name: [p.partition_error_code for p in r.results_by_partition]
                 for r in added.results_by_topic_v3_and_below}
        assert codes == {topic: [55], "no-such-topic-here": [3]}  # OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC
        state = httpx.get(f"{kafka_broker.url}/v1/transactions/{transactional_id}", timeout=30).json()
        assert state["partitions"] == [] and state["state"] != "Ongoing"
        again = _call(sock, 22, 1, {"transactional_id": transactional_id, "transaction_timeout": 60_000})
        assert (again.producer_id, again.producer_epoch) == (pid, epoch + 1)
        old = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch, "committed": True}
        assert _call(sock, 26, 1, old).error_code == 47  # INVALID_PRODUCER_EPOCH before v2
        assert _call(sock, 26, 3, old).error_code == 90  # PRODUCER_FENCED
        unknown = {**old, "transactional_id": f"{transactional_id}-never"}
        assert _call(sock, 26, 3, unknown).error_code == 49  # INVALID_PRODUCER_ID_MAPPING
        assert _call(sock, 22, 1, {"transactional_id": transactional_id,
                                   "transaction_timeout": 10 ** 9}).error_code == 50  # INVALID_TRANSACTION_TIMEOUT
