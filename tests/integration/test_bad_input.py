"""Every bad input gets its 4xx, Confluent's error body with Kafka's error name, writes
nothing, and leaves the broker answering.

"Writes nothing" is checked where it shows: produce errors leave every partition's log
end offset where it was; admin errors leave the topic list and the data root's
``topics/`` folder as they were.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from contextlib import contextmanager
from typing import Callable

import pytest

from .support import assert_error

pytestmark = pytest.mark.integration

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@pytest.fixture(scope="module")
def seeded(broker) -> str:
    """A two-partition topic with records in both partitions."""
    rest = broker.rest
    name = f"bad-input-{uuid.uuid4().hex[:10]}"
    resp = rest.create_topic(name, 2, configs={"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text
    for p in (0, 1):
        resp = rest.produce_binary(name, [{"value": b"seed"}] * (3 + p), partition=p)
        assert resp.status_code == 200, resp.text
    return name


def _topic_dirs(broker) -> list[str]:
    root = broker.data_dir / "topics"
    return sorted(os.listdir(root)) if root.exists() else []


def _topic_names(broker) -> list[str]:
    resp = broker.rest.http.get("/topics")
    assert resp.status_code == 200, resp.text
    return sorted(resp.json())


@contextmanager
def writes_nothing(broker, *topics: str):
    """Around a rejected request: offsets, topics and table folders do not change and
    the broker still answers afterwards."""
    rest = broker.rest
    offsets = {t: rest.end_offsets(t) for t in topics}
    names, dirs = _topic_names(broker), _topic_dirs(broker)
    data_root = sorted(os.listdir(broker.data_dir))
    parent = sorted(os.listdir(broker.data_dir.parent))
    yield
    assert rest.http.get("/v3/clusters").status_code == 200, "the broker stopped answering"
    assert {t: rest.end_offsets(t) for t in topics} == offsets, "a rejected request moved a log end offset"
    assert _topic_names(broker) == names, "a rejected request changed the topic list"
    assert _topic_dirs(broker) == dirs, "a rejected request changed the tables folder"
    assert sorted(os.listdir(broker.data_dir)) == data_root
    assert sorted(os.listdir(broker.data_dir.parent)) == parent, "something was written outside the data root"


# -- produce -----------------------------------------------------------------------------

Case = tuple[str, Callable, int, int, str]


def _v2(body, content_type=BINARY_V2, partition=None, acks=None):
    return lambda rest, topic: rest.produce_v2_raw(topic, body, content_type, partition=partition, acks=acks)


def _v3(body):
    return lambda rest, topic: rest.produce_v3(topic, body)


OK = {"value": b64(b"fine")}
TOO_BIG = b64(b"x" * (DEFAULT_MAX_MESSAGE_BYTES + 1))

PRODUCE_CASES: list[Case] = [
    ("v2 broken json", _v2('{"records": [{"value": "AA=="}'), 400, 40002, "INVALID_REQUEST"),
    ("v2 body not an object", _v2("[1, 2]"), 400, 40002, "INVALID_REQUEST"),
    ("v2 no records field", _v2("{}"), 422, 42200, "INVALID_REQUEST"),
    ("v2 records not a list", _v2({"records": "AA=="}), 400, 40002, "INVALID_REQUEST"),
    ("v2 empty records", _v2({"records": []}), 422, 42200, "INVALID_REQUEST"),
    ("v2 json empty records", _v2({"records": []}, JSON_V2), 422, 42200, "INVALID_REQUEST"),
    ("v2 json broken json", _v2('{"records": [{"value": {]}', JSON_V2), 400, 40002, "INVALID_REQUEST"),
    ("bad base64 value", _v2({"records": [{"value": "@@@@"}]}), 422, 42206, "INVALID_RECORD"),
    ("bad base64 length", _v2({"records": [{"value": "QUJDR"}]}), 422, 42206, "INVALID_RECORD"),
    ("bad base64 key", _v2({"records": [{"key": "!not base64!", "value": "AA=="}]}), 422, 42206, "INVALID_RECORD"),
    ("binary value not a string", _v2({"records": [{"value": 12345}]}), 422, 42206, "INVALID_RECORD"),
    ("oversized value", _v2({"records": [{"value": TOO_BIG}]}), 413, 41301, "MESSAGE_TOO_LARGE"),
    (
        "key and value together oversized",
        _v2({"records": [{"key": b64(b"k" * 600_000), "value": b64(b"v" * 600_000)}]}),
        413, 41301, "MESSAGE_TOO_LARGE",
    ),
    ("unknown partition in a record", _v2({"records": [{"value": "AA==", "partition": 7}]}), 404, 40402,
     "UNKNOWN_TOPIC_OR_PARTITION"),
    ("negative partition in a record", _v2({"records": [{"value": "AA==", "partition": -1}]}), 404, 40402,
     "UNKNOWN_TOPIC_OR_PARTITION"),
    ("unknown partition endpoint", _v2({"records": [OK]}, partition=7), 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("negative partition endpoint", _v2({"records": [OK]}, partition=-1), 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("mixed: one bad base64", _v2({"records": [OK, OK, {"value": "@@@@"}, OK]}), 422, 42206, "INVALID_RECORD"),
    ("mixed: one unknown partition", _v2({"records": [{**OK, "partition": 0}, {**OK, "partition": 9}]}), 404,
     40402, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("mixed: one bad key on the partition endpoint", _v2({"records": [OK, {"key": "%%", "value": "AA=="}]},
                                                         partition=1), 422, 42206, "INVALID_RECORD"),
    ("invalid acks", _v2({"records": [OK]}, acks="2"), 400, 40002, "INVALID_REQUEST"),
    ("v3 broken json", _v3('{"value": {"type": "STRING", "data": "x"'), 400, 40002, "INVALID_REQUEST"),
    ("v3 bad base64 value", _v3({"value": {"type": "BINARY", "data": "@@@@"}}), 422, 42206, "INVALID_RECORD"),
    ("v3 bad base64 header", _v3({"value": {"type": "STRING", "data": "x"},
                                  "headers": [{"name": "h", "value": "@@@@"}]}), 422, 42206, "INVALID_RECORD"),
    ("v3 unknown partition", _v3({"partition_id": 5, "value": {"type": "STRING", "data": "x"}}), 404, 404,
     "UNKNOWN_TOPIC_OR_PARTITION"),
    ("v3 oversized", _v3({"value": {"type": "BINARY", "data": TOO_BIG}}), 413, 41301, "MESSAGE_TOO_LARGE"),
]


@pytest.mark.parametrize("case", PRODUCE_CASES, ids=[c[0] for c in PRODUCE_CASES])
def test_bad_produce_is_rejected_and_writes_nothing(broker, seeded, case):
    _, send, status, code, name = case
    with writes_nothing(broker, seeded):
        assert_error(send(broker.rest, seeded), status, code, name)


def test_topic_limit_is_its_max_message_bytes(broker, make_topic):
    """A record whose batch would be exactly max.message.bytes is accepted; one byte more
    is not. Kafka's producer sizes a record as the batch it travels in
    (``AbstractRecords.estimateSizeInBytesUpperBound``: 61 bytes of batch header and at
    most 21 of record overhead besides key, value and headers); the peer suite's
    ``test_too_large_record`` relies on that overhead being counted."""
    rest = broker.rest
    topic = make_topic(configs={"max.message.bytes": "1000"})
    resp = rest.produce_binary(topic, [{"key": b"k" * 10, "value": b"v" * 908}])
    assert resp.status_code == 200, resp.text
    with writes_nothing(broker, topic):
        resp = rest.produce_binary(topic, [{"key": b"k" * 10, "value": b"v" * 909}])
        assert_error(resp, 413, 41301, "MESSAGE_TOO_LARGE")
    with writes_nothing(broker, topic):
        resp = rest.produce_v3(topic, {"headers": [{"name": "h", "value": b64(b"x" * 1000)}],
                                       "value": {"type": "STRING", "data": "v"}})
        assert_error(resp, 413, 41301, "MESSAGE_TOO_LARGE")


def test_an_oversized_record_is_refused_alone_and_the_others_are_written(broker, make_topic):
    """kafka-rest answers a record the producer refuses in its own ``offsets[i]``
    (``AbstractProduceAction``: a failed future becomes ``PartitionOffset(null, null,
    errorCode, message)``, 50002 for a non-retriable Kafka error such as
    RecordTooLargeException) and writes the others; the issue (37, section 2) asks for
    the same instead of refusing the request whole with 413."""
    rest = broker.rest
    topic = make_topic(configs={"max.message.bytes": "1000"})
    resp = rest.produce_binary(topic, [{"value": b"a"}, {"value": b"v" * 1000}, {"value": b"b"}])
    assert resp.status_code == 200, resp.text
    first, refused, last = resp.json()["offsets"]
    assert (first["offset"], last["offset"]) == (0, 1)
    assert refused["offset"] is None and refused["error_code"] == 50002, refused
    assert refused["error"].startswith("MESSAGE_TOO_LARGE: record 1 is 1082 bytes"), refused
    assert [r["value"] for r in rest.fetch_range(topic, 0, 0, 2)] == [b64(b"a"), b64(b"b")]


@pytest.fixture(scope="module")
def no_auto_create(tmp_path_factory):
    """A broker with auto.create.topics.enable=false: produce to a missing topic is a 404."""
    from conftest import running_broker

    yield from running_broker(tmp_path_factory, "no-auto-create", {"LAKETAIL_AUTO_CREATE_TOPICS_ENABLE": "false"})


@pytest.mark.parametrize(
    "send, code",
    [
        (lambda rest, t: rest.produce_binary(t, [{"value": b"x"}]), 40401),
        (lambda rest, t: rest.produce_binary(t, [{"value": b"x"}], partition=0), 40401),
        (lambda rest, t: rest.produce_json(t, [{"value": 1}]), 40401),
        (lambda rest, t: rest.produce_v3(t, {"value": {"type": "STRING", "data": "x"}}), 404),
    ],
    ids=["v2 binary", "v2 partition", "v2 json", "v3 records"],
)
def test_produce_to_an_unknown_topic_without_auto_create_is_404(no_auto_create, send, code):
    with writes_nothing(no_auto_create):
        assert_error(send(no_auto_create.rest, f"no-such-topic-{uuid.uuid4().hex[:8]}"), 404, code,
                     "UNKNOWN_TOPIC_OR_PARTITION")


@pytest.mark.parametrize(
    "send, code",
    [
        (lambda rest, t: rest.fetch(t, 0, 0), 40401),
        (lambda rest, t: rest.http.get(f"/topics/{t}"), 40401),
        (lambda rest, t: rest.http.get(f"/topics/{t}/partitions"), 40401),
        (lambda rest, t: rest.http.get(f"/topics/{t}/partitions/0/offsets"), 40401),
        (lambda rest, t: rest.http.get(rest.v3(f"/topics/{t}")), 404),  # Confluent's v3: error_code 404
        (lambda rest, t: rest.http.delete(rest.v3(f"/topics/{t}")), 404),
    ],
    ids=["fetch", "v2 topic", "v2 partitions", "v2 offsets", "v3 topic", "v3 delete"],
)
def test_unknown_topic_is_40401(broker, seeded, send, code):
    with writes_nothing(broker, seeded):
        assert_error(send(broker.rest, f"no-such-topic-{uuid.uuid4().hex[:8]}"), 404, code,
                     "UNKNOWN_TOPIC_OR_PARTITION")


@pytest.mark.parametrize(
    "send",
    [
        lambda rest, t: rest.fetch(t, 2, 0),
        lambda rest, t: rest.fetch(t, -1, 0),
        lambda rest, t: rest.http.get(f"/topics/{t}/partitions/2"),
        lambda rest, t: rest.http.get(f"/topics/{t}/partitions/2/offsets"),
    ],
    ids=["fetch", "fetch negative", "v2 partition", "v2 offsets"],
)
def test_unknown_partition_is_40402(broker, seeded, send):
    with writes_nothing(broker, seeded):
        assert_error(send(broker.rest, seeded), 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION")


# -- fetch ---------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["negative", "one past the end", "far past the end"])
def test_fetch_outside_the_log_is_offset_out_of_range(broker, seeded, where):
    rest = broker.rest
    end = rest.offsets(seeded, 1)[1]
    offset = {"negative": -1, "one past the end": end + 1, "far past the end": 2**62}[where]
    with writes_nothing(broker, seeded):
        for timeout in (0, 200):
            assert_error(rest.fetch(seeded, 1, offset, timeout_ms=timeout), 416, 41601, "OFFSET_OUT_OF_RANGE")


def test_fetch_with_a_broken_offset_is_invalid_request(broker, seeded):
    with writes_nothing(broker, seeded):
        resp = broker.rest.http.get(f"/topics/{seeded}/partitions/0/records", params={"offset": "abc"},
                                    headers={"Accept": BINARY_V2})
        assert_error(resp, 400, 40002, "INVALID_REQUEST")


# -- topic admin ---------------------------------------------------------------------------

INVALID_NAMES = [".", "..", "a" * 250, "a/b", "a b", "", "bad$name", "caf\u00e9", "../escape", "a\\b"]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=[repr(n)[:20] for n in INVALID_NAMES])
def test_invalid_topic_name(broker, seeded, name):
    with writes_nothing(broker, seeded):
        assert_error(broker.rest.create_topic(name, 1), 400, 40002, "INVALID_TOPIC_EXCEPTION")


def test_longest_valid_topic_name_is_accepted(broker):
    name = ("z" + uuid.uuid4().hex) + "x" * (249 - 33)
    assert len(name) == 249
    resp = broker.rest.create_topic(name, 1)
    assert resp.status_code in (200, 201), resp.text
    assert broker.rest.produce_binary(name, [{"value": b"long"}]).status_code == 200


@pytest.mark.parametrize("existing,clash", [("dot.{u}", "dot_{u}"), ("under_{u}", "under.{u}")])
def test_dot_underscore_collision_is_invalid_topic(broker, seeded, existing, clash):
    u = uuid.uuid4().hex[:10]
    resp = broker.rest.create_topic(existing.format(u=u), 1)
    assert resp.status_code in (200, 201), resp.text
    with writes_nothing(broker, seeded):
        body = assert_error(broker.rest.create_topic(clash.format(u=u), 1), 400, 40002, "INVALID_TOPIC_EXCEPTION")
    assert existing.format(u=u) in body["message"] or "collide" in body["message"].lower()


def test_existing_topic_is_409_and_keeps_its_data(broker, seeded):
    rest = broker.rest
    with writes_nothing(broker, seeded):
        assert_error(rest.create_topic(seeded, 5), 400, 40002, "TOPIC_ALREADY_EXISTS")
    assert rest.partition_ids(seeded) == [0, 1]
    assert rest.end_offsets(seeded) == {0: 3, 1: 4}


BAD_CONFIGS = [
    {"no.such.config": "1"},
    {"retention.ms": "abc"},
    {"retention.ms": "-7"},
    {"segment.bytes": "1"},
    {"cleanup.policy": "sometimes"},
    {"unclean.leader.election.enable": "maybe"},
    {"max.message.bytes": "1.5"},
    {"message.timestamp.type": "WallClock"},
]


@pytest.mark.parametrize(
    "configs", BAD_CONFIGS, ids=[next(iter(c)) + "=" + next(iter(c.values())) for c in BAD_CONFIGS]
)
def test_invalid_config_on_create(broker, seeded, configs):
    with writes_nothing(broker, seeded):
        resp = broker.rest.create_topic(f"cfg-{uuid.uuid4().hex[:10]}", 1, configs=configs)
        assert_error(resp, 400, 40002, "INVALID_CONFIG")


@pytest.mark.parametrize("rf", [2, 3, 0], ids=["2 on one broker", "3 on one broker", "zero"])
def test_invalid_replication_factor(broker, seeded, rf):
    with writes_nothing(broker, seeded):
        resp = broker.rest.create_topic(f"rf-{uuid.uuid4().hex[:10]}", 1, replication_factor=rf)
        assert_error(resp, 400, 40002, "INVALID_REPLICATION_FACTOR")


@pytest.mark.parametrize("partitions", [0, -5])
def test_invalid_partition_count(broker, seeded, partitions):
    with writes_nothing(broker, seeded):
        resp = broker.rest.create_topic(f"parts-{uuid.uuid4().hex[:10]}", partitions)
        assert_error(resp, 400, 40002, "INVALID_PARTITIONS")


@pytest.mark.parametrize(
    "body",
    [
        '{"topic_name": "broken', "[]", "{}", json.dumps({"topic_name": 5}),
        json.dumps({"topic_name": "x", "partitions_count": "many"}),
    ],
    ids=["broken json", "not an object", "no topic_name", "topic_name not a string", "partitions not a number"],
)
def test_broken_create_topic_body(broker, seeded, body):
    rest = broker.rest
    with writes_nothing(broker, seeded):
        resp = rest.http.post(rest.v3("/topics"), content=body, headers={"Content-Type": "application/json"})
        assert_error(resp, 400, 40002, "INVALID_REQUEST")


# -- request size bound ----------------------------------------------------------------------

def test_request_body_over_the_bound_is_413(broker_factory):
    """``socket.request.max.bytes`` bounds a request body before it is parsed."""
    small = broker_factory(env={"LAKETAIL_SOCKET_REQUEST_MAX_BYTES": "200000"})
    rest = small.rest
    resp = rest.create_topic("bounded", 1)
    assert resp.status_code in (200, 201), resp.text
    ok = rest.produce_binary("bounded", [{"value": b"x" * 1000}])
    assert ok.status_code == 200, ok.text
    with writes_nothing(small, "bounded"):
        resp = rest.produce_binary("bounded", [{"value": b"x" * 100_000} for _ in range(3)])
        assert resp.status_code == 413, resp.text
        assert resp.json()["error_code"] == 41301
