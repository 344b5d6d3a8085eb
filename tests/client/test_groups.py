"""The Python client's Consumer in consumer groups, against a real broker started with
quick group settings: confluent-kafka's documented consumer loop, commits and
committed offsets, a new member resuming after a commit, two members splitting
partitions (eager and cooperative), ``auto.offset.reset=none``, leaving on
``max.poll.interval.ms``, and the AdminClient's group views."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from integration.support import wait_until

from laketail.client import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from laketail.client.admin import AdminClient, ConsumerGroupState

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0


@pytest.fixture
def url(group_broker) -> str:
    return group_broker.url


@pytest.fixture
def group() -> str:
    return f"group-{uuid.uuid4().hex[:10]}"


def produce(url: str, topic: str, count: int, start: int = 0, key_of=None) -> None:
    producer = Producer({"bootstrap.servers": url})
    try:
        for i in range(start, start + count):
            key = key_of(i) if key_of else None
            producer.produce(topic, f"value-{i}".encode(), key=key)
        assert producer.flush(DEADLINE_S) == 0
    finally:
        producer.close()


def consumer_conf(url: str, group: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": url,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
    }
    conf.update({k if k.startswith("on_") else k.replace("_", "."): v for k, v in extra.items()})
    return conf


def basic_consume_loop(consumer: Consumer, topics: list[str], want: int, on_assign=None) -> list:
    """confluent-kafka's README loop: subscribe, poll, handle errors, process."""
    consumed = []
    consumer.subscribe(topics, on_assign=on_assign)
    deadline = time.monotonic() + DEADLINE_S
    while len(consumed) < want:
        assert time.monotonic() < deadline, f"consumed {len(consumed)} of {want}"
        msg = consumer.poll(timeout=1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(msg.error())
        consumed.append(msg)  # msg_process(msg)
    return consumed


def test_documented_consumer_flow_commits_and_a_new_member_resumes(url, clients, make_topic, group,
                                                                   group_broker):
    topic = make_topic(partitions=3, broker=group_broker)
    produce(url, topic, 30, key_of=lambda i: f"k{i}")

    assigned = []
    consumer = clients(Consumer(consumer_conf(url, group, enable_auto_commit=False)))
    first = basic_consume_loop(consumer, [topic], 30, on_assign=lambda c, ps: assigned.append(ps))
    assert sorted(tp.partition for tp in assigned[0]) == [0, 1, 2]
    assert len({(m.partition(), m.offset()) for m in first}) == 30

    committed = consumer.commit(asynchronous=False)
    ends = {p: 1 + max(m.offset() for m in first if m.partition() == p) for p in {m.partition() for m in first}}
    assert {tp.partition: tp.offset for tp in committed} == ends
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=30)} == {
        p: ends.get(p, OFFSET_INVALID) for p in range(3)}
    assert {tp.partition: tp.offset for tp in consumer.position(tps) if tp.partition in ends} == ends
    metadata = consumer.consumer_group_metadata()
    assert metadata.group_id == group and metadata.generation_id >= 1 and metadata.member_id
    consumer.close()

    produce(url, topic, 6, start=30, key_of=lambda i: f"k{i}")
    successor = clients(Consumer(consumer_conf(url, group, enable_auto_commit=False)))
    resumed = basic_consume_loop(successor, [topic], 6)
    assert sorted(m.value() for m in resumed) == sorted(f"value-{i}".encode() for i in range(30, 36))
    assert all(m.offset() >= ends.get(m.partition(), 0) for m in resumed)


def test_commit_message_stores_the_next_offset_and_offsets_are_stored_as_given(url, clients, make_topic, group,
                                                                               group_broker):
    topic = make_topic(partitions=2, broker=group_broker)
    produce(url, topic, 4, key_of=lambda i: b"same-key")
    commits = []
    consumer = clients(Consumer(consumer_conf(url, group, enable_auto_commit=False,
                                              on_commit=lambda err, tps: commits.append((err, tps)))))
    msgs = basic_consume_loop(consumer, [topic], 4)
    last = msgs[-1]
    result = consumer.commit(message=last, asynchronous=False)
    assert [(tp.topic, tp.partition, tp.offset) for tp in result] == [(topic, last.partition(), last.offset() + 1)]
    other = 1 - last.partition()
    consumer.commit(offsets=[TopicPartition(topic, other, 42, metadata="mine")], asynchronous=True)
    deadline = time.monotonic() + DEADLINE_S
    while not commits:
        assert time.monotonic() < deadline, "on_commit was never called"
        consumer.poll(0.2)
    err, tps = commits[0]
    assert err is None and [(tp.partition, tp.offset) for tp in tps] == [(other, 42)]
    found = {tp.partition: (tp.offset, tp.metadata) for tp in
             consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])}
    assert found == {last.partition(): (last.offset() + 1, None), other: (42, "mine")}


def test_auto_commit_on_close(url, clients, make_topic, group, group_broker):
    topic = make_topic(broker=group_broker)
    produce(url, topic, 5)
    consumer = Consumer(consumer_conf(url, group))  # enable.auto.commit defaults to true
    basic_consume_loop(consumer, [topic], 5)
    consumer.close()
    checker = clients(Consumer(consumer_conf(url, group)))
    assert checker.committed([TopicPartition(topic, 0)])[0].offset == 5


class GatedLock:
    """Stands in for the consumer's commit lock: says when a thread reaches it, and
    lets nobody through while the test holds ``gate``."""

    def __init__(self) -> None:
        self.gate = threading.Lock()
        self.reached = threading.Event()

    def __enter__(self) -> None:
        self.reached.set()
        self.gate.acquire()

    def __exit__(self, *exc: object) -> None:
        self.gate.release()


def test_an_automatic_commit_sends_the_offsets_stored_when_it_goes_out(url, clients, make_topic, group,
                                                                        group_broker):
    """An automatic commit held up behind another commit must not send the offsets of
    when it was due: the newer offsets the application stored (and may have committed)
    meanwhile would be undone."""
    topic = make_topic(broker=group_broker)
    produce(url, topic, 10)
    consumer = clients(Consumer(consumer_conf(url, group, auto_commit_interval_ms=600_000)))
    basic_consume_loop(consumer, [topic], 4)
    gated = GatedLock()
    consumer._commit_lock = gated
    gated.gate.acquire()
    auto = threading.Thread(target=consumer._auto_commit)  # what the coordinator thread runs
    auto.start()
    assert gated.reached.wait(DEADLINE_S)
    more = basic_consume_loop(consumer, [topic], 6)  # stored offset 4 -> 10 meanwhile
    assert more[-1].offset() == 9
    gated.gate.release()
    auto.join(DEADLINE_S)
    assert consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 10


def settle(consumers: list[Consumer], partitions: set[int]) -> list[set[int]]:
    """Poll every consumer in turn until their assignments are disjoint, non-empty and
    cover ``partitions``; return them."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        owned = []
        for consumer in consumers:
            msg = consumer.poll(0.1)
            assert msg is None or msg.error() is None, msg.error()
            owned.append({tp.partition for tp in consumer.assignment()})
        total = sum(len(o) for o in owned)
        if all(owned) and set().union(*owned) == partitions and total == len(partitions):
            return owned
        assert time.monotonic() < deadline, f"assignments never settled: {owned}"


def test_a_member_told_by_its_heartbeat_to_rejoin_rejoins_at_once(url, clients, make_topic, group, group_broker):
    """REBALANCE_IN_PROGRESS on a heartbeat sends the member straight to JoinGroup, as
    Kafka's clients do (the coordinator thread used to sleep up to 0.5 s first, which
    every rebalance paid)."""
    topic = make_topic(partitions=2, broker=group_broker)
    first = clients(Consumer(consumer_conf(url, group, enable_auto_commit=False)))
    first.subscribe([topic])
    settle([first], {0, 1})
    coordinator = first._coordinator
    done: list[tuple[str, int | None]] = []  # what first's coordinator thread did, in order
    real_post, real_sleep = coordinator.gateway.post_json, coordinator._sleep

    def post_json(path, *args, **kwargs):
        mine = threading.current_thread().name.startswith("laketail-group-")
        try:
            answer = real_post(path, *args, **kwargs)
        except KafkaException as exc:
            if mine:
                done.append((path.rsplit("/", 1)[1], exc.args[0].code()))
            raise
        if mine:
            done.append((path.rsplit("/", 1)[1], None))
        return answer

    def sleep(seconds):
        done.append(("sleep", None))
        real_sleep(seconds)

    coordinator.gateway.post_json, coordinator._sleep = post_json, sleep
    second = clients(Consumer(consumer_conf(url, group, enable_auto_commit=False)))
    second.subscribe([topic])
    settle([first, second], {0, 1})
    told = done.index(("heartbeat", KafkaError.REBALANCE_IN_PROGRESS))
    assert done[told + 1] == ("join", None), done


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_two_members_split_the_partitions(url, clients, make_topic, group, group_broker, strategy):
    topic = make_topic(partitions=4, broker=group_broker)
    events: dict[str, list] = {"a": [], "b": []}

    def tracker(name):
        return {
            "on_assign": lambda c, ps: events[name].append(("assign", sorted(tp.partition for tp in ps))),
            "on_revoke": lambda c, ps: events[name].append(("revoke", sorted(tp.partition for tp in ps))),
        }

    conf = consumer_conf(url, group, partition_assignment_strategy=strategy, enable_auto_commit=False)
    a = clients(Consumer(conf))
    a.subscribe([topic], **tracker("a"))
    settle([a], {0, 1, 2, 3})
    b = clients(Consumer(conf))
    b.subscribe([topic], **tracker("b"))
    owned_a, owned_b = settle([a, b], {0, 1, 2, 3})
    assert len(owned_a) == len(owned_b) == 2

    produce(url, topic, 40, key_of=lambda i: f"key-{i}")
    seen: dict[str, list] = {"a": [], "b": []}
    deadline = time.monotonic() + DEADLINE_S
    while len(seen["a"]) + len(seen["b"]) < 40:
        assert time.monotonic() < deadline
        for name, consumer in (("a", a), ("b", b)):
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen[name].append((msg.partition(), msg.offset()))
    assert {p for p, _ in seen["a"]} <= owned_a and {p for p, _ in seen["b"]} <= owned_b
    assert len(set(seen["a"]) | set(seen["b"])) == 40

    if strategy == "cooperative-sticky":
        # a kept its partitions across b's arrival: it only gave up the moved ones
        revoked = [ps for kind, ps in events["a"] if kind == "revoke"]
        assert revoked and set(revoked[0]) == {0, 1, 2, 3} - owned_a
    else:
        assert ("revoke", [0, 1, 2, 3]) in events["a"]  # eager: everything goes back first


def test_auto_offset_reset_none_reports_auto_offset_reset(url, clients, make_topic, group, group_broker):
    topic = make_topic(broker=group_broker)
    produce(url, topic, 2)
    consumer = clients(Consumer(consumer_conf(url, group, auto_offset_reset="none")))
    consumer.subscribe([topic])
    deadline = time.monotonic() + DEADLINE_S
    while True:
        assert time.monotonic() < deadline, "no _AUTO_OFFSET_RESET event"
        msg = consumer.poll(1.0)
        if msg is not None:
            break
    assert msg.error() is not None and msg.error().code() == KafkaError._AUTO_OFFSET_RESET
    assert (msg.topic(), msg.partition()) == (topic, 0)
    consumer.seek(TopicPartition(topic, 0, 1))
    records = []
    while not records:
        assert time.monotonic() < deadline
        got = consumer.poll(1.0)
        if got is not None:
            records.append(got)
    assert records[0].error() is None and records[0].offset() == 1


def test_max_poll_interval_exceeded_leaves_the_group(url, clients, make_topic, group, group_broker):
    topic = make_topic(broker=group_broker)
    admin = clients(AdminClient({"bootstrap.servers": url}))
    consumer = clients(Consumer(consumer_conf(url, group, max_poll_interval_ms=1000)))
    consumer.subscribe([topic])
    settle([consumer], {0})

    def members() -> int:
        return len(admin.describe_consumer_groups([group])[group].result(timeout=30).members)

    assert members() == 1
    wait_until(lambda: members() == 0, "the member to leave after max.poll.interval.ms without a poll")
    msg = consumer.poll(5.0)
    assert msg is not None and msg.error().code() == KafkaError._MAX_POLL_EXCEEDED
    settle([consumer], {0})  # the next polls rejoin
    assert members() == 1


def test_admin_lists_groups_and_their_offsets(url, clients, make_topic, group, group_broker):
    topic = make_topic(partitions=2, broker=group_broker)
    produce(url, topic, 3, key_of=lambda i: b"k")
    admin = clients(AdminClient({"bootstrap.servers": url}))
    consumer = clients(Consumer(consumer_conf(url, group, enable_auto_commit=False, client_id="lister")))
    msgs = basic_consume_loop(consumer, [topic], 3)
    consumer.commit(message=msgs[-1], asynchronous=False)

    listing = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
    mine = [g for g in listing.valid if g.group_id == group]
    assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE and not mine[0].is_simple_consumer_group
    stable_only = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(timeout=60)
    assert group not in {g.group_id for g in stable_only.valid}

    description = admin.describe_consumer_groups([group])[group].result(timeout=60)
    (member,) = description.members
    assert member.client_id == "lister"
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
    assert description.partition_assignor == "range" and description.state == ConsumerGroupState.STABLE

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    offsets = admin.list_consumer_group_offsets([request])[group].result(timeout=60)
    assert offsets.group_id == group
    by_partition = {tp.partition: tp.offset for tp in offsets.topic_partitions}
    assert by_partition[msgs[-1].partition()] == msgs[-1].offset() + 1
    assert by_partition[1 - msgs[-1].partition()] == OFFSET_INVALID


def test_a_pattern_subscription_follows_new_topics(url, clients, make_topic, group, group_broker):
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    first = make_topic(partitions=1, broker=group_broker, name=f"{prefix}-first")
    make_topic(partitions=1, broker=group_broker, name=f"other-{prefix}")
    consumer = clients(Consumer(consumer_conf(url, group, topic_metadata_refresh_interval_ms=200)))
    consumer.subscribe([f"^{prefix}-.*"])
    deadline = time.monotonic() + DEADLINE_S
    while {tp.topic for tp in consumer.assignment()} != {first}:
        assert time.monotonic() < deadline, consumer.assignment()
        assert consumer.poll(0.1) is None
    second = make_topic(partitions=2, broker=group_broker, name=f"{prefix}-second")
    while {(tp.topic, tp.partition) for tp in consumer.assignment()} != {(first, 0), (second, 0), (second, 1)}:
        assert time.monotonic() < deadline, consumer.assignment()
        assert consumer.poll(0.1) is None


def test_listing_every_offset_of_a_group_and_storing_offsets_by_hand(url, clients, make_topic, group, group_broker):
    topic = make_topic(partitions=1, broker=group_broker)
    produce(url, topic, 4)
    consumer = clients(Consumer(consumer_conf(url, group, enable_auto_commit=False, enable_auto_offset_store=False)))
    msgs = basic_consume_loop(consumer, [topic], 4)
    with pytest.raises(KafkaException) as nothing_stored:
        consumer.commit(asynchronous=False)  # nothing stored: poll() did not store with auto store off
    assert nothing_stored.value.args[0].code() == KafkaError._NO_OFFSET
    consumer.store_offsets(message=msgs[1])
    assert [(tp.partition, tp.offset) for tp in consumer.commit(asynchronous=False)] == [(0, 2)]

    admin = clients(AdminClient({"bootstrap.servers": url}))
    everything = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=60)
    assert [(tp.topic, tp.partition, tp.offset) for tp in everything.topic_partitions] == [(topic, 0, 2)]
