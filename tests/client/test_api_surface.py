"""The client's public surface, locked: the names confluent-kafka code imports, error
codes and names as librdkafka has them, value semantics of TopicPartition and
KafkaError, configuration parsing, and the accumulator's batching rules (in process,
no broker)."""

from __future__ import annotations

import pytest

import laketail.client as client
from laketail.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
    admin,
)
from laketail.client.accumulator import PendingRecord, RecordAccumulator
from laketail.client.config import ConsumerConfig, ProducerConfig, parse
from laketail.errors import NotEnoughReplicas, UnknownTopicOrPartition, from_body
from laketail.partitioner import partition_for_key


def test_public_names():
    assert set(client.__all__) >= {
        "Producer", "Consumer", "AdminClient", "TopicPartition", "Message", "KafkaError", "KafkaException",
        "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_STORED", "OFFSET_INVALID", "ConsumerGroupTopicPartitions",
    }
    assert set(admin.__all__) >= {
        "AdminClient", "NewTopic", "ConfigResource", "ConfigEntry", "ResourceType", "ConfigSource",
        "AlterConfigOpType", "ClusterMetadata", "TopicMetadata", "PartitionMetadata", "BrokerMetadata",
        "ConsumerGroupTopicPartitions", "ConsumerGroupState", "ListConsumerGroupsResult",
    }
    for name in client.__all__:
        assert hasattr(client, name), name


def test_offset_and_timestamp_constants_are_librdkafka_values():
    assert (OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID) == (-2, -1, -1000, -1001)
    assert (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME) == (1, 2)


def test_kafka_error_codes_and_names():
    assert KafkaError._PARTITION_EOF == -191 and KafkaError._AUTO_OFFSET_RESET == -140
    assert KafkaError._TRANSPORT == -195 and KafkaError._TIMED_OUT == -185 and KafkaError._MSG_TIMED_OUT == -192
    assert KafkaError.UNKNOWN_TOPIC_OR_PART == KafkaError.UNKNOWN_TOPIC_OR_PARTITION == 3
    assert KafkaError.REBALANCE_IN_PROGRESS == 27 and KafkaError.ILLEGAL_GENERATION == 22
    err = KafkaError(KafkaError._PARTITION_EOF)
    assert err.name() == "_PARTITION_EOF" and err.code() == -191 and not err.fatal() and not err.retriable()
    assert err == -191 and err == KafkaError(-191) and err != KafkaError(3)
    exc = KafkaException(KafkaError(KafkaError.INVALID_CONFIG, "bad"))
    assert exc.args[0].code() == 40 and exc.args[0].str() == "bad" and "INVALID_CONFIG" in str(exc)


def test_broker_error_bodies_become_the_same_kafka_errors():
    unknown = UnknownTopicOrPartition.topic("t")
    err = KafkaError.from_laketail(from_body(unknown.http_status, unknown.to_body()))
    assert (err.code(), err.name(), err.retriable()) == (3, "UNKNOWN_TOPIC_OR_PART", False)
    busy = NotEnoughReplicas("one replica short")
    err = KafkaError.from_laketail(from_body(busy.http_status, busy.to_body()))
    assert (err.code(), err.retriable()) == (19, True) and "one replica short" in err.str()


def test_topic_partition_compares_by_topic_and_partition():
    a = TopicPartition("t", 1, 10)
    assert a == TopicPartition("t", 1, 99) and hash(a) == hash(TopicPartition("t", 1))
    assert sorted([TopicPartition("t", 2), TopicPartition("s", 5), TopicPartition("t", 0)]) == [
        TopicPartition("s", 5), TopicPartition("t", 0), TopicPartition("t", 2)]
    fresh = TopicPartition("t")
    assert (fresh.partition, fresh.offset, fresh.metadata, fresh.error) == (-1, OFFSET_INVALID, None, None)


def test_message_accessors():
    msg = Message(topic="t", partition=0, offset=7, key=b"k", value=b"value", headers=[("h", b"1")],
                  timestamp=(TIMESTAMP_CREATE_TIME, 123))
    assert (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()) == ("t", 0, 7, b"k", b"value")
    assert msg.headers() == [("h", b"1")] and msg.timestamp() == (1, 123) and msg.error() is None
    assert len(msg) == 5


def test_configuration_uses_librdkafka_names_aliases_and_keyword_overrides():
    conf = parse(ConsumerConfig, {"bootstrap.servers": "localhost:8082,http://other:9", "group.id": "g",
                                  "auto.offset.reset": "smallest", "enable.auto.commit": "false",
                                  "partition.assignment.strategy": "cooperative-sticky",
                                  "security.protocol": "plaintext"}, {"session_timeout_ms": 10_000})
    assert conf.bootstrap_servers == ("http://localhost:8082", "http://other:9")
    assert conf.auto_offset_reset == "earliest" and conf.enable_auto_commit is False
    assert conf.partition_assignment_strategy == ("cooperative-sticky",) and conf.session_timeout_ms == 10_000
    defaults = parse(ConsumerConfig, {"group.id": "g"}, {})
    assert defaults.partition_assignment_strategy == ("range", "roundrobin")
    assert defaults.isolation_level == "read_committed" and defaults.max_poll_interval_ms == 300_000
    producer = parse(ProducerConfig, {"acks": -1, "message.timeout.ms": 1234}, {})
    assert producer.acks == "all" and producer.delivery_timeout_ms == 1234 and producer.linger_ms == 5
    with pytest.raises(KafkaException) as bad:
        parse(ProducerConfig, {"acks": "sometimes"}, {})
    assert bad.value.args[0].code() == KafkaError._INVALID_ARG


def record(topic: str, key: bytes | None, size: int = 10, partition: int = -1) -> PendingRecord:
    return PendingRecord(topic, partition, key, b"x" * size, None, 0, None, 0.0, size)


def test_accumulator_partitions_batches_and_drains():
    acc = RecordAccumulator(linger_ms=60_000, batch_size=100, batch_num_messages=1000, monotonic=lambda: 0.0)
    acc.append(record("u", b"foobar"), 4)
    acc.append(record("u", None, partition=3), 4)
    for _ in range(12):  # 120 bytes of keyless records: a full batch and a second one
        acc.append(record("t", None), 4)
    assert acc.pending == 14
    ready, _ = acc.drain(now=1.0)
    sticky = [b for b in ready if b.topic == "t"]
    assert len(sticky) == 1 and len(sticky[0].records) == 10  # the full batch only; linger holds the rest
    acc.begin_flush()
    rest, _ = acc.drain(now=1.0)
    assert {(b.partition, len(b.records)) for b in rest if b.topic == "u"} == {
        (partition_for_key(b"foobar", 4), 1), (3, 1)}
    assert not acc.drain(now=1.0)[0]  # every partition with a batch out is muted
    for batch in ready + rest:
        acc.done(batch)
    remaining, _ = acc.drain(now=1.0)
    for batch in remaining:
        acc.done(batch)
    assert acc.pending == 0


def test_accumulator_keeps_order_while_the_partition_count_is_unknown():
    acc = RecordAccumulator(linger_ms=0, batch_size=1_000_000, batch_num_messages=1000, monotonic=lambda: 0.0)
    acc.append(record("t", b"a"), None)
    acc.append(record("t", b"b"), 3)  # queues behind the unassigned record
    assert acc.unassigned_topics() == ["t"] and acc.drain(now=1.0)[0] == []
    acc.assign("t", 3)
    ready, _ = acc.drain(now=1.0)
    assert sorted(r.key for b in ready for r in b.records) == [b"a", b"b"]


def test_a_batch_sent_once_takes_no_more_records_while_it_waits_to_be_retried():
    # Its retry must carry the very records (and sequence numbers) of the first try, or an
    # idempotent leader that has the first try sees a new range and refuses it.
    acc = RecordAccumulator(linger_ms=0, batch_size=1_000_000, batch_num_messages=1000, monotonic=lambda: 0.0)
    acc.append(record("t", None, partition=0), 1)
    (sent,), _ = acc.drain(now=1.0)
    sent.attempts, sent.base_sequence = 1, 0
    acc.requeue(sent, retry_at=2.0)
    acc.append(record("t", None, partition=0), 1)
    assert len(sent.records) == 1
    (retried,), _ = acc.drain(now=3.0)
    assert retried is sent
    acc.done(retried)
    (after,), _ = acc.drain(now=3.0)
    assert after is not sent and len(after.records) == 1
