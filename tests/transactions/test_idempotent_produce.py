"""Idempotent produce over HTTP: a batch retried after its answer was lost lands once
and the retry is answered with the original offsets; the producer parameters are
checked with clear 4xx errors.

The faults are real: a TCP proxy between the client and the broker forwards the
request, lets the broker answer, and closes the client's connection instead of
passing the answer on (:class:`~transactions.support.DroppingProxy`).
"""

from __future__ import annotations

import httpx
import pytest

from .support import (
    BINARY_V2,
    V2,
    DroppingProxy,
    Session,
    answer_json,
    arrow_body,
    b64,
    error_of,
    read_records,
    read_values,
    unique,
    v2_offsets,
)

pytestmark = pytest.mark.integration

CLOSE = {"Connection": "close"}


def send_until_answered(send, attempts: int = 5) -> tuple[httpx.Response, int]:
    """Kafka's producer loop for one batch: the same request until an answer arrives.
    Returns the answer and how many attempts lost theirs."""
    lost = 0
    for _ in range(attempts):
        try:
            return send(), lost
        except httpx.TransportError:
            lost += 1
    raise AssertionError(f"no answer after {attempts} attempts")


@pytest.mark.parametrize("arrow", [False, True], ids=["v2", "arrow"])
def test_a_batch_retried_after_a_lost_answer_lands_once_with_its_original_offsets(
        txn_broker, make_topic, arrow):
    topic = make_topic(partitions=2, broker=txn_broker)
    with DroppingProxy(txn_broker.port) as proxy, httpx.Client(base_url=proxy.url, timeout=60, headers=CLOSE) as http:
        session = Session(http)  # an idempotent producer: no transactional id
        expected: list[bytes] = []
        retried_offsets: list[list[int]] = []
        for i in range(6):
            values = [f"batch{i}-r{j}".encode() for j in range(3)]
            sequence = session.sequences.get((topic, 1), 0)
            marker = f"sequence={sequence}&".encode()
            if i in (1, 3, 4):
                proxy.drop_next(marker, times=2 if i == 4 else 1)  # batch 4 loses two answers
            resp, lost = send_until_answered(
                lambda values=values, sequence=sequence: session.produce_at(topic, 1, values, sequence, arrow=arrow)
            )
            assert resp.status_code == 200, resp.text
            assert lost == (2 if i == 4 else 1 if i in (1, 3) else 0)
            session.sequences[(topic, 1)] = sequence + len(values)
            if arrow:
                (span,) = resp.json()["offsets"]
                offsets = list(range(span["base_offset"], span["last_offset"] + 1))
            else:
                offsets = [o["offset"] for o in resp.json()["offsets"]]
            if lost:
                retried_offsets.append(offsets)
            expected.extend(values)
        assert len(proxy.dropped) == 4
        # Each lost answer named the offsets the retry got back.
        for raw, offsets in zip(proxy.dropped[:2] + proxy.dropped[3:], retried_offsets):
            body = answer_json(raw)
            if arrow:
                (span,) = body["offsets"]
                assert list(range(span["base_offset"], span["last_offset"] + 1)) == offsets
            else:
                assert [o["offset"] for o in body["offsets"]] == offsets
    http = txn_broker.rest.http
    records = read_records(http, topic, 1, "read_uncommitted")
    assert [r["offset"] for r in records] == list(range(18))
    assert read_values(http, topic, 1, "read_uncommitted") == expected
    assert read_values(http, topic, 0, "read_uncommitted") == []


@pytest.mark.fault
def test_a_batch_retried_after_the_broker_crashed_gets_its_original_offsets(broker_factory, make_topic):
    """The broker appended the batch, its answer was lost, then it was killed -9: the
    restarted broker rebuilds producer state from the log and still knows the batch."""
    from .conftest import TXN_ENV

    broker = broker_factory(env=TXN_ENV)
    topic = make_topic(broker=broker)
    with DroppingProxy(broker.port) as proxy, httpx.Client(base_url=proxy.url, timeout=60, headers=CLOSE) as http:
        session = Session(http)
        assert v2_offsets(session.produce(topic, 0, [b"a0", b"a1"])) == [0, 1]
        proxy.drop_next(b"sequence=2&")
        with pytest.raises(httpx.TransportError):
            session.produce_at(topic, 0, [b"b0", b"b1", b"b2"], 2)
        lost = [o["offset"] for o in answer_json(proxy.dropped[0])["offsets"]]
        assert lost == [2, 3, 4]
        broker.kill9()
        broker.restart()
        retry, _ = send_until_answered(lambda: session.produce_at(topic, 0, [b"b0", b"b1", b"b2"], 2))
        assert v2_offsets(retry) == lost
        assert v2_offsets(session.produce_at(topic, 0, [b"c0"], 5)) == [5]
    assert read_values(broker.rest.http, topic, 0, "read_uncommitted") == [b"a0", b"a1", b"b0", b"b1", b"b2", b"c0"]


def test_an_older_batch_retried_after_newer_ones_gets_its_offsets_back(txn_broker, make_topic):
    """The broker remembers a producer's last five batches per partition."""
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    session = Session(http)
    first = [session.produce(topic, 0, [f"b{i}".encode()]) for i in range(5)]
    for i, resp in enumerate(first):
        assert [o["offset"] for o in resp.json()["offsets"]] == [i]
    again = session.produce_at(topic, 0, [b"b1"], 1)
    assert again.status_code == 200, again.text
    assert [o["offset"] for o in again.json()["offsets"]] == [1]
    assert read_values(http, topic, 0, "read_uncommitted") == [f"b{i}".encode() for i in range(5)]


def test_a_sequence_gap_is_out_of_order(txn_broker, make_topic):
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    session = Session(http)
    assert session.produce(topic, 0, [b"a", b"b"]).status_code == 200
    gap = session.produce_at(topic, 0, [b"c"], 5)
    assert error_of(gap) == (409, 40910)
    assert "OUT_OF_ORDER_SEQUENCE_NUMBER" in gap.json()["message"]
    assert session.produce_at(topic, 0, [b"c"], 2, arrow=True).status_code == 200
    assert read_values(http, topic, 0, "read_uncommitted") == [b"a", b"b", b"c"]


@pytest.mark.parametrize("params, words", [
    ({"producer_id": "-1", "producer_epoch": "0", "sequence": "0"}, "producer_id must be in"),
    ({"producer_id": "x", "producer_epoch": "0", "sequence": "0"}, "producer_id must be an integer"),
    ({"producer_id": "1", "producer_epoch": "40000", "sequence": "0"}, "producer_epoch must be in"),
    ({"producer_id": "1", "producer_epoch": "0", "sequence": "-3"}, "sequence must be in"),
    ({"producer_id": "1", "producer_epoch": "0"}, "missing ['sequence']"),
    ({"producer_id": "", "producer_epoch": "", "sequence": ""}, "producer_id is empty"),
    ({"producer_id": "1", "producer_epoch": "0", "sequence": ""}, "sequence is empty"),
    ({"transactional": "true"}, "needs producer_id, producer_epoch and sequence"),
    ({"producer_id": "1", "producer_epoch": "0", "sequence": "0", "transactional": "yes"},
     "transactional must be true or false"),
    ({"producer_id": "1", "producer_epoch": "0", "sequence": "0", "acks": "0"}, "acks=1 or all"),
])
def test_bad_producer_parameters_are_refused_and_write_nothing(txn_broker, make_topic, params, words):
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    v2 = http.post(f"/topics/{topic}/partitions/0", params=params, json={"records": [{"value": b64(b"x")}]},
                   headers={"Content-Type": BINARY_V2, "Accept": V2})
    arrow = http.post(f"/v1/topics/{topic}/partitions/0/records", params=params, content=arrow_body([b"x"]),
                      headers={"Content-Type": "application/vnd.apache.arrow.stream"})
    for resp in (v2, arrow):
        assert error_of(resp) == (400, 40002), resp.text
        assert words in resp.json()["message"]
    assert read_values(http, topic, 0, "read_uncommitted") == []


def test_producer_parameters_on_a_topic_wide_endpoint_are_refused(txn_broker, make_topic):
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    session = Session(http)
    params = session.params(0, False)
    v2 = http.post(f"/topics/{topic}", params=params, json={"records": [{"value": b64(b"x")}]},
                   headers={"Content-Type": BINARY_V2, "Accept": V2})
    arrow = http.post(f"/v1/topics/{topic}/records", params=params, content=arrow_body([b"x"]),
                      headers={"Content-Type": "application/vnd.apache.arrow.stream"})
    for resp in (v2, arrow):
        assert error_of(resp) == (400, 40002), resp.text
        assert "per-partition endpoint" in resp.json()["message"]


def test_a_transactional_batch_needs_a_transactional_producer(txn_broker, make_topic):
    topic = make_topic(broker=txn_broker)
    session = Session(txn_broker.rest.http)  # idempotent only
    resp = session.produce(topic, 0, [b"x"], transactional=True)
    assert error_of(resp) == (409, 40913)
    assert "INVALID_PRODUCER_ID_MAPPING" in resp.json()["message"]


def test_the_producer_endpoint_without_a_body_gives_an_idempotent_producer(txn_broker):
    http = txn_broker.rest.http
    first = http.post("/v1/producers")
    second = http.post("/v1/producers", json={"transactional_id": None})
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["producer_epoch"] == second.json()["producer_epoch"] == 0
    assert first.json()["producer_id"] != second.json()["producer_id"]
    bad = http.post("/v1/producers", json={"transactional_id": unique("t"), "transaction_timeout_ms": 0})
    assert error_of(bad) == (400, 40002)
