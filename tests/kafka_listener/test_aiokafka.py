"""aiokafka (asyncio, PyPI) against a real broker's Kafka listener: a column of the
client matrix (README "Kafka clients"): produce with each ``acks``, consume from the
beginning, and a consumer group of two members that rebalances and commits."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

pytestmark = pytest.mark.integration


def _topic(kafka_broker, partitions: int = 1) -> str:
    name = f"aio-{uuid.uuid4().hex[:10]}"
    assert kafka_broker.rest.create_topic(name, partitions).status_code in (200, 201)
    return name


async def _produce(bootstrap: str, topic: str, values: list[bytes], **config) -> list:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=b"k-%d" % i, value=v, headers=[("n", b"%d" % i)])
                   for i, v in enumerate(values)]
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def _read(consumer: AIOKafkaConsumer, count: int) -> list:
    got: list = []
    while len(got) < count:
        batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 60)
        for msgs in batches.values():
            got.extend(msgs)
    return got


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_produce_with_each_acks_and_consume_from_the_beginning(kafka_broker, acks):
    topic = _topic(kafka_broker)
    values = [b"v%d" % i for i in range(20)]

    async def run() -> tuple[list, list]:
        metas = await _produce(kafka_broker.bootstrap, topic, values, acks=acks, compression_type="gzip")
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            return metas, await _read(consumer, 20)
        finally:
            await consumer.stop()

    metas, got = asyncio.run(run())
    if acks != 0:  # acks=0: the client never learns an offset
        assert [m.offset for m in metas] == list(range(20))
    assert [(m.offset, m.key, m.value, list(m.headers)) for m in got] == [
        (i, b"k-%d" % i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(20)]


def test_idempotent_producer_keeps_offsets_dense(kafka_broker):
    topic = _topic(kafka_broker, 2)
    metas = asyncio.run(_produce(kafka_broker.bootstrap, topic, [b"%d" % i for i in range(40)],
                                 acks="all", enable_idempotence=True))
    by_partition: dict[int, list[int]] = {}
    for m in metas:
        by_partition.setdefault(m.partition, []).append(m.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())


def test_a_group_of_two_rebalances_reads_everything_and_commits(kafka_broker):
    topic = _topic(kafka_broker, 2)
    group = f"aio-g-{uuid.uuid4().hex[:8]}"
    asyncio.run(_produce(kafka_broker.bootstrap, topic, [b"%d" % i for i in range(20)], acks="all"))

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=10_000, heartbeat_interval_ms=500)

    async def run() -> tuple[set, set, list]:
        first = member()
        await first.start()
        try:
            await first.getmany(timeout_ms=100)
            while len(first.assignment()) != 2:  # alone, it gets both partitions
                await first.getmany(timeout_ms=200)
            second = member()
            await second.start()
            try:
                # the join rebalances the group: each member ends with one partition
                while len(first.assignment()) != 1 or len(second.assignment()) != 1:
                    await asyncio.wait_for(asyncio.gather(first.getmany(timeout_ms=200),
                                                          second.getmany(timeout_ms=200)), 60)
                a, b = set(first.assignment()), set(second.assignment())
                for c in (first, second):
                    for tp in c.assignment():
                        c.seek(tp, 0)
                got: list = []
                while len(got) < 20:  # the keys spread the records over both partitions
                    for batches in await asyncio.wait_for(asyncio.gather(first.getmany(timeout_ms=500),
                                                                         second.getmany(timeout_ms=500)), 60):
                        for msgs in batches.values():
                            got.extend(msgs)
                await first.commit()
                await second.commit()
            finally:
                await second.stop()
            return a, b, got
        finally:
            await first.stop()

    a, b, got = asyncio.run(run())
    assert a | b == {TopicPartition(topic, 0), TopicPartition(topic, 1)} and not a & b
    assert sorted(int(m.value) for m in got) == list(range(20))
    # the commits are the group's, seen over HTTP (laketail's /v1 groups API)
    resp = httpx.post(f"{kafka_broker.url}/v1/groups/{group}/committed",
                      json={"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]})
    assert resp.status_code == 200, resp.text
    assert sum(o["offset"] for o in resp.json()["offsets"]) == 20
