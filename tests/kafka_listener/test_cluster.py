"""Kafka clients against a three-broker cluster: Metadata names the real brokers and
leaders, a broker that does not lead a partition refuses its Produce and Fetch with
NOT_LEADER_OR_FOLLOWER, and a confluent-kafka producer with ``acks=all`` loses no
acknowledged record when the leader is killed -9 under it (the client finds the new
leader through Metadata on its own)."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from laketail.kafka import apis, records
from tests.conftest import free_port
from tests.kafka_listener.test_listener import _call
from tests.replication.support import Cluster, wait_until

pytestmark = pytest.mark.integration

QUIET = {"log_level": 0}


class KafkaCluster(Cluster):
    """A :class:`Cluster` whose brokers each have a Kafka listener too."""

    def __init__(self, base_dir: Path) -> None:
        super().__init__(base_dir, env={"LAKETAIL_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})
        self.kafka_ports: dict[int, int] = {}
        for broker_id, b in self.brokers.items():
            port = self.kafka_ports[broker_id] = free_port()
            b.extra_env.update({"LAKETAIL_LISTENERS": f"KAFKA://127.0.0.1:{port}",
                                "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "KAFKA:PLAINTEXT"})

    def bootstrap(self, *ids: int) -> str:
        return ",".join(f"127.0.0.1:{self.kafka_ports[i]}" for i in ids or self.brokers)


def _running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    started = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    ok = False
    try:
        started.start()
        yield started
        ok = True
    finally:
        if not ok:
            print(started.output())
        started.close()


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One cluster for the tests that kill nothing."""
    yield from _running(tmp_path_factory)


@pytest.fixture
def killable_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from _running(tmp_path_factory)


def _metadata(bootstrap: str, topic: str | None):
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    return admin.list_topics(topic, timeout=30)


def test_metadata_lists_every_broker_and_the_leaders_the_cluster_elected(kafka_cluster):
    topic = kafka_cluster.make_topic(f"meta-{uuid.uuid4().hex[:8]}", 3, 3, {"min.insync.replicas": "2"})
    rest_view = kafka_cluster.partitions(topic)
    for asked in kafka_cluster.brokers:  # every broker answers the same
        md = _metadata(kafka_cluster.bootstrap(asked), topic)
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
            i: ("127.0.0.1", port) for i, port in kafka_cluster.kafka_ports.items()}
        assert md.controller_id in kafka_cluster.brokers
        parts = md.topics[topic].partitions
        assert {p: parts[p].leader for p in parts} == {p: rest_view[p]["leader"] for p in rest_view}
        for part in parts.values():
            assert sorted(part.replicas) == [0, 1, 2] and sorted(part.isrs) == [0, 1, 2]
    # the leaders are spread: the old answer (every broker names itself) could not pass this
    assert len({part["leader"] for part in rest_view.values()}) > 1


def test_describe_cluster_names_every_broker_and_the_controller(kafka_cluster):
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap(2), **QUIET})
    described = admin.describe_cluster().result(timeout=30)
    assert sorted((n.id, n.port) for n in described.nodes) == sorted(kafka_cluster.kafka_ports.items())
    # every broker names the same controller (the old answer: each named itself)
    controllers = {_metadata(kafka_cluster.bootstrap(i), None).controller_id for i in kafka_cluster.brokers}
    assert controllers == {described.controller.id}


def test_produce_and_fetch_to_a_follower_are_not_leader_or_follower(kafka_cluster):
    topic = kafka_cluster.make_topic(f"follower-{uuid.uuid4().hex[:8]}", 1, 3)
    leader = kafka_cluster.leader(topic, 0)
    follower = next(i for i in kafka_cluster.brokers if i != leader)
    batch = records.encode_batch(0, [0], [1000], [None], [b"v"], [None])
    with socket.create_connection(("127.0.0.1", kafka_cluster.kafka_ports[follower]), timeout=30) as sock:
        answer = _call(sock, 0, 9, {"acks": -1, "timeout": 30_000, "transactional_id": None,
                                    "topic_data": [{"name": topic, "partition_data": [{"index": 0,
                                                                                       "records": batch}]}]})
        assert int(answer.responses[0].partition_responses[0].error_code) == 6
        fetched = _call(sock, 1, 12, {
            "max_wait": 100, "min_bytes": 1, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20}]}]}, correlation_id=8)
        part = fetched.responses[0].partitions[0]
        assert int(part.error_code) == 6
        assert part.current_leader.leader_id == leader  # KIP-595's hint
        # Produce v10 (KIP-951): the leader and its Kafka endpoint in the refusal
        answer = _call(sock, 0, 10, {"acks": -1, "timeout": 30_000, "transactional_id": None,
                                     "topic_data": [{"name": topic, "partition_data": [{"index": 0,
                                                                                        "records": batch}]}]},
                       correlation_id=9)
        part = answer.responses[0].partition_responses[0]
        assert int(part.error_code) == 6
        meta = _call(sock, 3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
                     correlation_id=12)
        epoch = meta.topics[0].partitions[0].leader_epoch
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
        assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [
            (leader, "127.0.0.1", kafka_cluster.kafka_ports[leader])]
        # a fetch session's partitions are checked too: refused in the full answer and
        # in every incremental one (an error is always answered)
        session_fetch = {"max_wait": 100, "min_bytes": 1, "session_id": 0, "session_epoch": 0,
                         "forgotten_topics_data": [],
                         "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                     "partition_max_bytes": 1 << 20}]}]}
        full = _call(sock, 1, 12, session_fetch, correlation_id=10)
        assert full.session_id > 0 and int(full.responses[0].partitions[0].error_code) == 6
        incremental = _call(sock, 1, 12, {**session_fetch, "session_id": full.session_id, "session_epoch": 1,
                                          "topics": []}, correlation_id=11)
        part = incremental.responses[0].partitions[0]
        assert (int(part.error_code), part.current_leader.leader_id) == (6, leader)
        # Fetch v16 (KIP-951, topics by id): the refusal lists where the leader listens
        topic_id = _call(sock, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                       "allow_auto_topic_creation": False}, correlation_id=13).topics[0].topic_id
        by_id = _call(sock, 1, 16, {**session_fetch, "session_epoch": -1, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                   "partition_max_bytes": 1 << 20}]}]}, correlation_id=14)
        assert by_id.responses[0].topic_id == topic_id
        part = by_id.responses[0].partitions[0]
        assert (int(part.error_code), part.current_leader.leader_id) == (6, leader)
        assert [(n.node_id, n.host, n.port) for n in by_id.node_endpoints] == [
            (leader, "127.0.0.1", kafka_cluster.kafka_ports[leader])]
    assert kafka_cluster.partitions(topic)[0]["leader"] == leader
    # nothing was written through the follower
    assert kafka_cluster.get(kafka_cluster[leader], f"/topics/{topic}/partitions/0/offsets").json()["end_offset"] == 0


def test_group_requests_off_the_controller_are_not_coordinator(kafka_cluster):
    """Only the controller coordinates groups: another broker answers NOT_COORDINATOR
    (the client asks FindCoordinator again) instead of running a second, empty copy of
    the group -- which would have answered OffsetFetch "nothing committed" and reset a
    consumer to its auto.offset.reset position."""
    topic = kafka_cluster.make_topic(f"coord-{uuid.uuid4().hex[:8]}", 1, 3)
    controller = _metadata(kafka_cluster.bootstrap(), None).controller_id
    other = next(i for i in kafka_cluster.brokers if i != controller)
    group = f"g-{uuid.uuid4().hex[:8]}"
    subscription = apis._encode_subscription([topic])
    with socket.create_connection(("127.0.0.1", kafka_cluster.kafka_ports[other]), timeout=30) as sock:
        found = _call(sock, 10, 3, {"key": group, "key_type": 0})
        assert (int(found.error_code), found.node_id) == (0, controller)
        joined = _call(sock, 11, 5, {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
                                     "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                     "protocols": [{"name": "range", "metadata": subscription}]})
        assert int(joined.error_code) == 16
        fetched = _call(sock, 9, 5, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
        assert int(fetched.error_code) == 16
        committed = _call(sock, 8, 7, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                       "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                           {"partition_index": 0, "committed_offset": 5,
                                            "committed_metadata": ""}]}]})
        assert int(committed.topics[0].partitions[0].error_code) == 16
        beat = _call(sock, 12, 3, {"group_id": group, "generation_id": 1, "member_id": "m",
                                   "group_instance_id": None})
        assert int(beat.error_code) == 16
    # the controller, asked the same, coordinates: nothing was committed through the other broker
    with socket.create_connection(("127.0.0.1", kafka_cluster.kafka_ports[controller]), timeout=30) as sock:
        fetched = _call(sock, 9, 5, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
        assert int(fetched.error_code) == 0
        assert fetched.topics[0].partitions[0].committed_offset == -1


class Stream(threading.Thread):
    """Produces unique values with acks=all until told to stop; records each delivery."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120_000, **QUIET})
        self.topic = topic
        self.halt = threading.Event()
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.failed.append((msg.value(), str(err)))

    def run(self) -> None:
        while not self.halt.is_set():
            value = b"v-%06d" % self.sent
            self.producer.produce(self.topic, value=value, key=value, on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(180)


@pytest.mark.timeout(600)
@pytest.mark.fault
def test_acks_all_through_a_leader_kill_loses_no_acknowledged_record(killable_cluster):
    kafka_cluster = killable_cluster
    topic = kafka_cluster.make_topic(f"kill-{uuid.uuid4().hex[:8]}", 2, 3, {"min.insync.replicas": "2"})
    stream = Stream(kafka_cluster.bootstrap(), topic)
    stream.start()
    try:
        wait_until(lambda: len(stream.acked) >= 200, "200 acknowledged records before the kill")
        victim = kafka_cluster.leader(topic, 0)
        kafka_cluster[victim].kill9()
        acked_at_kill = len(stream.acked)
        kafka_cluster.wait_new_leaders(topic, [0], victim, time.monotonic())
        # the client moves to the new leader on its own: acknowledgements go on for both partitions
        wait_until(lambda: len(stream.acked) >= acked_at_kill + 300, "300 more acknowledged records after the kill")
    finally:
        stream.halt.set()
        stream.join(240)
    assert not stream.is_alive()
    assert stream.failed == [], stream.failed[:5]
    assert len(stream.acked) == stream.sent  # idempotent acks=all: every record delivered once

    survivor = next(i for i in kafka_cluster.live_ids())
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap(survivor), "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    got: dict[bytes, tuple[int, int]] = {}
    deadline = time.monotonic() + 120
    try:
        while len(got) < len(stream.acked) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            assert msg.value() not in got, f"{msg.value()!r} read twice"
            got[msg.value()] = (msg.partition(), msg.offset())
    finally:
        consumer.close()
    lost = {v: at for v, at in stream.acked.items() if got.get(v) != at}
    assert not lost, f"{len(lost)} acknowledged records missing or moved, e.g. {list(lost.items())[:5]}"
    assert set(got) == set(stream.acked)


def _produce_all(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120_000, **QUIET})
    failed: list = []
    for value in values:
        producer.produce(topic, value=value, key=value,
                         on_delivery=lambda err, msg: failed.append(err) if err is not None else None)
        producer.poll(0)
    assert producer.flush(180) == 0 and not failed, failed[:3]


@pytest.mark.timeout(600)
@pytest.mark.fault
def test_a_consumer_group_follows_its_coordinator_through_a_controller_kill(killable_cluster):
    """FindCoordinator names the controller; when it is killed -9 mid-consumption the
    group's next requests get NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, the client
    finds the new controller, its committed offsets are there, and nothing is skipped."""
    cluster = killable_cluster
    topic = cluster.make_topic(f"group-{uuid.uuid4().hex[:8]}", 2, 3, {"min.insync.replicas": "2"})
    before = [b"a-%05d" % i for i in range(400)]
    _produce_all(cluster.bootstrap(), topic, before)
    controller = _metadata(cluster.bootstrap(), None).controller_id
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500, **QUIET})
    consumer.subscribe([topic])
    seen: list[tuple[bytes, int, int, bool]] = []  # value, partition, offset, after the kill
    committed_before: dict[int, int] = {}  # the last offsets a commit acknowledged before the kill
    killed = False
    after = [b"b-%05d" % i for i in range(300)]
    deadline = time.monotonic() + 300
    try:
        while {v for v, *_ in seen} < set(before) | set(after) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append((msg.value(), msg.partition(), msg.offset(), killed))
                if len(seen) % 20 == 0:
                    try:  # each commit is acknowledged by the coordinator or raises
                        done = consumer.commit(asynchronous=False)
                    except Exception:  # noqa: BLE001 - a commit in the failover window: the next one counts
                        done = None
                    if done and not killed:
                        committed_before.update({tp.partition: tp.offset for tp in done if tp.offset >= 0})
            if not killed and len(seen) >= 150:
                assert committed_before, "a commit went through the controller before the kill"
                cluster[controller].kill9()
                killed = True
                survivors = cluster.bootstrap(*cluster.live_ids())
                wait_until(lambda at=survivors: _metadata(at, None).controller_id in cluster.live_ids(),
                           "a surviving broker named the new controller")
                threading.Thread(target=_produce_all, args=(survivors, topic, after), daemon=True).start()
        ends = {p: max(o for _, pp, o, _ in seen if pp == p) + 1 for p in (0, 1)}
        consumer.commit(offsets=[TopicPartition(topic, p, end) for p, end in ends.items()], asynchronous=False)
        final = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=60)
    finally:
        consumer.close()
    values = [v for v, *_ in seen]
    assert set(values) == set(before) | set(after), f"{len(set(before) | set(after) - set(values))} never consumed"
    # duplicates only after the kill: what the group had committed is where it went on
    first_sighting: set[bytes] = set()
    for value, _, _, after_kill in seen:
        assert value not in first_sighting or after_kill, f"{value!r} consumed twice before the kill"
        first_sighting.add(value)
    for partition, offset in committed_before.items():
        resumed = min(o for _, p, o, k in seen if k and p == partition)
        # offsets lost on the new coordinator would restart the group at 0 (earliest)
        assert resumed >= offset, f"partition {partition} restarted at {resumed}, below its commit {offset}"
    # the group's last commit went to the new controller and reads back there
    assert {tp.partition: tp.offset for tp in final} == ends
    assert _metadata(cluster.bootstrap(*cluster.live_ids()), None).controller_id != controller


def _epoch_answer(port: int, topic: str, current: int, requested: int) -> tuple[int, int, int]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        answer = _call(sock, 23, 4, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": requested}]}]})
    part = answer.topics[0].partitions[0]
    return int(part.error_code), part.leader_epoch, part.end_offset


def _leader_epoch(port: int, topic: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        md = _call(sock, 3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                "include_cluster_authorized_operations": False,
                                "include_topic_authorized_operations": False})
    return md.topics[0].partitions[0].leader_epoch


@pytest.mark.timeout(600)
@pytest.mark.fault
def test_offset_for_leader_epoch_through_a_leader_change(killable_cluster):
    """After the leader's kill -9 the new leader says where the old epoch ended (where
    its own began), fences a client still on the old epoch, and a confluent-kafka
    consumer that validates its position there (KIP-320) reads on without a gap."""
    cluster = killable_cluster
    topic = cluster.make_topic(f"epoch-{uuid.uuid4().hex[:8]}", 1, 3, {"min.insync.replicas": "2"})
    first = [b"a-%04d" % i for i in range(200)]
    _produce_all(cluster.bootstrap(), topic, first)
    old_leader = cluster.leader(topic, 0)
    old_epoch = _leader_epoch(cluster.kafka_ports[old_leader], topic)
    assert _epoch_answer(cluster.kafka_ports[old_leader], topic, old_epoch, old_epoch) == (0, old_epoch, 200)
    follower = next(i for i in cluster.brokers if i != old_leader)
    assert _epoch_answer(cluster.kafka_ports[follower], topic, old_epoch, old_epoch)[0] == 6  # not the leader

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000, **QUIET})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    errors: list[str] = []
    second = [b"b-%04d" % i for i in range(200)]
    deadline = time.monotonic() + 300
    try:
        while len(got) < 100 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.value()))
        cluster[old_leader].kill9()
        new_leader = cluster.wait_new_leaders(topic, [0], old_leader, time.monotonic())[0]
        port = cluster.kafka_ports[new_leader]
        new_epoch = wait_until(lambda: (e := _leader_epoch(port, topic)) > old_epoch and e, "the new epoch")
        # the old epoch ended where the new leader's began: after the 200 acknowledged records
        assert _epoch_answer(port, topic, new_epoch, old_epoch) == (0, old_epoch, 200)
        assert _epoch_answer(port, topic, new_epoch, new_epoch) == (0, new_epoch, 200)
        assert _epoch_answer(port, topic, old_epoch, old_epoch)[0] == 74  # FENCED_LEADER_EPOCH
        assert _epoch_answer(port, topic, new_epoch + 1, new_epoch)[0] == 76  # UNKNOWN_LEADER_EPOCH
        _produce_all(cluster.bootstrap(*cluster.live_ids()), topic, second)
        while len(got) < 400 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(str(msg.error()))
            else:
                got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    # no reset, no gap, no repeat: offsets 0..399 in order with the records produced
    assert [o for o, _ in got] == list(range(400)), errors[:5]
    assert [v for _, v in got] == first + second
