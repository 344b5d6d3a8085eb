"""Numbers outside Kafka's types, JSON nested too deep, out-of-range timestamps, bad
topic names and malformed peer bodies: each gets its 4xx with Kafka's error name,
writes nothing, and leaves what it touched usable (issue 14, section 2).

Each case was a 5xx (or a silent write) before: partitions beyond int32 overflowed in
Arrow, orjson refused to write JSON it had read, timestamps wrapped when turned into
microseconds, a transaction or a sink kept a number it could not store and was stuck.

"Writes nothing" is checked where it shows: the log end offsets of the topic, the
catalog table and the ``topics/`` folder, the group's committed offsets.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from urllib.parse import quote

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from integration.support import ipc

from .support import assert_error, wait_until

pytestmark = pytest.mark.integration

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
ARROW = "application/vnd.apache.arrow.stream"
OK = {"value": "AA=="}


def refused(resp, status: int | None, kafka_name: str) -> dict:
    """An error body naming ``kafka_name`` with HTTP ``status`` (any 4xx when None: v3
    admin errors are changing their Confluent codes)."""
    assert resp.status_code < 500, f"a 5xx: {resp.status_code} {resp.text}"
    if status is None:
        assert 400 <= resp.status_code < 500, resp.text
    else:
        assert resp.status_code == status, resp.text
    body = resp.json()
    assert kafka_name in body.get("message", ""), body
    return body




def nested(depth: int) -> str:
    """A JSON array nested ``depth`` deep (built as text: json.dumps would recurse)."""
    return "[" * depth + "1" + "]" * depth


@pytest.fixture(scope="module")
def two(broker) -> str:
    """A two-partition topic with records in both partitions."""
    rest = broker.rest
    name = f"validate-{uuid.uuid4().hex[:10]}"
    resp = rest.create_topic(name, 2, configs={"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text
    for p in (0, 1):
        assert rest.produce_binary(name, [{"value": b"seed"}] * 2, partition=p).status_code == 200
    return name


@contextmanager
def offsets_unchanged(broker, topic: str):
    before = broker.rest.end_offsets(topic)
    yield
    assert broker.rest.http.get("/v3/clusters").status_code == 200, "the broker stopped answering"
    assert broker.rest.end_offsets(topic) == before, "a refused request moved a log end offset"


# -- produce -----------------------------------------------------------------------------------


def _v2(body, content_type=BINARY_V2, partition=None, params=None):
    def send(rest, topic):
        path = f"/topics/{topic}" if partition is None else f"/topics/{topic}/partitions/{partition}"
        content = body if isinstance(body, str) else json.dumps(body)
        return rest.http.post(path, content=content, params=params,
                              headers={"Content-Type": content_type})
    return send


def _v3(body):
    return lambda rest, topic: rest.produce_v3(topic, body)


def _arrow(table, partition=None):
    def send(rest, topic):
        path = (
            f"/v1/topics/{topic}/records" if partition is None
            else f"/v1/topics/{topic}/partitions/{partition}/records"
        )
        return rest.http.post(path, content=ipc(table), headers={"Content-Type": ARROW})
    return send


ONE_VALUE = pa.table({"value": pa.array([b"x"])})

PRODUCE_CASES = [
    ("v2 path partition 2^40", _v2({"records": [OK]}, partition=2**40), 400, "INVALID_REQUEST"),
    ("v2 path partition 10^20", _v2({"records": [OK]}, partition=10**20), 400, "INVALID_REQUEST"),
    ("v2 record partition 2^31", _v2({"records": [{**OK, "partition": 2**31}]}), 422, "INVALID_RECORD"),
    ("v2 record partition 2^40", _v2({"records": [{**OK, "partition": 2**40}]}), 422, "INVALID_RECORD"),
    ("arrow path partition 2^40", _arrow(ONE_VALUE, partition=2**40), 400, "INVALID_REQUEST"),
    ("v2 json nested 255 deep", _v2('{"records": [{"value": %s}]}' % nested(255), JSON_V2), 400, "INVALID_REQUEST"),
    ("v3 json nested 255 deep", _v3('{"value": {"type": "JSON", "data": %s}}' % nested(255)), 400,
     "INVALID_REQUEST"),
    ("v3 json nested 2000 deep", _v3('{"value": {"type": "JSON", "data": %s}}' % nested(2000)), 400,
     "INVALID_REQUEST"),
    ("v3 record partition 2^40", _v3({"partition_id": 2**40, "value": {"type": "STRING", "data": "x"}}), 422,
     "INVALID_RECORD"),
    ("v3 timestamp 2^62", _v3({"value": {"type": "STRING", "data": "x"}, "timestamp": 2**62}), 422,
     "INVALID_TIMESTAMP"),
    ("v3 timestamp 2^63", _v3({"value": {"type": "STRING", "data": "x"}, "timestamp": 2**63}), 422,
     "INVALID_TIMESTAMP"),
    ("v3 timestamp before 1970", _v3({"value": {"type": "STRING", "data": "x"}, "timestamp": -5}), 422,
     "INVALID_TIMESTAMP"),
    ("arrow timestamp 2^62", _arrow(pa.table({"value": pa.array([b"x"]), "timestamp": pa.array([2**62], pa.int64())})),
     422, "INVALID_TIMESTAMP"),
    ("arrow duplicated value column",
     _arrow(pa.Table.from_arrays([pa.array([b"x"]), pa.array([b"y"])], names=["value", "value"])),
     422, "INVALID_RECORD"),
]


@pytest.mark.parametrize("case", PRODUCE_CASES, ids=[c[0] for c in PRODUCE_CASES])
def test_out_of_range_produce_is_refused_and_writes_nothing(broker, two, case):
    _, send, status, name = case
    with offsets_unchanged(broker, two):
        refused(send(broker.rest, two), status, name)


def test_a_sequence_past_int32_is_checked_not_overflowed(broker, two):
    """A new producer's first batch at sequence 2^31 - 1 with two records was a 500 (the
    second record's sequence overflowed int32 before the sequence was checked); now it is
    checked like any other: a new producer must start at 0."""
    rest = broker.rest
    session = rest.http.post("/v1/producers", json={}).json()
    params = {"producer_id": session["producer_id"], "producer_epoch": session["producer_epoch"],
              "sequence": 2**31 - 1}
    with offsets_unchanged(broker, two):
        resp = _v2({"records": [OK, OK]}, partition=0, params=params)(rest, two)
        assert_error(resp, 409, 40910, "OUT_OF_ORDER_SEQUENCE_NUMBER")


# -- topics ------------------------------------------------------------------------------------


def _catalog_names(broker) -> set[str]:
    table = DeltaTable(str(broker.data_dir / "_system" / "topics")).to_pyarrow_table(columns=["name"])
    return set(table.column("name").to_pylist())


def _topic_dirs(broker) -> set[str]:
    root = broker.data_dir / "topics"
    return set(os.listdir(root)) if root.exists() else set()


@pytest.mark.parametrize(
    "name,partitions,kafka_name",
    [("nl\n", 1, "INVALID_TOPIC_EXCEPTION"), ("_delta_log", 1, "INVALID_TOPIC_EXCEPTION"),
     (None, 2**40, "INVALID_PARTITIONS"), (None, 2**31, "INVALID_PARTITIONS")],
    ids=["trailing newline", "_delta_log", "2^40 partitions", "2^31 partitions"],
)
def test_topic_create_is_refused_before_anything_is_written(broker, name, partitions, kafka_name):
    rest = broker.rest
    name = name or f"huge-{uuid.uuid4().hex[:8]}"
    catalog, dirs = _catalog_names(broker), _topic_dirs(broker)
    refused(rest.create_topic(name, partitions), None, kafka_name)
    assert _catalog_names(broker) == catalog, "the catalog entry was written"
    assert _topic_dirs(broker) == dirs, "a table folder was made"
    refused(rest.http.get(f"/v1/topics/{quote(name, safe='')}/table"), 404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_config_beyond_a_long_is_invalid_config(broker, two):
    rest = broker.rest
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    catalog = _catalog_names(broker)
    refused(rest.create_topic(name, 1, configs={"retention.ms": str(2**70)}), None, "INVALID_CONFIG")
    assert _catalog_names(broker) == catalog
    resp = rest.http.post(rest.v3(f"/topics/{two}/configs:alter"),
                          json={"data": [{"name": "retention.ms", "value": str(2**63)}]})
    refused(resp, None, "INVALID_CONFIG")
    configs = rest.http.get(rest.v3(f"/topics/{two}/configs/retention.ms")).json()
    assert configs["value"] != str(2**63)


def test_topic_create_rolls_back_when_its_table_cannot_be_made(broker):
    """All or nothing: when the table cannot be made after the catalog commit (here a
    file stands where the table's folder goes), the catalog entry is taken back, and the
    same create works once the obstacle is gone."""
    rest = broker.rest
    name = f"blocked-{uuid.uuid4().hex[:8]}"
    obstacle = broker.data_dir / "topics" / name
    obstacle.parent.mkdir(parents=True, exist_ok=True)
    obstacle.write_bytes(b"not a folder")
    resp = rest.create_topic(name, 1)
    assert resp.status_code == 500 and "KAFKA_STORAGE_ERROR" in resp.json()["message"], resp.text
    assert name not in _catalog_names(broker), "a half-created topic stayed in the catalog"
    refused(rest.http.get(rest.v3(f"/topics/{name}")), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    obstacle.unlink()
    resp = rest.create_topic(name, 1)
    assert resp.status_code in (200, 201), resp.text
    assert rest.produce_binary(name, [{"value": b"v"}], partition=0).status_code == 200
    assert rest.http.get(f"/v1/topics/{name}/table").status_code == 200


# -- committed offsets ---------------------------------------------------------------------------


def _committed(rest, group: str, topic: str) -> list:
    resp = rest.http.post(f"/v1/groups/{group}/committed",
                          json={"partitions": [{"topic": topic, "partition": 0}]})
    assert resp.status_code == 200, resp.text
    return resp.json()["offsets"]


@pytest.mark.parametrize("offset", [-2, -5, 2**63, 2**64])
def test_group_commit_out_of_range_is_refused(broker, two, offset):
    rest = broker.rest
    group = f"g-{uuid.uuid4().hex[:8]}"
    before = _committed(rest, group, two)
    resp = rest.http.post(f"/v1/groups/{group}/commit",
                          json={"offsets": [{"topic": two, "partition": 0, "offset": offset}]})
    refused(resp, 400, "INVALID_REQUEST")
    assert _committed(rest, group, two) == before


def test_committed_lookup_of_partition_beyond_int32_is_refused(broker, two):
    resp = broker.rest.http.post("/v1/groups/g/committed",
                                 json={"partitions": [{"topic": two, "partition": 2**64}]})
    refused(resp, 400, "INVALID_REQUEST")


def test_v2_consumer_commit_below_minus_one_is_refused(broker, two):
    """v2 stores a committed N as N + 1: N = -5 would have stored -4."""
    rest = broker.rest
    group = f"v2g-{uuid.uuid4().hex[:8]}"
    created = rest.http.post(f"/consumers/{group}", json={"name": "c1", "format": "binary"},
                             headers={"Content-Type": "application/vnd.kafka.v2+json"})
    assert created.status_code == 200, created.text
    base = f"/consumers/{group}/instances/c1"
    try:
        resp = rest.http.post(base + "/offsets", json={"offsets": [{"topic": two, "partition": 0, "offset": -5}]},
                              headers={"Content-Type": "application/vnd.kafka.v2+json"})
        refused(resp, 400, "INVALID_REQUEST")
        assert _committed(rest, group, two) == [{"topic": two, "partition": 0, "offset": -1, "metadata": ""}]
    finally:
        rest.http.delete(base)


# -- transactions and sinks ----------------------------------------------------------------------


def _read_committed(rest, topic: str, partition: int) -> list[dict]:
    resp = rest.http.get(f"/topics/{topic}/partitions/{partition}/records",
                         params={"offset": 0, "isolation_level": "read_committed"},
                         headers={"Accept": BINARY_V2})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_refused_transaction_offsets_leave_the_transaction_usable(broker, make_topic):
    rest = broker.rest
    topic = make_topic(1)
    txn_id = f"txn-{uuid.uuid4().hex[:8]}"
    session = rest.http.post("/v1/producers", json={"transactional_id": txn_id}).json()
    ids = {"producer_id": session["producer_id"], "producer_epoch": session["producer_epoch"]}
    resp = rest.http.post(f"/topics/{topic}/partitions/0", json={"records": [OK]},
                          params={**ids, "sequence": 0, "transactional": "true"},
                          headers={"Content-Type": BINARY_V2})
    assert resp.status_code == 200, resp.text
    for offset in (2**70, 2**63):
        resp = rest.http.post(f"/v1/transactions/{txn_id}/offsets", json={
            **ids, "group_id": "g", "offsets": [{"topic": topic, "partition": 0, "offset": offset}]})
        refused(resp, 400, "INVALID_REQUEST")
    resp = rest.http.post(f"/v1/transactions/{txn_id}/commit", json=ids)
    assert resp.status_code == 200, resp.text
    assert resp.json()["state"] == "CompleteCommit"
    assert [r["offset"] for r in _read_committed(rest, topic, 0)] == [0]


def _sink_write(rest, sink: str, batch: int, topic: str) -> str:
    enlisted = rest.http.post(f"/v1/sinks/{sink}/batches/{batch}/enlist", json={})
    assert enlisted.status_code == 200, enlisted.text
    s = enlisted.json()
    resp = rest.http.post(f"/topics/{topic}/partitions/0", json={"records": [OK]}, params={
        "producer_id": s["producer_id"], "producer_epoch": s["producer_epoch"], "sequence": 0,
        "transactional": "true"}, headers={"Content-Type": BINARY_V2})
    assert resp.status_code == 200, resp.text
    return s["transactional_id"]


def test_sink_commit_of_a_batch_nobody_enlisted_is_refused(broker, make_topic):
    """It answered committed=true and moved the sink past every later batch id: the next
    real batch (a lower id) was then aborted as a replay."""
    rest = broker.rest
    topic = make_topic(1)
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    resp = rest.http.post(f"/v1/sinks/{sink}/batches/100/commit", json={"transactional_ids": []})
    assert_error(resp, 409, 40912, "INVALID_TXN_STATE")
    # a batch id beyond int64 is a path segment no route takes: 404, as Jersey answers a
    # @PathParam it cannot convert (api/errors.py)
    refused(rest.http.post(f"/v1/sinks/{sink}/batches/{2**70}/enlist", json={}), 404, "Not Found")
    refused(rest.http.post(f"/v1/sinks/{sink}/batches/{2**70}/commit", json={"transactional_ids": []}),
            404, "Not Found")
    assert rest.http.get(f"/v1/sinks/{sink}").json()["committed_batch"] == -1
    txn = _sink_write(rest, sink, 3, topic)
    resp = rest.http.post(f"/v1/sinks/{sink}/batches/3/commit", json={"transactional_ids": [txn]})
    assert resp.status_code == 200 and resp.json() == {"committed": True}, resp.text
    wait_until(lambda: len(_read_committed(rest, topic, 0)) == 1, "batch 3 readable read_committed")


# -- /internal ---------------------------------------------------------------------------------


INTERNAL_POSTS = ["heartbeat", "alter-partition", "topics", "metadata", "replica-fetch"]


@pytest.mark.parametrize("body", ["{broken", "[]", "{}", '{"broker_id": "x", "partitions": 7}'],
                         ids=["broken json", "a list", "empty object", "wrong types"])
@pytest.mark.parametrize("path", INTERNAL_POSTS)
def test_internal_bodies_are_checked(broker, two, path, body):
    rest = broker.rest
    catalog = _catalog_names(broker)
    with offsets_unchanged(broker, two):
        resp = rest.http.post(f"/internal/v1/{path}", content=body, headers={"Content-Type": "application/json"})
        refused(resp, 400, "INVALID_REQUEST")
    assert _catalog_names(broker) == catalog


@pytest.mark.parametrize("body", [b"garbage", ipc(pa.table({"value": pa.array([b"x"])}))],
                         ids=["not arrow", "not a frame"])
def test_internal_append_of_a_malformed_frame_is_refused(broker, two, body):
    with offsets_unchanged(broker, two):
        resp = broker.rest.http.post(f"/internal/v1/partitions/{two}/0/append", content=body,
                                     headers={"Content-Type": ARROW})
        refused(resp, 400, "INVALID_REQUEST")


@pytest.mark.parametrize(("path", "status", "name"), [
    # a path segment beyond its type matches no route (404, as Jersey); a query number is refused
    ("partitions/{t}/%d/state" % 2**70, 404, "Not Found"),
    ("partitions/{t}/0/offset-for-timestamp?timestamp=%d" % 2**70, 400, "INVALID_REQUEST"),
])
def test_internal_numbers_beyond_their_type_are_refused(broker, two, path, status, name):
    refused(broker.rest.http.get("/internal/v1/" + path.format(t=two)), status, name)


@pytest.mark.parametrize("key", ["no-slash", "t/x", "t/-1", "t/%d" % 2**31, "/0", "t/\U00012b6b"])
def test_internal_heartbeat_log_end_offset_keys_are_checked(broker, key):
    """Found by the fuzzer: a key the controller cannot split into topic and partition
    was a 500 (ValueError from int())."""
    body = {"broker_id": 99, "url": "http://127.0.0.1:1", "incarnation": "x", "leos": {key: 0},
            "known_version": -1}
    refused(broker.rest.http.post("/internal/v1/heartbeat", json=body), 400, "INVALID_REQUEST")
