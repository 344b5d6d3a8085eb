"""The Python client's Consumer without a group (``assign()``) against a real broker:
poll loops, end-of-partition events, seek and position, watermarks, offsets by time,
pause and resume."""

from __future__ import annotations

import time

import pytest

from laketail.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

pytestmark = pytest.mark.integration

#: A failure bound for loops that wait on the broker, not a claim about speed.
DEADLINE_S = 60.0


def produce(servers: str, topic: str, values: list[bytes], partition: int = -1, **extra) -> list[tuple[int, int]]:
    """Produce ``values`` and return their (partition, offset) in order."""
    producer = Producer({"bootstrap.servers": servers})
    placed: list[tuple[int, int]] = []
    try:
        for value in values:
            producer.produce(topic, value, partition=partition,
                             on_delivery=lambda err, msg: placed.append((msg.partition(), msg.offset())), **extra)
        assert producer.flush(DEADLINE_S) == 0
    finally:
        producer.close()
    return placed


def poll_records(consumer: Consumer, count: int) -> list:
    """``count`` records from a confluent-kafka style poll loop (events skipped)."""
    out = []
    deadline = time.monotonic() + DEADLINE_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} of {count} records"
        msg = consumer.poll(timeout=1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(msg.error())
        out.append(msg)
    return out


def wait_position(consumer: Consumer, tp: TopicPartition) -> int:
    """Poll (briefly) until the partition's start offset is resolved."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        (pos,) = consumer.position([tp])
        if pos.offset != OFFSET_INVALID:
            return pos.offset
        assert time.monotonic() < deadline, "the start position was never resolved"
        assert consumer.poll(0.1) is None


def test_assign_poll_loop_reads_everything_with_end_of_partition_events(servers, clients, make_topic):
    topic = make_topic(partitions=2)
    placed = produce(servers, topic, [f"a{i}".encode() for i in range(12)], partition=0)
    placed += produce(servers, topic, [f"b{i}".encode() for i in range(18)], partition=1)
    ends = {0: 12, 1: 18}
    consumer = clients(Consumer({"bootstrap.servers": servers, "auto.offset.reset": "earliest",
                                 "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    records, eofs = [], {}
    deadline = time.monotonic() + DEADLINE_S
    while len(eofs) < len(ends) or len(records) < 30:
        assert time.monotonic() < deadline, (len(records), eofs)
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            eofs[msg.partition()] = msg.offset()
            continue
        records.append(msg)
    assert sorted((m.partition(), m.offset()) for m in records) == sorted(placed)
    assert eofs == ends
    assert consumer.assignment() == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    positions = consumer.position([TopicPartition(topic, p) for p in (0, 1)])
    assert {tp.partition: tp.offset for tp in positions} == ends


def test_offsets_of_an_end_of_partition_event_are_not_stored(servers, clients, make_topic):
    """As confluent-kafka refuses ``store_offsets(message=...)`` and ``commit(message=...)``
    for a message carrying an error (_INVALID_ARG), an end-of-partition event is refused:
    it is no record to resume after. The old client stored the event's offset + 1."""
    topic = make_topic()
    produce(servers, topic, [b"only"])
    consumer = clients(Consumer({"bootstrap.servers": servers, "group.id": f"{topic}-g",
                                 "auto.offset.reset": "earliest", "enable.partition.eof": True,
                                 "enable.auto.offset.store": False}))
    consumer.assign([TopicPartition(topic, 0)])
    deadline = time.monotonic() + DEADLINE_S
    while True:
        assert time.monotonic() < deadline, "no end-of-partition event"
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is not None:
            break
    assert msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() == 1
    with pytest.raises(KafkaException) as refused:
        consumer.store_offsets(message=msg)
    assert refused.value.args[0].code() == KafkaError._INVALID_ARG
    with pytest.raises(KafkaException) as refused:
        consumer.commit(message=msg, asynchronous=False)
    assert refused.value.args[0].code() == KafkaError._INVALID_ARG


def test_seek_and_position(servers, clients, make_topic):
    topic = make_topic()
    produce(servers, topic, [f"v{i}".encode() for i in range(10)])
    consumer = clients(Consumer({"bootstrap.servers": servers}))
    tp = TopicPartition(topic, 0)
    consumer.assign([TopicPartition(topic, 0, 3)])
    assert [m.offset() for m in poll_records(consumer, 2)] == [3, 4]
    assert consumer.position([tp])[0].offset == 5

    consumer.seek(TopicPartition(topic, 0, 8))
    assert consumer.position([tp])[0].offset == 8
    assert [m.value() for m in poll_records(consumer, 2)] == [b"v8", b"v9"]

    consumer.seek(TopicPartition(topic, 0, OFFSET_BEGINNING))
    assert poll_records(consumer, 1)[0].offset() == 0
    assert consumer.position([tp])[0].offset == 1

    consumer.seek(TopicPartition(topic, 0, OFFSET_END))
    assert wait_position(consumer, tp) == 10
    produce(servers, topic, [b"after-the-end"])
    assert [(m.offset(), m.value()) for m in poll_records(consumer, 1)] == [(10, b"after-the-end")]


def test_latest_reset_skips_what_was_there(servers, clients, make_topic):
    topic = make_topic()
    produce(servers, topic, [b"old-1", b"old-2"])
    consumer = clients(Consumer({"bootstrap.servers": servers, "auto.offset.reset": "largest"}))
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    assert wait_position(consumer, tp) == 2
    produce(servers, topic, [b"new"])
    assert [m.value() for m in poll_records(consumer, 1)] == [b"new"]


def test_watermarks_and_offsets_for_times(servers, clients, make_topic):
    topic = make_topic()
    base = 1_700_000_000_000
    producer = clients(Producer({"bootstrap.servers": servers}))
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), timestamp=base + 1000 * i)
    assert producer.flush(DEADLINE_S) == 0
    consumer = clients(Consumer({"bootstrap.servers": servers, "auto.offset.reset": "earliest"}))
    tp = TopicPartition(topic, 0)
    assert consumer.get_watermark_offsets(tp, timeout=30) == (0, 5)
    consumer.assign([tp])
    assert [m.timestamp()[1] for m in poll_records(consumer, 5)] == [base + 1000 * i for i in range(5)]
    assert consumer.get_watermark_offsets(tp, cached=True) == (0, 5)
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 2500), TopicPartition(topic, 0, base + 9000)])
    assert [f.offset for f in found] == [3, -1]


def test_consume_batches_and_pause_resume(servers, clients, make_topic):
    topic = make_topic(partitions=2)
    produce(servers, topic, [b"p0"] * 5, partition=0)
    produce(servers, topic, [b"p1"] * 5, partition=1)
    consumer = clients(Consumer({"bootstrap.servers": servers, "auto.offset.reset": "earliest"}))
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    consumer.pause([TopicPartition(topic, 1)])
    got = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 5:
        assert time.monotonic() < deadline
        got.extend(consumer.consume(num_messages=10, timeout=1.0))
    assert {m.partition() for m in got} == {0} and len(got) == 5
    assert consumer.consume(num_messages=10, timeout=0.3) == []  # partition 1 is paused
    consumer.resume([TopicPartition(topic, 1)])
    assert {m.partition() for m in poll_records(consumer, 5)} == {1}


def test_a_closed_consumer_refuses_calls(servers):
    consumer = Consumer({"bootstrap.servers": servers})
    consumer.close()
    consumer.close()  # closing twice is harmless
    with pytest.raises(RuntimeError):
        consumer.poll(0)
    with pytest.raises(RuntimeError):
        consumer.assign([TopicPartition("t", 0)])
