"""Bodies built to hurt, against every body-taking route changed since 22b62ef: JSON
nested 100,000 levels (arrays) or 30,000 (objects), and bodies past the broker's
``socket.request.max.bytes`` with a Content-Length and chunked. Each is a 4xx in the
gateway's error shape (400/40002 for the nesting, 413/41301 for the size, as the
produce routes answer them) with no recursion error and no 500, and nothing changes.

Then the broker that took them is stopped with SIGTERM (a clean exit), started on the
same data and still serves with everything intact; then crashed with SIGKILL and started
again, intact too.
"""

from __future__ import annotations

import base64
import signal
from typing import Iterator

import pytest
from conftest import running_broker

from .hostile import (
    ARROW,
    BINARY_V2,
    ENV,
    GROUP,
    INSTANCE,
    JSON,
    REQUEST_MAX_BYTES,
    TOPIC,
    V2,
    World,
    assert_kafka_error,
    make_instance,
    seed,
    snapshot,
)

pytestmark = pytest.mark.integration

JSON_V2 = {"Content-Type": "application/vnd.kafka.json.v2+json"}

#: (id, method, path, headers, whether the body is JSON): every route of the changed
#: modules that reads a body.
BODY_ROUTES = [
    ("v2 produce", "POST", f"/topics/{TOPIC}", BINARY_V2, True),
    ("v2 produce json", "POST", f"/topics/{TOPIC}", JSON_V2, True),
    ("v2 produce to a partition", "POST", f"/topics/{TOPIC}/partitions/0", BINARY_V2, True),
    ("v1 arrow produce", "POST", f"/v1/topics/{TOPIC}/records", ARROW, False),
    ("v1 arrow produce to a partition", "POST", f"/v1/topics/{TOPIC}/partitions/0/records", ARROW, False),
    ("v2 create instance", "POST", "/consumers/hostile-bodies", V2, True),
    ("v2 subscribe", "POST", INSTANCE + "/subscription", V2, True),
    ("v2 assign", "POST", INSTANCE + "/assignments", V2, True),
    ("v2 seek", "POST", INSTANCE + "/positions", V2, True),
    ("v2 seek to beginning", "POST", INSTANCE + "/positions/beginning", V2, True),
    ("v2 seek to end", "POST", INSTANCE + "/positions/end", V2, True),
    ("v2 commit", "POST", INSTANCE + "/offsets", V2, True),
    ("v2 committed", "GET", INSTANCE + "/offsets", V2, True),
    ("console reset offsets", "POST", f"/v1/console/groups/{GROUP}/reset-offsets", JSON, True),
    ("console sql", "POST", "/v1/console/sql", JSON, True),
]

DEEP_ARRAYS = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECTS = b'{"a":' * 30_000 + b"1" + b"}" * 30_000
assert len(DEEP_ARRAYS) <= REQUEST_MAX_BYTES and len(DEEP_OBJECTS) <= REQUEST_MAX_BYTES  # the parser sees them

#: Valid JSON a route would otherwise accept (the padding is a field nobody reads, or a
#: record value), one byte past the bound.
_PAD = b'{"records": [{"value": "' + b"A" * REQUEST_MAX_BYTES + b'"}], "query": "SELECT * FROM hostile"}'


#: A values-only v2 binary body (the shape decoded without a JSON parse) with one bad
#: value among 500.
VALUES_ONLY_BAD_VALUE = b'{"records":[' + b",".join(
    [b'{"value":"' + (b"not base64!" if i == 250 else b"dmFsdWU=") + b'"}' for i in range(500)]) + b"]}"


def _chunked(body: bytes) -> Iterator[bytes]:
    """``body`` as a chunked upload (no Content-Length), in 16 KiB pieces."""
    for start in range(0, len(body), 16_384):
        yield body[start:start + 16_384]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    for broker in running_broker(tmp_path_factory, "hostile-bodies", ENV):
        yield seed(broker)


def _durable(world: World) -> dict:
    """What must survive a restart: topics, log offsets, committed offsets (consumer
    instances live in the gateway's memory and go with it, as REST Proxy's do)."""
    state = snapshot(world, instance=False)
    return {key: state[key] for key in ("topics", "offsets", "committed")}


def _hostile_batch(world: World) -> list[str]:
    failures = []
    for name, method, path, headers, is_json in BODY_ROUTES:
        cases = [("over the bound", _PAD, 413, 41301), ("over the bound, chunked", _chunked(_PAD), 413, 41301)]
        if is_json:
            cases += [("100,000 nested arrays", DEEP_ARRAYS, 400, 40002),
                      ("30,000 nested objects", DEEP_OBJECTS, 400, 40002)]
        if headers is BINARY_V2:  # the values-only decode's shape, broken (api/routes/produce.py)
            cases += [("values only, one not base64", VALUES_ONLY_BAD_VALUE, 422, 42206),
                      ("values only, head and tail overlapping", b'{"records":[{"value":"}]}', 400, 40002)]
        for what, body, status, code in cases:
            resp = world.http.request(method, path, content=body, headers=headers)
            try:
                assert_kafka_error(resp, status, code)
            except AssertionError as exc:
                failures.append(f"{name}, {what}: {exc}")
    # v3 produce: a chunked stream is bounded per record (see the last test), so only
    # whole bodies here; an integer too wide to store exactly is refused too.
    v3 = f"/v3/clusters/{world.cluster_id}/topics/{TOPIC}/records"
    wide = b'{"value": {"type": "JSON", "data": 18446744073709551616}}'
    v3_cases = [("over the bound", _PAD, 413, 41301), ("100,000 nested arrays", DEEP_ARRAYS, 400, 40002),
                ("30,000 nested objects", DEEP_OBJECTS, 400, 40002), ("a 65-bit integer", wide, 422, 42206)]
    for what, body, status, code in v3_cases:
        resp = world.http.post(v3, content=body, headers=JSON)
        try:
            assert_kafka_error(resp, status, code)
        except AssertionError as exc:
            failures.append(f"v3 produce, {what}: {exc}")
    return failures


@pytest.mark.fault
def test_hostile_bodies_are_refused_and_the_broker_restarts_intact(world):
    before = snapshot(world)
    failures = _hostile_batch(world)
    assert not failures, "\n".join(failures)
    assert snapshot(world) == before, "a refused body changed the broker's state"
    assert world.http.get("/consumers/hostile-bodies/instances/c1/subscription").status_code == 404

    broker = world.broker
    durable = _durable(world)
    # uvicorn re-raises SIGTERM once its shutdown is complete; None would mean it had to be killed
    assert broker.stop() in (0, -signal.SIGTERM), f"SIGTERM did not end the broker cleanly\n{broker.output()}"
    assert "Application shutdown complete" in broker.output()
    broker.start()
    assert _durable(world) == durable, "a clean restart lost or changed state"
    _serves(world, durable)

    make_instance(broker)
    durable = _durable(world)
    assert _hostile_batch(world) == []
    broker.kill9()
    broker.start()
    assert _durable(world) == durable, "a restart after SIGKILL lost or changed state"
    _serves(world, durable)
    make_instance(broker)  # as the module's other tests expect it


def _serves(world: World, durable: dict) -> None:
    """A produce and a fetch of it go through, at the offset the log end said."""
    end = durable["offsets"][1]["end_offset"]
    resp = world.http.post(f"/topics/{TOPIC}/partitions/1", json={"records": [{"value": "b2s="}]}, headers=BINARY_V2)
    assert resp.status_code == 200, resp.text
    assert resp.json()["offsets"][0]["offset"] == end
    fetched = world.http.get(f"/topics/{TOPIC}/partitions/1/records", params={"offset": end},
                             headers={"Accept": "application/vnd.kafka.binary.v2+json"})
    assert fetched.status_code == 200, fetched.text
    assert [base64.b64decode(r["value"]) for r in fetched.json()] == [b"ok"]


@pytest.mark.parametrize("path", ["/v3/clusters/{c}/topics", f"/v1/groups/{GROUP}/commit", "/v1/producers"])
def test_deep_json_to_a_fastapi_model_body_is_40002(world, path):
    """Routes whose body FastAPI parses into a model (outside the modules above): JSON
    deeper than ``json.loads`` goes is INVALID_REQUEST, not FastAPI's bare 400."""
    before = snapshot(world)
    resp = world.http.post(path.format(c=world.cluster_id), content=DEEP_ARRAYS, headers=JSON)
    assert_kafka_error(resp, 400, 40002)
    assert snapshot(world) == before


#: Bodies FastAPI parses into a model, valid but for a padding field past the bound.
_MODEL_PADDED = [
    ("/v3/clusters/{c}/topics", b'{"topic_name": "hostile-padded", "pad": "' + b"A" * REQUEST_MAX_BYTES + b'"}'),
    (f"/v1/groups/{GROUP}/commit",
     b'{"offsets": [{"topic": "hostile", "partition": 0, "offset": 0}], "pad": "' + b"A" * REQUEST_MAX_BYTES + b'"}'),
]


@pytest.mark.parametrize("path,body", _MODEL_PADDED, ids=[p for p, _ in _MODEL_PADDED])
def test_a_chunked_body_past_the_bound_is_413_at_a_fastapi_model_route(world, path, body):
    """Before: FastAPI read a chunked body whole, unbounded, and the padded request went
    through (the topic was created, the offset committed)."""
    before = snapshot(world)
    resp = world.http.post(path.format(c=world.cluster_id), content=_chunked(body), headers=JSON)
    assert_kafka_error(resp, 413, 41301)
    assert snapshot(world) == before


def test_v3_streaming_produce_is_bounded_per_record_not_in_total(world):
    """The one route that opts out of the total bound: a chunked v3 stream of records
    that add up past ``socket.request.max.bytes`` is produced whole."""
    topic = "hostile-stream"
    assert world.broker.rest.create_topic(topic, 1).status_code == 201
    record = b'{"value": {"type": "BINARY", "data": "' + base64.b64encode(b"s" * 3000) + b'"}}'
    count = REQUEST_MAX_BYTES // len(record) + 20
    resp = world.http.post(f"/v3/clusters/{world.cluster_id}/topics/{topic}/records",
                           content=_chunked(record * count), headers=JSON)
    assert resp.status_code == 200, resp.text[:300]
    reports = [line for line in resp.text.splitlines() if line.strip()]
    assert len(reports) == count and all('"error_code":200' in r for r in reports), reports[-1]
    end = world.http.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"]
    assert end == count
