"""OffsetForLeaderEpoch (API 23) on one broker: Kafka's end-offset rule over the leader
epoch history, and the FENCED / UNKNOWN_LEADER_EPOCH checks of ``current_leader_epoch``
(the leader change itself is in test_cluster.py)."""

from __future__ import annotations

import socket
import uuid

from confluent_kafka import Producer

from laketail.kafka.epochs import epoch_end_offset
from tests.kafka_listener.test_listener import _call


def test_the_end_offset_rule_is_kafkas():
    epochs = [(2, 10), (5, 40), (7, 90)]
    assert epoch_end_offset(epochs, 7, 120) == (7, 120)  # the latest epoch ends at the log end
    assert epoch_end_offset(epochs, 5, 120) == (5, 90)  # a known one where the next begins
    assert epoch_end_offset(epochs, 4, 120) == (2, 40)  # between two: the one below, ending at the next
    assert epoch_end_offset(epochs, 1, 120) == (1, 10)  # older than every known: where the log's first began
    assert epoch_end_offset(epochs, 8, 120) == (-1, -1)  # newer than the latest: undefined
    assert epoch_end_offset(epochs, -1, 120) == (-1, -1)
    assert epoch_end_offset([], 0, 0) == (-1, -1)


def _epochs(sock: socket.socket, version: int, topic: str, partition: int, current: int, requested: int):
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": partition, "current_leader_epoch": current, "leader_epoch": requested}]}]}
    answer = _call(sock, 23, version, body)
    part = answer.topics[0].partitions[0]
    return int(part.error_code), part.leader_epoch, part.end_offset


def test_offset_for_leader_epoch_answers_the_leaders_epoch_and_log_end(kafka_broker):
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "acks": "all", "log_level": 0})
    for i in range(25):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(60) == 0
    with socket.create_connection(("127.0.0.1", kafka_broker.kafka_port), timeout=30) as sock:
        metadata = _call(sock, 3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                      "include_cluster_authorized_operations": False,
                                      "include_topic_authorized_operations": False})
        epoch = metadata.topics[0].partitions[0].leader_epoch
        assert epoch >= 0
        for version in (2, 3, 4):
            # a consumer that read a record of the current epoch: it ends at the log end
            assert _epochs(sock, version, topic, 0, epoch, epoch) == (0, epoch, 25)
            assert _epochs(sock, version, topic, 0, -1, epoch) == (0, epoch, 25)  # -1: not checked
        assert _epochs(sock, 4, topic, 0, epoch + 1, epoch) == (76, -1, -1)  # UNKNOWN_LEADER_EPOCH
        if epoch > 0:
            assert _epochs(sock, 4, topic, 0, epoch - 1, epoch)[0] == 74  # FENCED_LEADER_EPOCH
        assert _epochs(sock, 4, topic, 0, -1, epoch + 1) == (0, -1, -1)  # an epoch the log never had
        assert _epochs(sock, 4, topic, 7, -1, epoch)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert _epochs(sock, 4, f"nope-{uuid.uuid4().hex[:6]}", 0, -1, 0)[0] == 3
