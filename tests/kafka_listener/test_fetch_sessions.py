"""Incremental fetch sessions (KIP-227, laketail.kafka.fetch_session): the cache's rules
on a hand-moved clock, the same rules over raw Fetch v12 requests to a real broker, and
real consumers (kafka-python opens sessions; librdkafka never does) reading several
partitions through them."""

from __future__ import annotations

import random
import time
import uuid

import pytest
from confluent_kafka import Consumer
from kafka import KafkaConsumer, KafkaProducer

from laketail.kafka import records
from laketail.kafka.fetch_session import (
    EVICTION_MS,
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSessionCache,
    next_epoch,
)
from laketail.security.principal import KafkaPrincipal
from tests.kafka_listener.test_listener import _call, _connect, _produce_body

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")


def _answer(records_: bytes = b"", hw: int = 0, lso: int = 0, start: int = 0, error: int = 0) -> dict:
    return {"records": records_, "high_watermark": hw, "last_stable_offset": lso, "log_start_offset": start,
            "error_code": error}


def _open(cache: FetchSessionCache, parts: dict, now_ms: int = 0, principal=ALICE) -> int:
    """A full fetch (session 0, epoch 0) of ``parts`` answered with empty partitions at 0."""
    context = cache.new_context(0, 0, parts, [], principal, now_ms)
    assert context.kind == "full"
    answer = context.respond([((t, p), _answer()) for t, p, _, _ in context.wanted], now_ms)
    return answer.session_id


# -- the rules, on the cache alone -----------------------------------------------------------


def test_a_full_fetch_opens_a_session_at_epoch_1_holding_every_partition():
    cache = FetchSessionCache(rng=random.Random(7))
    session_id = _open(cache, {("t", 0): (5, 100), ("t", 1): (7, 100)})
    assert session_id > 0 and cache.sessions[session_id].epoch == 1
    context = cache.new_context(session_id, 1, {}, [], ALICE, 1)
    assert context.kind == "incremental"
    assert context.wanted == [("t", 0, 5, 100), ("t", 1, 7, 100)]  # read at the remembered offsets
    assert cache.sessions[session_id].epoch == 2


def test_sessionless_when_the_epoch_is_final_and_a_named_session_is_closed():
    cache = FetchSessionCache()
    context = cache.new_context(0, -1, {("t", 0): (0, 100)}, [], ALICE, 0)
    assert context.kind == "sessionless"
    assert context.respond([(("t", 0), _answer())], 0).session_id == 0
    session_id = _open(cache, {("t", 0): (0, 100)})
    assert cache.new_context(session_id, -1, {("t", 0): (0, 100)}, [], ALICE, 0).kind == "sessionless"
    assert session_id not in cache.sessions


def test_a_full_fetch_naming_a_session_closes_it_and_opens_another():
    cache = FetchSessionCache()
    first = _open(cache, {("t", 0): (0, 100)})
    context = cache.new_context(first, 0, {("t", 1): (0, 100)}, [], ALICE, 0)
    second = context.respond([(("t", 1), _answer())], 0).session_id
    assert first not in cache.sessions and second in cache.sessions and second != first


def test_unknown_session_and_wrong_epoch_are_kafkas_errors():
    cache = FetchSessionCache()
    session_id = _open(cache, {("t", 0): (0, 100)})
    assert cache.new_context(session_id + 1, 1, {}, [], ALICE, 0).error_code == FETCH_SESSION_ID_NOT_FOUND
    assert cache.new_context(session_id, 2, {}, [], ALICE, 0).error_code == INVALID_FETCH_SESSION_EPOCH
    assert cache.new_context(session_id, 1, {}, [], ALICE, 0).kind == "incremental"
    # the same epoch again (an answer lost, the request repeated) is refused
    repeated = cache.new_context(session_id, 1, {}, [], ALICE, 0)
    assert repeated.kind == "error" and repeated.error_code == INVALID_FETCH_SESSION_EPOCH
    assert repeated.respond([], 0).session_id == 0


def test_an_incremental_answer_carries_only_partitions_with_something_to_say():
    cache = FetchSessionCache()
    parts = {("t", p): (0, 100) for p in range(6)}
    session_id = _open(cache, parts)
    context = cache.new_context(session_id, 1, {}, [], ALICE, 0)
    answers = {
        ("t", 0): _answer(),  # nothing changed: left out
        ("t", 1): _answer(b"batch", hw=0),  # records
        ("t", 2): _answer(hw=3),  # the high watermark moved
        ("t", 3): _answer(lso=2),  # the last stable offset moved (a commit's marker)
        ("t", 4): _answer(start=1),  # retention moved the log start
        ("t", 5): _answer(error=6),  # an error
    }
    kept = context.respond([(tp, answers[tp]) for t, p, _, _ in context.wanted for tp in [(t, p)]], 0)
    assert [tp for tp, _ in kept.partitions] == [("t", p) for p in range(1, 6)]
    # next time, what was sent is remembered; the partition in error is sent again once healed
    context = cache.new_context(session_id, 2, {}, [], ALICE, 0)
    again = {**answers, ("t", 1): _answer(), ("t", 5): _answer()}
    kept = context.respond([((t, p), again[(t, p)]) for t, p, _, _ in context.wanted], 0)
    assert [tp for tp, _ in kept.partitions] == [("t", 5)]


def test_answered_partitions_move_to_the_end_of_the_session():
    cache = FetchSessionCache()
    session_id = _open(cache, {("t", p): (0, 100) for p in range(3)})
    context = cache.new_context(session_id, 1, {}, [], ALICE, 0)
    context.respond([((t, p), _answer(b"x" if p == 0 else b"")) for t, p, _, _ in context.wanted], 0)
    assert [p for _, p, _, _ in cache.new_context(session_id, 2, {}, [], ALICE, 0).wanted] == [1, 2, 0]


def test_an_incremental_request_updates_adds_and_forgets_partitions():
    cache = FetchSessionCache()
    session_id = _open(cache, {("t", 0): (0, 100), ("t", 1): (0, 100)})
    context = cache.new_context(session_id, 1, {("t", 0): (9, 50), ("u", 0): (3, 100)}, [("t", 1)], ALICE, 0)
    assert context.wanted == [("t", 0, 9, 50), ("u", 0, 3, 100)]
    # forgetting every partition closes the session: that fetch is sessionless
    context = cache.new_context(session_id, 2, {}, [("t", 0), ("u", 0)], ALICE, 0)
    assert context.kind == "sessionless" and session_id not in cache.sessions


def test_a_request_between_a_context_and_its_answer_makes_the_answer_an_epoch_error():
    cache = FetchSessionCache()
    session_id = _open(cache, {("t", 0): (0, 100)})
    slow = cache.new_context(session_id, 1, {}, [], ALICE, 0)  # long-polling
    cache.new_context(session_id, 2, {}, [], ALICE, 0)  # the client gave up and fetched again
    answer = slow.respond([(("t", 0), _answer(b"x"))], 0)
    assert (answer.error_code, answer.partitions) == (INVALID_FETCH_SESSION_EPOCH, [])


def test_a_session_is_its_principals():
    cache = FetchSessionCache()
    session_id = _open(cache, {("t", 0): (0, 100)})
    assert cache.new_context(session_id, 1, {}, [], BOB, 0).error_code == FETCH_SESSION_ID_NOT_FOUND
    cache.new_context(session_id, 0, {}, [], BOB, 0)  # a full fetch naming it does not close it
    assert session_id in cache.sessions
    assert cache.new_context(session_id, 1, {}, [], ALICE, 0).kind == "incremental"


def test_the_epoch_wraps_to_1():
    assert next_epoch(1) == 2
    assert next_epoch(2**31 - 1) == 1


def test_a_full_cache_evicts_a_stale_session_then_a_smaller_old_one_else_opens_none():
    cache = FetchSessionCache(max_slots=2)
    a = _open(cache, {("t", 0): (0, 1)}, now_ms=0)
    b = _open(cache, {("t", p): (0, 1) for p in range(3)}, now_ms=0)
    cache.new_context(b, 1, {}, [], ALICE, EVICTION_MS)  # b used; a unused since 0
    # nothing is stale yet, and no session is past its first EVICTION_MS: no room
    assert _open(cache, {("t", 0): (0, 1)}, now_ms=EVICTION_MS) == 0
    # a is now stale (unused for more than EVICTION_MS): evicted for the newcomer
    c = _open(cache, {("t", 0): (0, 1)}, now_ms=EVICTION_MS + 1)
    assert c and a not in cache.sessions and cache.evictions == 1
    # neither b nor c is stale; b is old enough, but a newcomer of 3 partitions is not
    # larger than b, and c is too young: no session
    cache.new_context(c, 1, {}, [], ALICE, EVICTION_MS + 2)
    cache.new_context(b, 2, {}, [], ALICE, EVICTION_MS + 2)
    assert _open(cache, {("t", p): (0, 1) for p in range(3)}, now_ms=EVICTION_MS + 3) == 0
    # a larger newcomer evicts b, the smallest session past its first EVICTION_MS
    d = _open(cache, {("t", p): (0, 1) for p in range(4)}, now_ms=EVICTION_MS + 3)
    assert d and b not in cache.sessions and c in cache.sessions


# -- over the wire, on a real broker ----------------------------------------------------------


def _fetch_body(session_id: int, epoch: int, parts: dict, forgotten: list | None = None) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for (t, p), offset in parts.items():
        by_topic.setdefault(t, []).append({"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
                                           "last_fetched_epoch": -1, "log_start_offset": -1,
                                           "partition_max_bytes": 1 << 20})
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "",
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": [p]} for t, p in forgotten or []]}


def _partitions(answer) -> dict[int, object]:
    return {p.partition_index: p for t in answer.responses for p in t.partitions}


@pytest.mark.integration
def test_a_session_over_raw_fetch_v12_requests(kafka_broker):
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 3).status_code in (200, 201)

    def produce(sock, partition: int, value: bytes, correlation_id: int) -> None:
        batch = records.encode_batch(0, [0], [1000], [None], [value], [None])
        body = _produce_body(topic, batch)
        body["topic_data"][0]["partition_data"][0]["index"] = partition
        answer = _call(sock, 0, 9, body, correlation_id)
        assert int(answer.responses[0].partition_responses[0].error_code) == 0

    with _connect(kafka_broker) as sock:
        full = _call(sock, 1, 12, _fetch_body(0, 0, {(topic, p): 0 for p in range(3)}))
        assert int(full.error_code) == 0 and full.session_id > 0
        assert sorted(_partitions(full)) == [0, 1, 2]  # a full answer carries every partition
        session_id = full.session_id

        nothing = _call(sock, 1, 12, _fetch_body(session_id, 1, {}))
        assert (int(nothing.error_code), nothing.session_id, _partitions(nothing)) == (0, session_id, {})

        produce(sock, 1, b"one", 20)
        got = _call(sock, 1, 12, _fetch_body(session_id, 2, {}))
        assert list(_partitions(got)) == [1]  # only the partition with records
        part = _partitions(got)[1]
        assert part.high_watermark == 1
        assert records.decode_batch(records.split_batches(part.records)[0]).values == [b"one"]

        # the client moves partition 1 on to offset 1 and forgets partition 0
        moved = _call(sock, 1, 12, _fetch_body(session_id, 3, {(topic, 1): 1}, forgotten=[(topic, 0)]))
        assert _partitions(moved) == {}  # no records past 1, the high watermark as last sent
        produce(sock, 0, b"zero", 21)  # forgotten: never answered again
        produce(sock, 2, b"two", 22)
        got = _call(sock, 1, 12, _fetch_body(session_id, 4, {}))
        assert list(_partitions(got)) == [2]

        repeated = _call(sock, 1, 12, _fetch_body(session_id, 4, {}))  # an answer lost, the request sent again
        assert (int(repeated.error_code), repeated.session_id) == (INVALID_FETCH_SESSION_EPOCH, 0)
        assert _partitions(repeated) == {}

        closing = _call(sock, 1, 12, _fetch_body(session_id, -1, {(topic, 0): 0}))
        assert (int(closing.error_code), closing.session_id, list(_partitions(closing))) == (0, 0, [0])
        gone = _call(sock, 1, 12, _fetch_body(session_id, 5, {}))
        assert (int(gone.error_code), gone.session_id) == (FETCH_SESSION_ID_NOT_FOUND, 0)


@pytest.mark.integration
def test_a_session_from_another_connection_continues_and_long_polls(kafka_broker):
    """Sessions are the broker's, not a connection's (a client reconnects and goes on),
    and an incremental fetch with nothing to say long-polls until a partition has."""
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 2).status_code in (200, 201)
    with _connect(kafka_broker) as sock:
        session_id = _call(sock, 1, 12, _fetch_body(0, 0, {(topic, 0): 0, (topic, 1): 0})).session_id
    with _connect(kafka_broker) as sock:
        body = {**_fetch_body(session_id, 1, {}), "max_wait": 800}
        start = time.monotonic()
        waited = _call(sock, 1, 12, body)
        assert _partitions(waited) == {} and time.monotonic() - start >= 0.7  # waited out max_wait
        assert kafka_broker.rest.produce_binary(topic, [{"value": b"x"}], partition=1).status_code == 200
        got = _call(sock, 1, 12, _fetch_body(session_id, 2, {}))
        assert list(_partitions(got)) == [1]


# -- real consumers ---------------------------------------------------------------------------


def _several_partitions(kafka_broker, partitions: int = 4, per_partition: int = 25) -> tuple[str, set]:
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, partitions).status_code in (200, 201)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    sent = set()
    for p in range(partitions):
        for i in range(per_partition):
            value = b"%d-%d" % (p, i)
            producer.send(topic, value=value, partition=p)
            sent.add((p, i, value))
    producer.flush(60)
    producer.close()
    return topic, sent


@pytest.mark.integration
def test_kafka_python_consumes_several_partitions_through_an_incremental_session(kafka_broker):
    topic, sent = _several_partitions(kafka_broker)
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest",
                             group_id=f"fs-{uuid.uuid4().hex[:6]}", consumer_timeout_ms=30_000,
                             max_poll_records=7)  # small polls: many fetches, each moving some offsets
    got = []
    try:
        for msg in consumer:
            got.append((msg.partition, msg.offset, msg.value))
            if len(got) == len(sent):
                break
        more = consumer.poll(timeout_ms=1500)  # nothing is delivered twice
        handlers = consumer._fetcher._session_handlers  # the client's own KIP-227 state
        sessions = [h.next_metadata for h in handlers.values()]
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent) and not any(more.values())
    # the client kept one session and moved its epoch on: the fetches were incremental
    assert sessions and all(m.session_id > 0 and m.epoch > 2 for m in sessions), sessions


@pytest.mark.integration
def test_kafka_python_keeps_reading_after_the_broker_loses_its_session(kafka_broker):
    """A session gone from the broker (evicted, or a broker restart) answers
    FETCH_SESSION_ID_NOT_FOUND; the client starts a full fetch and misses nothing."""
    topic, sent = _several_partitions(kafka_broker, partitions=3, per_partition=10)
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest",
                             group_id=f"fs-{uuid.uuid4().hex[:6]}", consumer_timeout_ms=30_000, max_poll_records=5)
    got = []
    try:
        for msg in consumer:
            got.append((msg.partition, msg.offset, msg.value))
            if len(got) == 10:
                break
        handler = next(iter(consumer._fetcher._session_handlers.values()))
        before = handler.next_metadata.session_id
        with _connect(kafka_broker) as sock:  # close the client's session behind its back
            _call(sock, 1, 12, _fetch_body(before, -1, {}))
        producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
        for p in range(3):  # records only a fetch after the loss can bring
            for i in range(10, 13):
                producer.send(topic, value=b"%d-%d" % (p, i), partition=p)
                sent.add((p, i, b"%d-%d" % (p, i)))
        producer.flush(60)
        producer.close()
        for msg in consumer:
            got.append((msg.partition, msg.offset, msg.value))
            if len(got) == len(sent):
                break
        after = handler.next_metadata.session_id
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
    assert after not in (0, before)  # the client opened a new session with a full fetch


@pytest.mark.integration
def test_confluent_kafka_consumes_several_partitions_without_a_session(kafka_broker):
    """librdkafka sends session 0, epoch -1 (its fetcher has no KIP-227 sessions): every
    fetch is sessionless, and reads every partition."""
    topic, sent = _several_partitions(kafka_broker)
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"fs-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "log_level": 0})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
