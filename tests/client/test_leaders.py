"""The client finds partition leaders from metadata and retries when leadership moves.

Against :mod:`stub_cluster` (real HTTP servers on 127.0.0.1 with scripted answers):
produce and fetch requests go to the partition's leader, not to the bootstrap server;
NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS(_AFTER_APPEND) and a
leader that stopped answering make the producer ask for metadata again and retry the
same stamped batch (nothing is written twice); ``retries`` and ``delivery.timeout.ms``
bound the retries. Against the session's real broker: its metadata names broker 0 as
every partition's leader. Metadata parsing and the error mapping are checked as pure
functions.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from laketail.client import AdminClient, Consumer, KafkaError, Producer, TopicPartition
from laketail.client.admin_types import PartitionMetadata
from laketail.client.gateway import Gateway
from laketail.client.metadata import BrokerAddress, Metadata, parse_brokers, parse_partition
from laketail.errors import NotEnoughReplicas, NotEnoughReplicasAfterAppend, NotLeaderOrFollower, from_body
from tests.client.stub_cluster import StubCluster, answer, leader_not_available

RECORDS = "/v1/topics/t/partitions/{}/records"


# -- pure -----------------------------------------------------------------------------------------


def test_brokers_are_reached_at_their_url_else_at_host_and_port():
    doc = {"data": [
        {"broker_id": 0, "host": "a", "port": 8082, "url": "http://a.example:9000/"},
        {"broker_id": 2, "host": "b", "port": 8083},
        {"broker_id": 3, "host": None, "port": None},
    ]}
    assert parse_brokers(doc) == {
        0: BrokerAddress(0, "a", 8082, "http://a.example:9000"),
        2: BrokerAddress(2, "b", 8083, "http://b:8083"),
        3: BrokerAddress(3, None, -1, None),
    }


def test_a_partition_names_its_leader_replicas_and_isr():
    doc = {"partition": 1, "leader": 2, "replicas": [
        {"broker": 2, "leader": True, "in_sync": True},
        {"broker": 0, "leader": False, "in_sync": False},
        {"broker": 1, "leader": False, "in_sync": True},
    ]}
    assert parse_partition(doc) == PartitionMetadata(id=1, leader=2, replicas=[2, 0, 1], isrs=[2, 1])
    offline = parse_partition({"partition": 0, "leader": -1, "replicas": [{"broker": 1, "in_sync": False}]})
    assert (offline.leader, offline.isrs) == (-1, [])


@pytest.mark.parametrize(("status", "body", "code"), [
    (*answer(NotLeaderOrFollower("moved")), KafkaError.NOT_LEADER_FOR_PARTITION),
    (*leader_not_available("t", 0), KafkaError.LEADER_NOT_AVAILABLE),
    (*answer(NotEnoughReplicas("short")), KafkaError.NOT_ENOUGH_REPLICAS),
    (*answer(NotEnoughReplicasAfterAppend("shrank")), KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
])
def test_leadership_errors_are_retriable_with_kafkas_codes(status: int, body: dict, code: int):
    err = KafkaError.from_laketail(from_body(status, body))
    assert (err.code(), err.retriable()) == (code, True)
    assert err.str().startswith(body["message"].split(":")[0])


# -- routing --------------------------------------------------------------------------------------


def produce_all(conf: dict[str, Any], values: list[bytes], partition: int = 0, timeout_s: float = 30) -> list[tuple]:
    """Produce ``values`` with one Producer; (error code or None, offset, value) per report."""
    reports: list[tuple] = []
    producer = Producer({"linger.ms": 0, "retry.backoff.ms": 10, **conf})
    try:
        for v in values:
            producer.produce("t", v, partition=partition, on_delivery=lambda err, msg: reports.append(
                (None if err is None else err.code(), msg.offset(), msg.value())))
        assert producer.flush(timeout_s) == 0
    finally:
        producer.close()
    return reports


def test_produce_goes_to_the_leader_not_the_bootstrap_server():
    with StubCluster(3, {"t": 3}) as cluster:
        cluster.leaders.update({("t", 1): 1, ("t", 2): 2})
        for p in range(3):
            reports = produce_all({"bootstrap.servers": cluster.url(0)}, [b"a", b"b"], partition=p)
            assert reports == [(None, 0, b"a"), (None, 1, b"b")]
            assert {b for b, _ in cluster.sent("POST", RECORDS.format(p))} == {p}
        assert cluster.logs[("t", 2)] == [b"a", b"b"]


def test_without_broker_addresses_requests_go_to_the_bootstrap_server():
    with StubCluster(2, {"t": 1}) as cluster:
        cluster.leaders[("t", 0)] = 1
        cluster.v3_brokers = False  # ids only: nowhere to route to
        assert produce_all({"bootstrap.servers": cluster.url(0)}, [b"x"]) == [(None, 0, b"x")]
        assert [b for b, _ in cluster.sent("POST", RECORDS.format(0))] == [0]


def test_not_leader_refreshes_metadata_and_retries_the_same_batch_at_the_new_leader():
    with StubCluster(2, {"t": 1}) as cluster:
        cluster.leaders[("t", 0)] = 1

        def moved(broker_id: int, topic: str, partition: int):
            if broker_id == 1:  # the leader moves to broker 0 as broker 1 refuses
                cluster.leaders[(topic, partition)] = 0
                return answer(NotLeaderOrFollower(f"partition {partition} of '{topic}' is led by broker 0"))
            return None

        cluster.on_produce = moved
        reports = produce_all({"bootstrap.servers": cluster.url(0)}, [b"a", b"b", b"c"])
        assert reports == [(None, 0, b"a"), (None, 1, b"b"), (None, 2, b"c")]
        sent = cluster.sent("POST", RECORDS.format(0))
        assert [b for b, _ in sent] == [1, 0]
        assert sent[0][1] == sent[1][1]  # same producer id, epoch and sequence
        lookups = cluster.sent("GET", "/topics/t/partitions")
        assert len(lookups) >= 2  # asked again after the refusal
        assert cluster.logs[("t", 0)] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("refusal", ["leader_not_available", "not_enough_replicas"])
def test_a_partition_without_leader_or_replicas_is_retried_until_it_has_them(refusal: str):
    with StubCluster(1, {"t": 1}) as cluster:
        failures = {"left": 3}

        def unavailable(broker_id: int, topic: str, partition: int):
            if failures["left"] == 0:
                return None
            failures["left"] -= 1
            if refusal == "leader_not_available":
                return leader_not_available(topic, partition)
            return answer(NotEnoughReplicas("ISR 1 < min.insync.replicas 2"))

        cluster.on_produce = unavailable
        reports = produce_all({"bootstrap.servers": cluster.url(0)}, [b"a"])
        assert reports == [(None, 0, b"a")]
        sent = cluster.sent("POST", RECORDS.format(0))
        assert len(sent) == 4 and all(params == sent[0][1] for _, params in sent)


def test_not_enough_replicas_after_append_is_retried_and_deduplicated():
    with StubCluster(1, {"t": 1}) as cluster:
        calls = {"n": 0}

        def appended_but_short(broker_id: int, topic: str, partition: int):
            calls["n"] += 1
            if calls["n"] == 1:  # written, then the ISR shrank: the answer says so
                cluster.logs[(topic, partition)].append(b"a")
                cluster.seen[(topic, partition, 7, 0)] = 0
                return answer(NotEnoughReplicasAfterAppend("ISR shrank below min.insync.replicas"))
            return None

        cluster.on_produce = appended_but_short
        assert produce_all({"bootstrap.servers": cluster.url(0)}, [b"a"]) == [(None, 0, b"a")]
        assert cluster.logs[("t", 0)] == [b"a"]  # once


def test_retries_and_delivery_timeout_bound_the_retries():
    with StubCluster(1, {"t": 1}) as cluster:
        cluster.on_produce = lambda b, t, p: leader_not_available(t, p)
        reports = produce_all({"bootstrap.servers": cluster.url(0), "retries": 2}, [b"a", b"b"])
        assert [r[0] for r in reports] == [KafkaError.LEADER_NOT_AVAILABLE] * 2
        assert len(cluster.sent("POST", RECORDS.format(0))) == 3  # the first attempt and 2 retries

        start = time.monotonic()
        reports = produce_all({"bootstrap.servers": cluster.url(0), "delivery.timeout.ms": 700,
                               "retry.backoff.ms": 50}, [b"c"])
        # the last error when the next retry would be too late, _MSG_TIMED_OUT when the
        # batch expires while it waits for that retry: whichever comes first
        assert reports[0][0] in (KafkaError.LEADER_NOT_AVAILABLE, KafkaError._MSG_TIMED_OUT)
        assert 0.6 < time.monotonic() - start < 60  # at least the timeout; the bound only fails a hang


def test_a_leader_that_stops_answering_is_backed_off_and_the_batch_retried_elsewhere():
    with StubCluster(3, {"t": 1}) as cluster:
        cluster.leaders[("t", 0)] = 2
        producer = Producer({"bootstrap.servers": cluster.url(0), "linger.ms": 0, "retry.backoff.ms": 10,
                             "reconnect.backoff.ms": 60_000})  # still backed off when checked below
        reports: list[Any] = []
        try:
            producer.produce("t", b"a", partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
            assert producer.flush(30) == 0
            cluster.brokers[2].stop()  # killed: its port refuses connections

            def elected(broker_id: int, topic: str, partition: int):
                cluster.leaders[(topic, partition)] = 1  # the controller moved the leadership
                return answer(NotLeaderOrFollower("broker 2 is gone"))

            cluster.on_produce = lambda b, t, p: elected(b, t, p) if b == 0 else None
            producer.produce("t", b"b", partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
            assert producer.flush(30) == 0
            assert not producer._gateway.reachable(cluster.url(2))
        finally:
            producer.close()
        assert reports == [(None, 0), (None, 1)]
        assert [b for b, _ in cluster.sent("POST", RECORDS.format(0))][-1] == 1
        assert cluster.logs[("t", 0)] == [b"a", b"b"]


def test_metadata_comes_from_any_bootstrap_server_that_answers():
    with StubCluster(2, {"t": 1}) as cluster:
        cluster.leaders[("t", 0)] = 1
        cluster.brokers[0].stop()
        reports = produce_all({"bootstrap.servers": f"{cluster.url(0)},{cluster.url(1)}"}, [b"a"])
        assert reports == [(None, 0, b"a")]
        assert {b for b, _ in cluster.sent("GET", "/topics/t/partitions")} == {1}


def test_with_its_only_bootstrap_server_gone_the_producer_asks_the_brokers_metadata_named():
    with StubCluster(3, {"t": 1}) as cluster:
        cluster.leaders[("t", 0)] = 1
        producer = Producer({"bootstrap.servers": cluster.url(0), "linger.ms": 0, "retry.backoff.ms": 10,
                             "reconnect.backoff.ms": 60_000})
        reports: list[Any] = []

        def send(value: bytes) -> None:
            producer.produce("t", value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
            assert producer.flush(30) == 0

        try:
            send(b"a")
            cluster.brokers[0].stop()  # the bootstrap server
            cluster.brokers[1].stop()  # the leader, the last to answer
            cluster.leaders[("t", 0)] = 2
            send(b"b")  # broker 2, the one left of those metadata named, takes it (and would forward it)
            asked = len(cluster.sent("GET", "/topics/t/partitions"))
            send(b"c")  # the leader is known to be unreachable: metadata first
        finally:
            producer.close()
        assert reports == [(None, 0), (None, 1), (None, 2)]
        assert [b for b, _ in cluster.sent("POST", RECORDS.format(0))] == [1, 2, 2]
        assert [b for b, _ in cluster.sent("GET", "/topics/t/partitions")[asked:]] == [2]
        assert producer._metadata.leader("t", 0) == 2


def test_gateway_backs_off_an_unreachable_server_doubling_up_to_the_maximum():
    now = [100.0]
    gateway = Gateway(("http://127.0.0.1:1",), reconnect_backoff_ms=100, reconnect_backoff_max_ms=300,
                      monotonic=lambda: now[0])
    try:
        gateway.learn(["http://a:1", "http://127.0.0.1:1/"])
        assert gateway.candidates("http://leader:1") == ["http://leader:1", "http://127.0.0.1:1", "http://a:1"]
        for backoff in (0.1, 0.2, 0.3, 0.3):
            gateway._failed("http://leader:1")
            assert not gateway.reachable("http://leader:1")
            assert gateway.candidates("http://leader:1")[-1] == "http://leader:1"
            now[0] += backoff - 0.001
            assert not gateway.reachable("http://leader:1")
            now[0] += 0.001
            assert gateway.reachable("http://leader:1")
    finally:
        gateway.close()


def test_an_unreachable_leader_is_not_routed_to_and_its_topic_asked_for_again():
    with StubCluster(2, {"t": 1}) as cluster:
        cluster.leaders[("t", 0)] = 1
        cluster.advertised[1] = "http://127.0.0.1:1"  # advertises an address nobody listens on
        gateway = Gateway((cluster.url(0),), reconnect_backoff_ms=60_000)
        metadata = Metadata(gateway, 300_000, refresh_backoff_ms=0)
        try:
            assert metadata.leader_url("t", 0) == "http://127.0.0.1:1"
            resp = gateway.request("GET", "/topics/t/partitions", broker=metadata.leader_url("t", 0))
            assert resp.status_code == 200  # broker 0 answered instead
            assert not gateway.reachable("http://127.0.0.1:1")
            asked = len(cluster.sent("GET", "/topics/t/partitions"))
            assert metadata.leader_url("t", 0) is None
            metadata.leader_url("t", 0)
            assert len(cluster.sent("GET", "/topics/t/partitions")) > asked
        finally:
            gateway.close()


# -- the consumer ---------------------------------------------------------------------------------


def test_fetch_goes_to_the_leader_and_follows_it_when_it_moves():
    with StubCluster(2, {"t": 1}) as cluster:
        cluster.leaders[("t", 0)] = 1
        cluster.logs[("t", 0)].extend([b"a", b"b"])
        consumer = Consumer({"bootstrap.servers": cluster.url(0), "retry.backoff.ms": 10,
                             "enable.auto.commit": False, "fetch.wait.max.ms": 50})
        try:
            consumer.assign([TopicPartition("t", 0, 0)])
            got = consume(consumer, 2)
            assert {b for b, _ in cluster.sent("GET", RECORDS.format(0))} == {1}

            def moved(broker_id: int, topic: str, partition: int):
                if broker_id == 1:
                    cluster.leaders[(topic, partition)] = 0
                    return answer(NotLeaderOrFollower("led by broker 0"))
                return None

            cluster.on_fetch = moved
            cluster.logs[("t", 0)].append(b"c")
            got += consume(consumer, 1)
        finally:
            consumer.close()
        assert got == [b"a", b"b", b"c"]
        assert cluster.sent("GET", RECORDS.format(0))[-1][0] == 0


def consume(consumer: Consumer, n: int, timeout_s: float = 30) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            out.append(msg.value())
    return out


# -- list_topics() --------------------------------------------------------------------------------


def test_list_topics_names_brokers_and_each_partitions_leader_replicas_and_isr():
    with StubCluster(3, {"t": 3}) as cluster:
        cluster.leaders.update({("t", 1): 1, ("t", 2): -1})
        with AdminClient({"bootstrap.servers": cluster.url(1)}) as admin:
            meta = admin.list_topics(timeout=10)
        assert {i: (b.host, b.port) for i, b in meta.brokers.items()} == {
            b.broker_id: ("127.0.0.1", b.port) for b in cluster.brokers}
        assert meta.orig_broker_id == 1 and meta.controller_id == 0
        parts = meta.topics["t"].partitions
        assert [(p.leader, p.replicas, p.isrs) for _, p in sorted(parts.items())] == [
            (0, [0, 1, 2], [0, 1, 2]), (1, [0, 1, 2], [0, 1, 2]), (-1, [0, 1, 2], [0, 1, 2])]


# -- one real broker ------------------------------------------------------------------------------


def test_a_single_broker_leads_every_partition(make_topic: Any, servers: str, clients: Any):
    topic = make_topic(partitions=3)
    admin = clients(AdminClient({"bootstrap.servers": servers}))
    meta = admin.list_topics(topic, timeout=30)
    assert list(meta.brokers) == [0] and meta.orig_broker_id == 0
    assert {p.leader for p in meta.topics[topic].partitions.values()} == {0}
    producer = clients(Producer({"bootstrap.servers": servers, "linger.ms": 0}))
    metadata = producer._metadata
    assert metadata.count(topic) == 3
    assert metadata.leader(topic, 2) == 0
    assert metadata.leader_url(topic, 2) in (None, servers)  # None while the broker lists no addresses
    errors: list[Any] = []
    for p in range(3):
        producer.produce(topic, b"v", partition=p, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None] * 3
