"""The transaction admin APIs (KIP-664) against a real broker, as ``kafka-transactions.sh``
sends them (confluent-kafka's AdminClient has no calls for them, so raw requests), and
confluent-kafka's AdminClient alter/list_consumer_group_offsets (OffsetCommit and
OffsetFetch without a member)."""

from __future__ import annotations

import socket
import struct
import uuid

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_listener.test_listener import _call, _read_frame
from tests.kafka_listener.test_protocol import request_frame

QUIET = {"log_level": 0}


def _topic(kafka_broker, partitions: int = 2) -> str:
    name = f"txa-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _list(sock, version: int = 1, states=(), pids=(), duration_ms: int = -1):
    return _call(sock, 66, version, {"state_filters": list(states), "producer_id_filters": list(pids),
                                     "duration_filter": duration_ms})


def _describe_error_code(sock, transactional_id: str) -> int:
    """The error code of DescribeTransactions v0 for one id, read from the bytes: the
    answer for an unknown id carries start time -1, which kio's reader refuses."""
    frame = request_frame(65, 0, {"transactional_ids": [transactional_id]}, 9)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    answer = _read_frame(sock)
    # correlation id, header tags, throttle time, array length (1 + 1), then the error code
    assert struct.unpack_from(">iBiB", answer) == (9, 0, 0, 2)
    return struct.unpack_from(">h", answer, 10)[0]


def _producers(sock, topic: str, partitions: list[int]):
    answer = _call(sock, 61, 0, {"topics": [{"name": topic, "partition_indexes": partitions}]})
    return {p.partition_index: p for p in answer.topics[0].partitions}


def test_list_and_describe_an_open_then_committed_transaction(kafka_broker):
    topic = _topic(kafka_broker)
    txn_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 45_000, **QUIET})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"v%d" % i, partition=1)
    assert producer.flush(30) == 0
    with socket.create_connection(("127.0.0.1", kafka_broker.kafka_port), timeout=30) as sock:
        listed = {t.transactional_id: t for t in _list(sock).transaction_states}
        assert listed[txn_id].transaction_state == "Ongoing"
        pid = listed[txn_id].producer_id
        assert pid >= 0
        # filters: state, producer id, an unknown state echoed, and duration (v1)
        assert txn_id in {t.transactional_id for t in _list(sock, 0, states=["Ongoing"]).transaction_states}
        assert txn_id not in {t.transactional_id for t in _list(sock, states=["CompleteCommit"]).transaction_states}
        assert [t.transactional_id for t in _list(sock, pids=[pid]).transaction_states] == [txn_id]
        assert list(_list(sock, states=["Bogus"]).unknown_state_filters) == ["Bogus"]
        assert txn_id not in {t.transactional_id for t in _list(sock, duration_ms=3_600_000).transaction_states}

        (mine,) = _call(sock, 65, 0, {"transactional_ids": [txn_id]}).transaction_states
        assert int(mine.error_code) == 0 and mine.transaction_state == "Ongoing"
        assert (mine.producer_id, mine.transaction_timeout.total_seconds()) == (pid, 45)
        assert mine.producer_epoch >= 0 and mine.transaction_start_time.timestamp() > 0
        assert [(t.topic, list(t.partitions)) for t in mine.topics] == [(topic, [1])]
        assert _describe_error_code(sock, "no-such-txn") == 105  # TRANSACTIONAL_ID_NOT_FOUND

        states = _producers(sock, topic, [0, 1, 9])
        assert int(states[9].error_code) == 3
        assert list(states[0].active_producers) == []
        (active,) = states[1].active_producers
        assert (active.producer_id, active.producer_epoch, active.last_sequence) == (pid, mine.producer_epoch, 2)
        assert active.current_txn_start_offset == 0 and active.last_timestamp > 0

        producer.commit_transaction(30)
        assert {t.transactional_id: t.transaction_state for t in _list(sock, pids=[pid]).transaction_states} == {
            txn_id: "CompleteCommit"}
        (active,) = _producers(sock, topic, [1])[1].active_producers
        assert active.current_txn_start_offset == -1  # the transaction is closed


def test_alter_and_list_consumer_group_offsets_with_the_admin_client(kafka_broker):
    topic = _topic(kafka_broker)
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})
    wanted = [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 0)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])[group].result(30)
    assert sorted((tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions) == [
        (0, 3, None), (1, 0, None)]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in listed.topic_partitions) == [
        (topic, 0, 3), (topic, 1, 0)]
    only = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])])[group].result(30)
    assert [(tp.partition, tp.offset) for tp in only.topic_partitions] == [(0, 3)]
