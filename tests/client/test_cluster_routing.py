"""The Python client on a real three-broker cluster (issue 7): a Producer that knows one
broker delivers to the partitions the other brokers lead, and survives a leader's kill -9.

One cluster (:class:`tests.replication.support.Cluster`: three ``laketail serve``
processes on one data root, each with its own log dir and advertised URL), one topic of
three partitions, replication factor 3, ``min.insync.replicas`` 2, so each broker leads
one partition. ``bootstrap.servers`` lists broker 0 only:

1. the Producer's metadata routes each partition to its leader's URL, and every record
   is delivered; an AdminClient's ``list_topics()`` names the three brokers and each
   partition's leader, replicas and ISR; a Consumer (also knowing only broker 0) reads
   every record back;
2. while the same Producer keeps producing to every partition, the leader of a
   partition broker 0 does not lead is killed -9. Every record gets exactly one
   delivery report (success, or a reported error); the records of the killed leader's
   partition produced after the kill are delivered (through its new leader); read back
   from offset 0, the log holds every delivered record at its reported offset and, for
   an idempotent producer, no value twice.

Run with and without ``enable.idempotence`` (a cluster each): the plain producer
shows the routing and the failover, the idempotent one also that retries across the
new leader are not written twice.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from laketail.client import OFFSET_BEGINNING, AdminClient, Consumer, KafkaError, Producer, TopicPartition
from tests.replication.support import Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

PARTITIONS = 3
#: How long the producer goes on before and after the kill: past the election bound
#: (session timeout + a few seconds), so records meet the leaderless window and the new leader.
BEFORE_KILL_S = 2.0
AFTER_KILL_S = 12.0
#: Failure bounds, not speed claims (the machine is shared).
DELIVERY_TIMEOUT_MS = 60_000
FLUSH_S = 180.0


class Reports:
    """Delivery reports by value: (error or None, partition, offset), each value once."""

    def __init__(self) -> None:
        self.by_value: dict[bytes, tuple[KafkaError | None, int, int]] = {}
        self.twice: list[bytes] = []

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if msg.value() in self.by_value:
            self.twice.append(msg.value())
        self.by_value[msg.value()] = (err, msg.partition(), msg.offset())

    def failed(self) -> dict[bytes, KafkaError]:
        return {v: err for v, (err, _, _) in self.by_value.items() if err is not None}

    def delivered(self) -> dict[bytes, tuple[int, int]]:
        return {v: (p, o) for v, (err, p, o) in self.by_value.items() if err is None}


def read_back(servers: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every partition from offset 0 to its end, through a Consumer: (offset, value)."""
    consumer = Consumer({"bootstrap.servers": servers, "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        logs: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

        def done() -> bool:
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                logs[msg.partition()].append((msg.offset(), msg.value()))
            return all(not ends[p] or (logs[p] and logs[p][-1][0] >= ends[p] - 1) for p in range(PARTITIONS))

        wait_until(done, f"reading {topic} up to {ends}", every_s=0)
        return logs
    finally:
        consumer.close()


def produce_for(producer: Producer, topic: str, seconds: float, stem: str, reports: Reports) -> list[bytes]:
    """Produce to every partition in turn for ``seconds``; the values sent."""
    sent = []
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        value = f"{stem}-{i}".encode()
        producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=reports)
        sent.append(value)
        producer.poll(0)
        i += 1
        time.sleep(0.01)
    return sent


@pytest.mark.timeout(900)
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_a_producer_knowing_one_broker_reaches_every_leader_and_survives_a_leader_kill(
        tmp_path: Path, idempotent: bool):
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        run(cluster, idempotent)
    except BaseException:
        print(cluster.output())
        raise
    finally:
        cluster.close()


def run(cluster: Cluster, idempotent: bool) -> None:
    topic = cluster.make_topic(f"routing-{uuid.uuid4().hex[:8]}", PARTITIONS, 3, {"min.insync.replicas": "2"})
    leaders = {p: cluster.leader(topic, p) for p in range(PARTITIONS)}
    assert sorted(leaders.values()) == [0, 1, 2], f"leaders are spread over the brokers: {leaders}"
    bootstrap = cluster[0].url
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": idempotent, "acks": "all", "linger.ms": 5,
        "retry.backoff.ms": 100, "delivery.timeout.ms": DELIVERY_TIMEOUT_MS,
    })
    reports = Reports()
    try:
        # 1. routed to each leader, delivered, listed, read back.
        first = [f"first-{i}".encode() for i in range(30 * PARTITIONS)]
        for i, value in enumerate(first):
            producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=reports)
        assert producer.flush(FLUSH_S) == 0
        assert reports.failed() == {}
        assert {p: producer._metadata.leader_url(topic, p) for p in range(PARTITIONS)} == {
            p: cluster[b].url for p, b in leaders.items()}

        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            meta = admin.list_topics(topic, timeout=30)
        assert {i: (b.host, b.port) for i, b in meta.brokers.items()} == {
            i: ("127.0.0.1", cluster[i].port) for i in range(3)}
        parts = meta.topics[topic].partitions
        assert {p: (m.leader, sorted(m.replicas), sorted(m.isrs)) for p, m in parts.items()} == {
            p: (b, [0, 1, 2], [0, 1, 2]) for p, b in leaders.items()}

        logs = read_back(bootstrap, topic)
        assert {v: (p, o) for p, log in logs.items() for o, v in log} == reports.delivered()

        # 2. a leader other than the bootstrap broker is killed while records keep coming.
        victim_partition = min(p for p, b in leaders.items() if b != 0)
        victim = leaders[victim_partition]
        sent = produce_for(producer, topic, BEFORE_KILL_S, "before", reports)
        cluster[victim].kill9()
        after = produce_for(producer, topic, AFTER_KILL_S, "after", reports)
        assert producer.flush(FLUSH_S) == 0
    finally:
        producer.close()

    produced = first + sent + after
    assert not reports.twice, f"values reported twice: {reports.twice[:5]}"
    assert set(reports.by_value) == set(produced), "every record has one delivery report"
    failed = reports.failed()
    by_partition = Counter((reports.by_value[v][1], e.name()) for v, e in failed.items())
    print(f"{len(produced)} produced, {len(failed)} failed: {dict(by_partition)} (partition, error); "
          f"killed broker {victim} leading partition {victim_partition}; now: {cluster.partitions(topic)}")
    delivered = reports.delivered()
    moved = [v for i, v in enumerate(after) if i % PARTITIONS == victim_partition]
    assert any(v in delivered for v in moved[len(moved) // 2:]), (
        f"nothing produced to partition {victim_partition} after its leader {victim} was killed was delivered")
    new_leader = cluster.leader(topic, victim_partition)
    assert new_leader not in (victim, -1)

    logs = read_back(bootstrap, topic)
    in_log = Counter(v for log in logs.values() for _, v in log)
    twice = [v for v, n in in_log.items() if n > 1]
    print(f"{len(twice)} value(s) written twice")
    if idempotent:
        assert twice == [], "idempotence: no value is written twice"
    found = {v: (p, o) for p, log in logs.items() for o, v in log}
    missing = {v: where for v, where in delivered.items() if found.get(v) != where}
    assert missing == {}, f"delivered records not at their reported offsets: {list(missing.items())[:5]}"
    assert set(found) <= set(produced)
