"""The Kafka listener of a broker served by two request processes (issue 41): one
broker to confluent-kafka whichever process a connection reaches
(:mod:`laketail.kafka.siblings`).

Real ``laketail serve`` with ``laketail.request.processes=2``: both processes accept on
the Kafka port, each leads two of a topic's four partitions. What must hold: Metadata
names one broker, the configured ``broker.id``, at the one endpoint; keyed records with
acks 0, 1 and all land on their key's partition and come back exactly once, in order;
a Produce costs at most one hand-off to the sibling (counted against librdkafka's own
count of Produce requests, and for kafka-python's Produce over four partitions) and
never an HTTP forward; a consumer group commits and
re-joins from its commit; idempotent and transactional producers work. Which process
leads what is read from the ``_system`` tables, where the two stay distinct members.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import defaultdict
from typing import Iterator

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from laketail.cluster.store import ClusterStore
from laketail.partitioner import partition_for_key
from laketail.request_processes import PROCESS_ID_STRIDE
from tests.conftest import running
from tests.integration.support import wait_until
from tests.kafka_listener.conftest import KafkaBroker

pytestmark = pytest.mark.integration

QUIET = {"log_level": 0}
#: the Java client's partitioner: laketail's keyed REST produce picks the same partitions
MURMUR2 = {"partitioner": "murmur2_random"}
FIRST, SECOND = 0, PROCESS_ID_STRIDE


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-two") / "data", env={"LAKETAIL_REQUEST_PROCESSES": "2"})
    for started in running(broker):
        wait_until(lambda: {b for b, r in ClusterStore(str(broker.data_dir)).brokers().items() if r.alive}
                   == {FIRST, SECOND}, "both request processes to be live members")
        # the controller spreads a new topic's leaders over the members it has seen alive:
        # probe until it counts the second process too
        wait_until(lambda: sorted(_leaders(broker, _create(broker, 2)).values()) == [FIRST, SECOND],
                   "a new topic led by both processes", every_s=0.5)
        yield started


def _create(broker: KafkaBroker, partitions: int) -> str:
    name = f"rp-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    (future,) = admin.create_topics([NewTopic(name, partitions, 1)]).values()
    future.result(30)
    return name


def _leaders(broker: KafkaBroker, name: str) -> dict[int, int]:
    """The request process (member id) leading each partition, from the ``_system`` tables."""
    def led() -> dict[int, int] | None:
        leaders = {p: r.leader for (t, p), r in ClusterStore(str(broker.data_dir)).partitions().items() if t == name}
        return leaders if leaders and all(v >= 0 for v in leaders.values()) else None

    return wait_until(led, f"leaders for {name}")


def _topic(broker: KafkaBroker, partitions: int = 4) -> str:
    """A topic whose partitions the two processes lead half each."""
    name = _create(broker, partitions)
    leaders = _leaders(broker, name)
    assert sorted(leaders.values()) == [FIRST] * (partitions // 2) + [SECOND] * (partitions // 2), leaders
    return name


def _scrape(broker: KafkaBroker) -> dict[str, dict[str, float]]:
    """Per process (its member id): its hand-offs sent and received, HTTP forwards and
    Kafka requests passed on, from /metrics on fresh connections until both answered."""
    seen: dict[str, dict[str, float]] = {}

    def both() -> bool:
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            text = client.get("/metrics").text
        ((process, sent),) = re.findall(
            r'laketail_request_process_handoffs_total\{process="(\d+)",role="sent"\} (\S+)', text)
        (received,) = re.findall(
            rf'laketail_request_process_handoffs_total\{{process="{process}",role="received"\}} (\S+)', text)
        (http,) = re.findall(r"^laketail_produce_forwards_http_total (\S+)", text, re.M)
        (passed,) = re.findall(rf'laketail_kafka_requests_passed_total\{{process="{process}"\}} (\S+)', text)
        seen[process] = {"sent": float(sent), "received": float(received), "http": float(http),
                         "passed": float(passed)}
        return len(seen) == 2

    wait_until(both, "a scrape of /metrics from each process")
    return seen


def _consume_all(broker: KafkaBroker, topic: str, count: int, **config) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` by partition, as (offset, value) in the order consumed."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET, **config})
    consumer.subscribe([topic])
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    deadline = time.monotonic() + 90
    try:
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.value()))
        extra = consumer.poll(2.0)  # nothing more than produced
        assert extra is None, (extra.partition(), extra.offset())
    finally:
        consumer.close()
    return got


def test_metadata_names_one_broker_whichever_process_answers(two):
    topic = _topic(two)
    for _ in range(6):  # a client each: the kernel places each on either process
        metadata = AdminClient({"bootstrap.servers": two.bootstrap, **QUIET}).list_topics(timeout=30)
        assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {0: ("127.0.0.1", two.kafka_port)}
        assert metadata.controller_id == 0
        partitions = metadata.topics[topic].partitions
        assert {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in partitions.items()} == {
            p: (0, [0], [0]) for p in range(4)}


def _produce_keyed(broker: KafkaBroker, topic: str, producer_no: int,
                   delivered: dict[int, list[tuple[int, bytes]]]) -> int:
    """500 keyed records with acks=all from a new client; the Produce requests it sent,
    as librdkafka counts them."""
    stats: list[dict] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "statistics.interval.ms": 100, "stats_cb": lambda raw: stats.append(json.loads(raw)),
                         **MURMUR2, **QUIET})
    errors: list = []

    def report(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            assert msg.partition() == partition_for_key(msg.key(), 4)
            delivered[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(500):
        producer.produce(topic, key=f"key-{producer_no}-{i}".encode(), value=f"v-{producer_no}-{i}".encode(),
                         on_delivery=report)
    assert producer.flush(60) == 0 and errors == []

    def counted() -> int:
        producer.poll(0.1)
        last = stats[-1] if stats else None
        if last is None or last["txmsgs"] != 500:
            return 0
        return sum(b["req"].get("Produce", 0) for b in last["brokers"].values())

    return wait_until(counted, "librdkafka statistics covering every record")


def test_keyed_records_with_acks_all_come_back_once_in_order_after_one_hand_off_per_request(two):
    topic = _topic(two)
    before = _scrape(two)
    delivered: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    # a connection each: both processes take some
    produce_requests = sum(_produce_keyed(two, topic, n, delivered) for n in range(4))
    assert sum(map(len, delivered.values())) == 2000
    assert all(delivered[p] for p in range(4))
    got = _consume_all(two, topic, 2000)
    for p in range(4):
        assert got[p] == sorted(delivered[p]), p  # each exactly once, in offset order
        assert [o for o, _ in got[p]] == list(range(len(got[p])))
    after = _scrape(two)
    sent = sum(after[k]["sent"] - before[k]["sent"] for k in after)
    received = sum(after[k]["received"] - before[k]["received"] for k in after)
    assert 0 < sent == received <= produce_requests, (sent, received, produce_requests)
    assert all(c["http"] == 0 for c in after.values()), after


def test_a_produce_over_four_partitions_costs_one_hand_off(two):
    """kafka-python sends a node's ready batches in one Produce (librdkafka sends one
    partition per Produce): four partitions, two led by the sibling of the process the
    connection reached, cost one hand-off per request, not one per partition."""
    from kafka import KafkaProducer

    topic = _topic(two)
    before = _scrape(two)
    producer = KafkaProducer(bootstrap_servers=two.bootstrap, acks="all", linger_ms=60_000)
    rounds = 6
    try:
        for r in range(rounds):
            futures = [producer.send(topic, value=f"{r}-{p}".encode(), partition=p) for p in range(4)]
            producer.flush(60)  # the four batches ready at once: one Produce
            assert [f.get(30).offset for f in futures] == [r] * 4
    finally:
        producer.close()
    after = _scrape(two)
    sent = {k: after[k]["sent"] - before[k]["sent"] for k in after}
    received = {k: after[k]["received"] - before[k]["received"] for k in after}
    assert sorted(sent.values()) == sorted(received.values()) == [0, rounds], (sent, received)


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_0_and_1_reach_partitions_either_process_leads(two, acks):
    topic = _topic(two)
    for producer_no in range(2):
        producer = Producer({"bootstrap.servers": two.bootstrap, "acks": acks, **MURMUR2, **QUIET})
        for i in range(50):
            producer.produce(topic, key=f"{acks}-{producer_no}-{i}".encode(), value=f"{producer_no}-{i}".encode())
        assert producer.flush(60) == 0
    got = _consume_all(two, topic, 100)
    assert sorted(v for vs in got.values() for _, v in vs) == sorted(
        f"{n}-{i}".encode() for n in range(2) for i in range(50))
    for p, records in got.items():
        assert [o for o, _ in records] == list(range(len(records)))
        assert all(partition_for_key(f"{acks}-{v.decode()}".encode(), 4) == p for _, v in records)


def test_a_group_commits_and_rejoins_from_its_commit_on_either_process(two):
    """Each consumer is a new client: its coordinator connection lands on either process,
    and the one that does not run the coordinators passes its group requests on. Until
    that has happened at least once, another consumer commits and the next re-joins."""
    topic = _topic(two)
    producer = Producer({"bootstrap.servers": two.bootstrap, "acks": "all", **MURMUR2, **QUIET})
    for i in range(400):
        producer.produce(topic, key=f"g{i}".encode(), value=f"g{i}".encode())
    assert producer.flush(60) == 0
    group = f"group-{uuid.uuid4().hex[:8]}"
    seen: list[bytes] = []
    before = _scrape(two)
    rounds = 0
    while True:
        rounds += 1
        consumer = Consumer({"bootstrap.servers": two.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, **QUIET})
        consumer.subscribe([topic])
        batch: list = []
        deadline = time.monotonic() + 60
        while len(batch) < 40 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                batch.append(msg)
        assert len(batch) == 40
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=30)
        positions = {tp.partition: tp.offset for tp in consumer.position(
            [TopicPartition(topic, p) for p in range(4)])}
        # what this member consumed from is committed at its position (the others as before)
        assert {tp.partition: tp.offset for tp in committed if positions[tp.partition] >= 0} == {
            p: o for p, o in positions.items() if o >= 0}
        consumer.close()
        seen += [m.value() for m in batch]
        passed = _scrape(two)[str(SECOND)]["passed"] - before.get(str(SECOND), {"passed": 0})["passed"]
        if (passed > 0 and rounds >= 2) or rounds == 8:
            break
    assert passed > 0, "no consumer's group requests reached the process without the coordinators"
    assert len(seen) == len(set(seen)) == 40 * rounds  # each round went on from the last commit
    rest = _consume_all(two, topic, 400)
    assert set(seen) <= {v for vs in rest.values() for _, v in vs}


def test_idempotent_and_transactional_producers_on_either_process(two):
    topic = _topic(two)
    for round_no in range(3):  # a new client each: its connections land on either process
        producer = Producer({"bootstrap.servers": two.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             **MURMUR2, **QUIET})
        reports: list = []
        for i in range(200):
            producer.produce(topic, key=f"i{round_no}-{i}".encode(), value=f"idem-{round_no}-{i}".encode(),
                             on_delivery=lambda err, msg, out=reports: out.append(err))
        assert producer.flush(60) == 0 and reports == [None] * 200
        txn = Producer({"bootstrap.servers": two.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
                        **MURMUR2, **QUIET})
        txn.init_transactions(60)
        txn.begin_transaction()
        for i in range(20):
            txn.produce(topic, key=f"t{round_no}-{i}".encode(), value=f"txn-{round_no}-{i}".encode())
        txn.commit_transaction(60)
        txn.begin_transaction()
        txn.produce(topic, key=b"aborted", value=b"aborted")
        txn.abort_transaction(60)
    got = _consume_all(two, topic, 660, **{"isolation.level": "read_committed"})
    values = sorted(v for vs in got.values() for _, v in vs)
    assert values == sorted([f"idem-{r}-{i}".encode() for r in range(3) for i in range(200)]
                            + [f"txn-{r}-{i}".encode() for r in range(3) for i in range(20)])
