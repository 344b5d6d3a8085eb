"""The Python client's idempotent and transactional producer, and read_committed reads.

In process (no broker): librdkafka's configuration rules for ``enable.idempotence``
and ``transactional.id``; how sequences are numbered, kept by retries and given back
by refused batches; OUT_OF_ORDER_SEQUENCE_NUMBER is fatal for an idempotent producer.

Against real brokers: a produce retried after its answer was lost is written once
(and twice without idempotence, which shows the fault injection bites);
confluent-kafka's consume-transform-produce loop with transactions leaves every
input exactly once in the read_committed output, an aborted batch included; a second
producer with the same ``transactional.id`` fences the first; read_committed never
sees aborted records, read_uncommitted does, and an open transaction holds
read_committed back until it commits.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Callable

import httpx
import orjson
import pytest

from laketail.client import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from laketail.client.config import producer_config
from laketail.errors import InvalidRecord, OutOfOrderSequenceNumber

#: A failure bound for loops that wait on the broker, not a claim about speed.
DEADLINE_S = 60.0


# -- configuration (in process) -------------------------------------------------------------------


def conf_error(conf: dict) -> str:
    with pytest.raises(KafkaException) as raised:
        producer_config(conf, {})
    err = raised.value.args[0]
    assert err.code() == KafkaError._INVALID_ARG
    return err.str()


def test_idempotence_is_on_by_default_and_sets_acks_all():
    conf = producer_config({}, {})
    assert conf.enable_idempotence and conf.acks == "all" and conf.max_in_flight == 5
    assert conf.transactional_id is None and conf.transaction_timeout_ms == 60_000


def test_explicit_idempotence_refuses_conflicting_settings_as_librdkafka_does():
    base = {"enable.idempotence": True}
    assert "`acks` must be set to `all`" in conf_error({**base, "acks": 1})
    assert "`retries` must be set >= 1" in conf_error({**base, "retries": 0})
    assert "`max.in.flight` must be set <= 5" in conf_error({**base, "max.in.flight.requests.per.connection": 6})
    assert producer_config({**base, "max.in.flight": 5, "acks": "all"}, {}).enable_idempotence


def test_default_idempotence_yields_to_an_explicit_conflicting_setting():
    assert not producer_config({"acks": "1"}, {}).enable_idempotence
    assert producer_config({"acks": "1"}, {}).acks == "1"
    assert not producer_config({"retries": 0}, {}).enable_idempotence
    assert not producer_config({"enable.idempotence": False}, {}).enable_idempotence


def test_transactional_id_requires_idempotence_and_bounds_the_timeouts():
    assert "requires `enable.idempotence=true`" in conf_error({"transactional.id": "t", "enable.idempotence": False})
    assert "`acks` must be set to `all`" in conf_error({"transactional.id": "t", "acks": 0})
    conf = producer_config({"transactional.id": "t", "transaction.timeout.ms": 10_000}, {})
    assert conf.enable_idempotence and conf.delivery_timeout_ms == 10_000 and conf.socket_timeout_ms == 10_000
    assert "`message.timeout.ms` must be set <= `transaction.timeout.ms`" in conf_error(
        {"transactional.id": "t", "transaction.timeout.ms": 10_000, "message.timeout.ms": 20_000})


def test_the_transactional_api_needs_a_transactional_id():
    producer = Producer({"bootstrap.servers": "http://127.0.0.1:9", "enable.idempotence": False})
    try:
        with pytest.raises(KafkaException) as raised:
            producer.init_transactions(1)
        assert raised.value.args[0].code() == KafkaError._NOT_CONFIGURED
        with pytest.raises(KafkaException) as raised:
            producer.begin_transaction()
        assert raised.value.args[0].code() == KafkaError._NOT_CONFIGURED
    finally:
        producer.close(0)


# -- sequences (in process, through a fake gateway) ------------------------------------------------


class SequenceGateway:
    """A one-partition topic ``t``; produce answers come from ``answer(params)``
    (None: success at the next offset). Records every request's producer parameters."""

    def __init__(self, answer: Callable[[dict], "tuple[int, dict] | None"] = lambda params: None) -> None:
        self.answer = answer
        self.sent: list[dict] = []
        self.producer_ids = 0
        self.next_offset = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/topics/t/partitions":
            return httpx.Response(200, json=[{"partition": 0, "leader": 0, "replicas": []}])
        if path == "/v1/producers":
            self.producer_ids += 1
            return httpx.Response(200, json={"producer_id": 100 + self.producer_ids, "producer_epoch": 0})
        assert path == "/v1/topics/t/partitions/0/records", request.url
        params = dict(request.url.params)
        self.sent.append(params)
        refusal = self.answer(params)
        if refusal is not None:
            return httpx.Response(refusal[0], content=orjson.dumps(refusal[1]))
        import pyarrow as pa

        count = pa.ipc.open_stream(pa.py_buffer(request.content)).read_all().num_rows
        base, self.next_offset = self.next_offset, self.next_offset + count
        return httpx.Response(200, json={"offsets": [
            {"partition": 0, "base_offset": base, "last_offset": base + count - 1, "count": count}]})


def fake_producer(gateway: SequenceGateway, **conf) -> Producer:
    return Producer({"bootstrap.servers": "http://gateway", "retry.backoff.ms": 1, "linger.ms": 600_000, **conf},
                    transport=httpx.MockTransport(gateway))


def send(producer: Producer, values: list[bytes]) -> list[tuple]:
    reports: list[tuple] = []
    for value in values:
        producer.produce("t", value, on_delivery=lambda err, msg: reports.append((err, msg.offset(), msg.value())))
    assert producer.flush(30) == 0
    return reports


def test_each_batch_continues_its_partitions_sequence():
    gateway = SequenceGateway()
    producer = fake_producer(gateway)
    try:
        send(producer, [b"a", b"b", b"c"])
        send(producer, [b"d", b"e"])
        send(producer, [b"f"])
    finally:
        producer.close()
    assert [(p["producer_id"], p["sequence"]) for p in gateway.sent] == [("101", "0"), ("101", "3"), ("101", "5")]
    assert gateway.producer_ids == 1


def test_a_refused_batch_gives_its_sequence_back():
    bad = InvalidRecord("no good")
    gateway = SequenceGateway(lambda params: (bad.http_status, bad.to_body()) if len(gateway.sent) == 2 else None)
    producer = fake_producer(gateway)
    try:
        assert [err for err, _, _ in send(producer, [b"a", b"b"])] == [None, None]
        assert [err.code() for err, _, _ in send(producer, [b"c"])] == [KafkaError.INVALID_RECORD]
        assert send(producer, [b"d"]) == [(None, 2, b"d")]
    finally:
        producer.close()
    assert [p["sequence"] for p in gateway.sent] == ["0", "2", "2"]


def test_out_of_order_sequence_is_fatal_for_an_idempotent_producer():
    gap = OutOfOrderSequenceNumber("expected 0")
    gateway = SequenceGateway(lambda params: (gap.http_status, gap.to_body()))
    errors: list[KafkaError] = []
    producer = fake_producer(gateway, error_cb=errors.append)
    try:
        (err, _, _), = send(producer, [b"a"])
        assert err.code() == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER and err.fatal()
        producer.poll(0)
        assert [(e.code(), e.fatal()) for e in errors] == [(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, True)]
        with pytest.raises(KafkaException) as raised:
            producer.produce("t", b"b")
        assert raised.value.args[0].code() == KafkaError._FATAL and raised.value.args[0].fatal()
    finally:
        producer.close(0)


# -- real brokers ---------------------------------------------------------------------------------------

integration = pytest.mark.integration


class DroppedAnswers(httpx.BaseTransport):
    """A real HTTP transport that, for the produce requests ``drop`` picks, lets the
    broker handle the request and then loses its answer: the client sees a broken
    connection after the records were appended -- the case idempotence exists for."""

    def __init__(self, drop: Callable[[httpx.Request], bool]) -> None:
        self.inner = httpx.HTTPTransport()
        self.drop = drop
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/records") and self.drop(request):
            response.read()
            response.close()
            self.dropped += 1
            raise httpx.ReadError("connection reset after the broker answered", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def first_attempts_only() -> Callable[[httpx.Request], bool]:
    """Drop the answer of each request the first time it is sent (a retry carries the
    same body, and for an idempotent batch the same producer id and sequence)."""
    seen: set = set()

    def drop(request: httpx.Request) -> bool:
        key = (request.url.path, request.url.params.get("sequence"), request.content)
        if key in seen:
            return False
        seen.add(key)
        return True

    return drop


def read_all(servers: str, clients, topic: str, partitions: int, isolation: str) -> list:
    """Every record a consumer with ``isolation`` sees, from the start to the end
    offset it reports (the last stable offset under read_committed)."""
    consumer = clients(Consumer({"bootstrap.servers": servers, "isolation.level": isolation}))
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + DEADLINE_S

    def done() -> bool:
        positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
        return all(tp.offset >= ends[tp.partition] for tp in positions)

    while not done():
        assert time.monotonic() < deadline, f"read {len(out)} records; positions never reached {ends}"
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            out.append(msg)
    return out


@integration
@pytest.mark.parametrize("idempotent", [True, False])
def test_a_retry_after_a_lost_answer_is_not_written_twice(servers, clients, make_topic, idempotent):
    topic = make_topic(partitions=3)
    transport = DroppedAnswers(first_attempts_only())
    producer = clients(Producer({"bootstrap.servers": servers, "enable.idempotence": idempotent, "linger.ms": 50,
                                 "batch.num.messages": 7, "retry.backoff.ms": 10}, transport=transport))
    reports = []
    for i in range(60):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i % 11}",
                         on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset(), msg.value())))
    assert producer.flush(DEADLINE_S) == 0
    assert transport.dropped >= 3 and all(err is None for err, *_ in reports)

    stored = read_all(servers, clients, topic, 3, "read_committed")
    counts = Counter(m.value() for m in stored)
    assert set(counts) == {f"v{i}".encode() for i in range(60)}
    if idempotent:
        assert all(n == 1 for n in counts.values())
        assert {(m.partition(), m.offset(), m.value()) for m in stored} == {(p, o, v) for _, p, o, v in reports}
    else:  # without idempotence the same faults duplicate: the injection is real
        assert sum(counts.values()) > 60


@pytest.fixture
def txn_id() -> str:
    return f"txn-{uuid.uuid4().hex[:10]}"


@integration
def test_a_second_producer_with_the_same_transactional_id_fences_the_first(servers, clients, make_topic, txn_id):
    topic = make_topic()
    zombie = clients(Producer({"bootstrap.servers": servers, "transactional.id": txn_id}))
    zombie.init_transactions(DEADLINE_S)
    zombie.begin_transaction()
    for i in range(3):
        zombie.produce(topic, f"zombie-{i}".encode())
    assert zombie.flush(DEADLINE_S) == 0

    successor = clients(Producer({"bootstrap.servers": servers, "transactional.id": txn_id}))
    successor.init_transactions(DEADLINE_S)  # fences the zombie and aborts its transaction

    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(DEADLINE_S)
    err = raised.value.args[0]
    assert err.code() == KafkaError.PRODUCER_FENCED and err.name() == "PRODUCER_FENCED"
    assert err.fatal() and not err.txn_requires_abort() and not err.retriable()
    with pytest.raises(KafkaException) as again:
        zombie.produce(topic, b"late")
    assert again.value.args[0].code() == KafkaError._FATAL and again.value.args[0].fatal()
    with pytest.raises(KafkaException) as abort:
        zombie.abort_transaction(DEADLINE_S)
    assert abort.value.args[0].code() == KafkaError.PRODUCER_FENCED

    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(DEADLINE_S)
    assert [m.value() for m in read_all(servers, clients, topic, 1, "read_committed")] == [b"successor"]
    assert len(read_all(servers, clients, topic, 1, "read_uncommitted")) == 4


@integration
def test_read_committed_skips_aborted_records_and_waits_for_open_transactions(
        servers, clients, make_topic, txn_id):
    topic = make_topic()
    producer = clients(Producer({"bootstrap.servers": servers, "transactional.id": txn_id}))
    producer.init_transactions(DEADLINE_S)
    committed = clients(Consumer({"bootstrap.servers": servers}))
    uncommitted = clients(Consumer({"bootstrap.servers": servers, "isolation.level": "read_uncommitted"}))
    tp = TopicPartition(topic, 0)

    producer.begin_transaction()
    for value in (b"a0", b"a1", b"a2"):
        producer.produce(topic, value)
    assert producer.flush(DEADLINE_S) == 0
    # The open transaction holds the last stable offset back; the high watermark moved.
    assert committed.get_watermark_offsets(tp) == (0, 0)
    assert uncommitted.get_watermark_offsets(tp) == (0, 3)
    producer.commit_transaction(DEADLINE_S)
    assert committed.get_watermark_offsets(tp)[1] == 4  # past the COMMIT marker

    producer.begin_transaction()
    producer.produce(topic, b"b0")
    producer.produce(topic, b"b1")
    assert producer.flush(DEADLINE_S) == 0
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"c0")
    producer.commit_transaction(DEADLINE_S)

    seen = read_all(servers, clients, topic, 1, "read_committed")
    assert [(m.offset(), m.value()) for m in seen] == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (7, b"c0")]
    everything = read_all(servers, clients, topic, 1, "read_uncommitted")
    assert [m.value() for m in everything] == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]
    # Positions move past markers and aborted records: to the end, not to the last record + 1.
    reader = clients(Consumer({"bootstrap.servers": servers}))
    reader.assign([TopicPartition(topic, 0, 3)])
    deadline = time.monotonic() + DEADLINE_S
    values = []
    while reader.position([tp])[0].offset != 9:
        assert time.monotonic() < deadline, f"position stuck at {reader.position([tp])[0].offset}"
        msg = reader.poll(0.2)
        if msg is not None:
            values.append(msg.value())
    assert values == [b"c0"]


@integration
def test_abort_drops_queued_records_and_the_next_transaction_commits(servers, clients, make_topic, txn_id):
    topic = make_topic(partitions=2)
    producer = clients(Producer({"bootstrap.servers": servers, "transactional.id": txn_id, "linger.ms": 600_000}))
    producer.init_transactions(DEADLINE_S)
    with pytest.raises(KafkaException) as outside:
        producer.produce(topic, b"outside")
    assert outside.value.args[0].code() == KafkaError._STATE
    reports = []
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"dropped-{i}".encode(), partition=i % 2,
                         on_delivery=lambda err, msg: reports.append(err))
    producer.abort_transaction(DEADLINE_S)  # lingering: nothing was sent
    producer.poll(0)
    assert [e.code() for e in reports] == [KafkaError._PURGE_QUEUE] * 5
    producer.begin_transaction()
    producer.produce(topic, b"kept", partition=1)
    producer.commit_transaction(DEADLINE_S)
    assert [m.value() for m in read_all(servers, clients, topic, 2, "read_uncommitted")] == [b"kept"]


def rewind_to_committed(consumer: Consumer) -> None:
    """After an abort: continue every assigned partition from the group's committed
    offset (the offsets sent to the aborted transaction were dropped with it)."""
    for tp in consumer.committed(consumer.assignment(), timeout=DEADLINE_S):
        consumer.seek(tp)  # OFFSET_INVALID where nothing is committed: auto.offset.reset


@integration
def test_consume_transform_produce_leaves_each_input_exactly_once(group_broker, clients, make_topic, txn_id):
    """confluent-kafka's exactly-once loop (its eos-transactions example, in spirit):
    consume a batch, produce its transformation, send the consumer's positions to the
    transaction, commit -- and once, abort instead and rewind to the committed offsets."""
    url = group_broker.url
    source = make_topic(partitions=3, broker=group_broker)
    sink = make_topic(partitions=3, broker=group_broker)
    inputs = [f"in-{i}".encode() for i in range(90)]
    feeder = Producer({"bootstrap.servers": url})
    for i, value in enumerate(inputs):
        feeder.produce(source, value, key=f"k{i % 13}")
    assert feeder.flush(DEADLINE_S) == 0
    feeder.close()

    group = f"eos-{uuid.uuid4().hex[:10]}"
    consumer = clients(Consumer({
        "bootstrap.servers": url, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
    }))
    producer = clients(Producer({"bootstrap.servers": url, "transactional.id": txn_id}))
    consumer.subscribe([source])
    producer.init_transactions(DEADLINE_S)

    transactions = committed = 0
    aborted: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while committed < len(inputs):
        assert time.monotonic() < deadline, f"committed {committed} of {len(inputs)} inputs"
        batch = consumer.consume(num_messages=16, timeout=0.5)
        for msg in batch:
            if msg.error() is not None:
                raise KafkaException(msg.error())
        if not batch:
            continue
        producer.begin_transaction()
        for msg in batch:
            producer.produce(sink, msg.value().replace(b"in-", b"out-"), key=msg.key())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata())
        transactions += 1
        if transactions == 3:
            assert producer.flush(DEADLINE_S) == 0  # written, then aborted
            producer.abort_transaction(DEADLINE_S)
            aborted.extend(msg.value() for msg in batch)
            rewind_to_committed(consumer)
            continue
        producer.commit_transaction(DEADLINE_S)
        committed += len(batch)

    expected = Counter(value.replace(b"in-", b"out-") for value in inputs)
    assert aborted, "one transaction was aborted"
    visible = read_all(url, clients, sink, 3, "read_committed")
    assert Counter(m.value() for m in visible) == expected
    everything = read_all(url, clients, sink, 3, "read_uncommitted")
    assert len(everything) == len(inputs) + len(aborted)
    group_offsets = consumer.committed([TopicPartition(source, p) for p in range(3)], timeout=DEADLINE_S)
    ends = {p: group_broker.rest.offsets(source, p)[1] for p in range(3)}
    assert {tp.partition: tp.offset for tp in group_offsets} == ends


class Faults(httpx.BaseTransport):
    """A real HTTP transport with switchable faults: ``refuse(request)`` true means the
    connection fails before the request leaves (nothing reaches the broker);
    ``lose(request)`` true means the broker handles it and its answer is lost."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.refuse: Callable[[httpx.Request], bool] = lambda request: False
        self.lose: Callable[[httpx.Request], bool] = lambda request: False
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.refuse(request):
            raise httpx.ConnectError("connection refused (injected)", request=request)
        response = self.inner.handle_request(request)
        if self.lose(request):
            response.read()
            response.close()
            self.lost += 1
            raise httpx.ReadError("connection reset after the broker answered (injected)", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def describe(servers: str, transactional_id: str) -> dict:
    resp = httpx.get(f"{servers}/v1/transactions/{transactional_id}", timeout=DEADLINE_S)
    assert resp.status_code == 200, resp.text
    return resp.json()


@integration
def test_a_commit_the_coordinator_did_not_hear_is_retriable(servers, clients, make_topic, txn_id):
    topic = make_topic()
    faults = Faults()
    producer = clients(Producer({"bootstrap.servers": servers, "transactional.id": txn_id}, transport=faults))
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"v")
    faults.refuse = lambda request: request.url.path.endswith("/commit")
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(0.5)
    err = raised.value.args[0]
    assert err.retriable() and not err.fatal() and not err.txn_requires_abort()
    faults.refuse = lambda request: False
    producer.commit_transaction(DEADLINE_S)  # the same call again
    assert [m.value() for m in read_all(servers, clients, topic, 1, "read_committed")] == [b"v"]


@integration
def test_offsets_of_a_member_the_group_does_not_know_require_an_abort(servers, clients, make_topic, txn_id):
    from laketail.client import ConsumerGroupMetadata

    topic = make_topic()
    producer = clients(Producer({"bootstrap.servers": servers, "transactional.id": txn_id}))
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"doomed")
    stale = ConsumerGroupMetadata(f"group-{uuid.uuid4().hex[:8]}", 3, "ghost-member")
    with pytest.raises(KafkaException) as raised:
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], stale)
    err = raised.value.args[0]
    assert err.txn_requires_abort() and not err.fatal() and not err.retriable()
    assert err.name() in ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "GROUP_ID_NOT_FOUND"), err
    with pytest.raises(KafkaException) as commit:
        producer.commit_transaction(DEADLINE_S)
    assert commit.value.args[0].txn_requires_abort()
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"kept")
    producer.commit_transaction(DEADLINE_S)
    assert [m.value() for m in read_all(servers, clients, topic, 1, "read_committed")] == [b"kept"]


@integration
@pytest.mark.parametrize("fault", ["answer lost", "request refused"])
def test_an_abort_with_a_batch_of_unknown_fate_bumps_the_epoch(servers, clients, make_topic, txn_id, fault):
    """A transactional batch's attempt ends without an answer and the transaction is
    aborted while the batch waits for its retry: the client cannot know whether the
    broker counted its sequence (it did when the answer was lost, it did not when the
    connection was refused), so it starts a new epoch (sequences from 0) before the
    next transaction, which then commits either way."""
    topic = make_topic()
    faults = Faults()
    producer = clients(Producer({"bootstrap.servers": servers, "transactional.id": txn_id,
                                 "retry.backoff.ms": 30_000}, transport=faults))
    producer.init_transactions(DEADLINE_S)
    epoch = describe(servers, txn_id)["producer_epoch"]
    attempts: list[str] = []

    def produce_request(request: httpx.Request) -> bool:
        if request.url.path.endswith("/records"):
            attempts.append(request.url.params["sequence"])
            return True
        return False

    if fault == "answer lost":
        faults.lose = produce_request
    else:
        faults.refuse = produce_request
    reports = []
    producer.begin_transaction()
    producer.produce(topic, b"unknown-fate", on_delivery=lambda err, msg: reports.append(err))
    deadline = time.monotonic() + DEADLINE_S
    while not attempts:
        assert time.monotonic() < deadline, "the produce request never went out"
        producer.poll(0.05)
    faults.lose = faults.refuse = lambda request: False
    producer.abort_transaction(DEADLINE_S)
    producer.poll(0)
    assert attempts == ["0"] and [e.code() for e in reports] == [KafkaError._PURGE_QUEUE]
    assert describe(servers, txn_id)["producer_epoch"] == epoch + 1

    producer.begin_transaction()
    producer.produce(topic, b"next")
    producer.commit_transaction(DEADLINE_S)
    assert [m.value() for m in read_all(servers, clients, topic, 1, "read_committed")] == [b"next"]
    written = [b"unknown-fate", b"next"] if fault == "answer lost" else [b"next"]
    assert [m.value() for m in read_all(servers, clients, topic, 1, "read_uncommitted")] == written


WORKER = Path(__file__).with_name("eos_client_worker.py")
KILLS = 5


@pytest.mark.fault
@integration
def test_the_loop_killed_at_random_moments_leaves_each_input_exactly_once(group_broker, clients, make_topic,
                                                                          txn_id, tmp_path):
    """The same loop in a process (``eos_client_worker.py``) killed with SIGKILL at
    random moments, restarted each time: its successor's ``init_transactions()`` fences
    it and aborts what it left open, the group hands the partitions over, and the
    output holds each input once. The seed is in every failure message."""
    seed = int(os.environ.get("LAKETAIL_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    url = group_broker.url
    source = make_topic(partitions=2, broker=group_broker)
    sink = make_topic(partitions=2, broker=group_broker)
    inputs = [f"p{p}-{i}".encode() for p in range(2) for i in range(150)]
    feeder = clients(Producer({"bootstrap.servers": url}))
    for value in inputs:
        feeder.produce(source, value, partition=int(value[1:2]))
    assert feeder.flush(DEADLINE_S) == 0
    group = f"eos-{uuid.uuid4().hex[:10]}"
    argv = [sys.executable, str(WORKER), url, source, sink, group, txn_id, "--batch", "7"]

    def committed() -> dict[int, int]:
        resp = group_broker.rest.http.post(f"/v1/groups/{group}/committed", json={
            "partitions": [{"topic": source, "partition": p} for p in range(2)]})
        assert resp.status_code == 200, resp.text
        return {o["partition"]: o["offset"] for o in resp.json()["offsets"]}

    def start(n: int) -> subprocess.Popen:
        with open(tmp_path / f"worker-{n}.log", "wb") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def log(n: int) -> str:
        return (tmp_path / f"worker-{n}.log").read_text()[-3000:]

    for n in range(KILLS + 1):
        worker = start(n)
        before = committed()
        deadline = time.monotonic() + 2 * DEADLINE_S
        # Each incarnation makes progress (a commit, or the end) before it may be killed.
        while worker.poll() is None and committed() == before:
            assert time.monotonic() < deadline, f"seed {seed}: worker {n} made no progress:\n{log(n)}"
            time.sleep(0.02)
        if n < KILLS and worker.poll() is None:
            time.sleep(rng.uniform(0.0, 0.3))  # before, inside or after a transaction
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            continue
        try:
            code = worker.wait(timeout=2 * DEADLINE_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
            raise AssertionError(f"seed {seed}: the last worker did not finish:\n{log(n)}") from None
        assert code == 0, f"seed {seed}: worker {n} failed:\n{log(n)}"
        break

    assert committed() == {0: 150, 1: 150}
    out = Counter(m.value() for m in read_all(url, clients, sink, 2, "read_committed"))
    assert out == Counter(b"out:" + value for value in inputs), f"seed {seed}"
