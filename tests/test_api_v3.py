"""Gateway contracts of Confluent v3: clusters, topic admin, configs, and produce
(single record, concatenated records with per-record errors, streaming mode)."""

from __future__ import annotations

import json
import uuid

import pytest
from api_inprocess import assert_error, b64, cluster_id, create_topic, gateway, unb64


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with gateway(tmp_path_factory.mktemp("api-v3")) as c:
        yield c


@pytest.fixture(scope="module")
def cid(client):
    return cluster_id(client)


@pytest.fixture
def topic(client):
    name = f"v3-{uuid.uuid4().hex[:10]}"
    create_topic(client, name, 2)
    return name


def fetch(client, topic, partition, offset=0):
    resp = client.get(f"/topics/{topic}/partitions/{partition}/records", params={"offset": offset})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_cluster_resources(client, cid):
    listing = client.get("/v3/clusters").json()
    assert listing["kind"] == "KafkaClusterList"
    assert listing["metadata"]["self"].endswith("/v3/clusters")
    cluster = client.get(f"/v3/clusters/{cid}").json()
    assert cluster == listing["data"][0]
    assert cluster["kind"] == "KafkaCluster"
    assert cluster["metadata"]["self"].endswith(f"/v3/clusters/{cid}")
    assert cluster["topics"]["related"].endswith(f"/v3/clusters/{cid}/topics")


def test_cluster_id_is_stable_across_restarts(tmp_path):
    with gateway(tmp_path) as c:
        first = cluster_id(c)
    with gateway(tmp_path) as c:
        assert cluster_id(c) == first


@pytest.mark.parametrize("path", ["", "/topics", "/topics/x", "/topics/x/configs", "/topics/x/partitions"])
def test_unknown_cluster_is_404(client, path):
    assert_error(client.get(f"/v3/clusters/not-this-one{path}"), 404, 404, "INCONSISTENT_CLUSTER_ID")


def test_topic_lifecycle(client, cid):
    name = f"life-{uuid.uuid4().hex[:8]}"
    resp = client.post(f"/v3/clusters/{cid}/topics", json={
        "topic_name": name, "partitions_count": 3, "replication_factor": 1,
        "configs": [{"name": "cleanup.policy", "value": "compact"}, {"name": "retention.ms", "value": 1000}],
    })
    assert resp.status_code == 201, resp.text
    created = resp.json()
    assert created["kind"] == "KafkaTopic"
    assert (created["topic_name"], created["partitions_count"], created["replication_factor"]) == (name, 3, 1)
    assert created["is_internal"] is False
    assert created["metadata"]["self"].endswith(f"/v3/clusters/{cid}/topics/{name}")
    assert created["metadata"]["resource_name"] == f"crn:///kafka={cid}/topic={name}"
    assert client.get(f"/v3/clusters/{cid}/topics/{name}").json() == created
    listing = client.get(f"/v3/clusters/{cid}/topics").json()
    assert listing["kind"] == "KafkaTopicList"
    assert name in [t["topic_name"] for t in listing["data"]]

    assert_error(client.post(f"/v3/clusters/{cid}/topics", json={"topic_name": name}), 400, 40002,
                 "TOPIC_ALREADY_EXISTS")

    assert client.delete(f"/v3/clusters/{cid}/topics/{name}").status_code == 204
    assert_error(client.get(f"/v3/clusters/{cid}/topics/{name}"), 404, 404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert_error(client.delete(f"/v3/clusters/{cid}/topics/{name}"), 404, 404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_validate_only_creates_nothing(client, cid):
    name = f"dry-{uuid.uuid4().hex[:8]}"
    resp = client.post(f"/v3/clusters/{cid}/topics",
                       json={"topic_name": name, "partitions_count": 2, "validate_only": True})
    assert resp.status_code == 201, resp.text
    assert resp.json()["partitions_count"] == 2
    assert_error(client.get(f"/v3/clusters/{cid}/topics/{name}"), 404, 404, "UNKNOWN_TOPIC_OR_PARTITION")
    bad = client.post(f"/v3/clusters/{cid}/topics", json={
        "topic_name": name, "validate_only": True, "configs": [{"name": "retention.ms", "value": "soon"}],
    })
    assert_error(bad, 400, 40002, "INVALID_CONFIG")


def test_partitions(client, cid, topic):
    listing = client.get(f"/v3/clusters/{cid}/topics/{topic}/partitions").json()
    assert listing["kind"] == "KafkaPartitionList"
    assert [p["partition_id"] for p in listing["data"]] == [0, 1]
    one = client.get(f"/v3/clusters/{cid}/topics/{topic}/partitions/1").json()
    assert one == listing["data"][1]
    assert one["kind"] == "KafkaPartition" and one["topic_name"] == topic
    assert_error(client.get(f"/v3/clusters/{cid}/topics/{topic}/partitions/2"), 404, 404,
                 "UNKNOWN_TOPIC_OR_PARTITION")


def configs(client, cid, topic):
    listing = client.get(f"/v3/clusters/{cid}/topics/{topic}/configs").json()
    assert listing["kind"] == "KafkaTopicConfigList"
    return {c["name"]: c for c in listing["data"]}


def test_configs_get_set_reset(client, cid, topic):
    every = configs(client, cid, topic)
    assert every["retention.ms"]["value"] == "604800000"
    assert every["retention.ms"]["is_default"] is True
    assert every["retention.ms"]["source"] == "DEFAULT_CONFIG"

    base = f"/v3/clusters/{cid}/topics/{topic}/configs"
    assert client.put(f"{base}/retention.ms", json={"value": "1234"}).status_code == 204
    one = client.get(f"{base}/retention.ms").json()
    assert one["kind"] == "KafkaTopicConfig"
    assert (one["name"], one["value"], one["is_default"], one["source"]) == (
        "retention.ms", "1234", False, "DYNAMIC_TOPIC_CONFIG")
    assert one["metadata"]["self"].endswith(f"{base}/retention.ms")

    assert client.delete(f"{base}/retention.ms").status_code == 204
    assert client.get(f"{base}/retention.ms").json()["value"] == "604800000"

    assert_error(client.get(f"{base}/no.such.key"), 400, 40002, "INVALID_CONFIG")
    assert_error(client.put(f"{base}/no.such.key", json={"value": "1"}), 400, 40002, "INVALID_CONFIG")
    assert_error(client.put(f"{base}/retention.ms", json={"value": "later"}), 400, 40002, "INVALID_CONFIG")


def test_configs_alter_is_all_or_nothing(client, cid, topic):
    base = f"/v3/clusters/{cid}/topics/{topic}/configs"
    resp = client.post(f"{base}:alter", json={"data": [
        {"name": "cleanup.policy", "value": "compact"},
        {"name": "retention.ms", "value": "-1", "operation": "SET"},
    ]})
    assert resp.status_code == 204, resp.text
    now = configs(client, cid, topic)
    assert (now["cleanup.policy"]["value"], now["retention.ms"]["value"]) == ("compact", "-1")

    bad = client.post(f"{base}:alter", json={"data": [
        {"name": "retention.ms", "operation": "DELETE"},
        {"name": "segment.ms", "value": "never"},
    ]})
    assert_error(bad, 400, 40002, "INVALID_CONFIG")
    assert configs(client, cid, topic)["retention.ms"]["value"] == "-1"

    dry = client.post(f"{base}:alter", json={"validate_only": True, "data": [
        {"name": "retention.ms", "operation": "DELETE"},
    ]})
    assert dry.status_code == 204
    assert configs(client, cid, topic)["retention.ms"]["value"] == "-1"

    assert client.post(f"{base}:alter", json={"data": [
        {"name": "retention.ms", "operation": "DELETE"},
    ]}).status_code == 204
    assert configs(client, cid, topic)["retention.ms"]["value"] == "604800000"


def test_broken_admin_bodies_are_400(client, cid, topic):
    assert_error(client.post(f"/v3/clusters/{cid}/topics", content=b"{", headers={"Content-Type": "application/json"}),
                 400, 40002, "INVALID_REQUEST")
    assert_error(client.post(f"/v3/clusters/{cid}/topics", json={"partitions_count": 1}), 400, 40002,
                 "INVALID_REQUEST")
    assert_error(client.post(f"/v3/clusters/{cid}/topics/{topic}/configs:alter", json={"data": "x"}), 400, 40002,
                 "INVALID_REQUEST")


# -- produce ------------------------------------------------------------------------------


def test_single_record_report(client, cid, topic):
    resp = client.post(f"/v3/clusters/{cid}/topics/{topic}/records", json={
        "partition_id": 1,
        "key": {"type": "STRING", "data": "ké"},
        "value": {"data": b64(b"\x00\x01")},
        "timestamp": "2024-05-01T12:00:00.250Z",
    })
    assert resp.status_code == 200, resp.text
    assert resp.json() == {
        "error_code": 200, "cluster_id": cid, "topic_name": topic, "partition_id": 1, "offset": 0,
        "timestamp": "2024-05-01T12:00:00.250Z",
        "key": {"type": "STRING", "size": 3}, "value": {"type": "BINARY", "size": 2},
    }
    got = fetch(client, topic, 1)[0]
    assert (unb64(got["key"]), unb64(got["value"]), got["timestamp"]) == ("ké".encode(), b"\x00\x01", 1714564800250)


def test_single_record_errors_use_their_http_status(client, cid, topic):
    base = f"/v3/clusters/{cid}/topics/{topic}/records"
    # AVRO and no schema: the subject's latest, and <topic>-value has none (kafka-rest's 42207)
    assert_error(client.post(base, json={"value": {"type": "AVRO", "data": {}}}),
                 422, 42207, "Error serializing message.")
    assert_error(client.post(base, json={"value": {"type": "CBOR", "data": {}}}), 422, 42206, "INVALID_RECORD")
    assert_error(client.post(base, json={"value": {"type": "STRING", "data": 5}}), 422, 42206, "INVALID_RECORD")
    assert_error(client.post(base, json={"timestamp": "yesterday"}), 422, 42206, "INVALID_RECORD")
    assert_error(client.post(base, json=42), 400, 40002, "INVALID_REQUEST")
    assert_error(client.post(base, json=[]), 400, 40002, "INVALID_REQUEST")
    # an internal name is never auto-created (auto.create.topics.enable is on here)
    assert_error(client.post(f"/v3/clusters/{cid}/topics/__nope/records", json={}), 404, 404,
                 "UNKNOWN_TOPIC_OR_PARTITION")
    assert [fetch(client, topic, p) for p in (0, 1)] == [[], []]


def test_concatenated_records_report_per_record_and_keep_going(client, cid, topic):
    body = "\n".join(json.dumps(r) for r in [
        {"partition_id": 0, "value": {"type": "STRING", "data": "a"}},
        {"partition_id": 0, "value": {"type": "BINARY", "data": "@@@"}},
        {"partition_id": 5, "value": {"type": "STRING", "data": "c"}},
        {"partition_id": 0, "value": {"type": "JSON", "data": [1, 2]}},
    ])
    resp = client.post(f"/v3/clusters/{cid}/topics/{topic}/records", content=body,
                       headers={"Content-Type": "application/json"})
    assert resp.status_code == 200
    reports = [json.loads(line) for line in resp.text.splitlines()]
    assert [r["error_code"] for r in reports] == [200, 42206, 404, 200]
    assert [r.get("offset") for r in reports] == [0, None, None, 1]
    assert reports[1]["message"].startswith("INVALID_RECORD")
    assert [unb64(r["value"]) for r in fetch(client, topic, 0)] == [b"a", b"[1,2]"]


def test_a_json_array_is_several_records(client, cid, topic):
    resp = client.post(f"/v3/clusters/{cid}/topics/{topic}/partitions/1/records", json=[
        {"value": {"type": "STRING", "data": "x"}}, {"value": {"type": "STRING", "data": "y"}},
    ])
    assert resp.status_code == 200
    reports = [json.loads(line) for line in resp.text.splitlines()]
    assert [(r["partition_id"], r["offset"]) for r in reports] == [(1, 0), (1, 1)]


def test_broken_json_after_good_records_reports_then_stops(client, cid, topic):
    body = '{"value": {"type": "STRING", "data": "ok"}} {"value": '
    resp = client.post(f"/v3/clusters/{cid}/topics/{topic}/partitions/0/records", content=body,
                       headers={"Content-Type": "application/json"})
    assert resp.status_code == 200
    reports = [json.loads(line) for line in resp.text.splitlines()]
    assert [r["error_code"] for r in reports] == [200, 40002]
    assert len(fetch(client, topic, 0)) == 1


def test_streaming_mode_with_records_split_across_chunks(client, cid, topic):
    chunks = [
        b'{"value": {"type": "STRING", "data": "s0"}}',
        b'{"value": {"type": "STR',
        b'ING", "data": "s1"}}\n{"value": {"type": "BINARY", "data": "!!"}}  {"value": {"ty',
        b'pe": "JSON", "data": {"k": "\xc3',  # a UTF-8 character cut in two
        b'\xa9"}}}',
    ]

    async def body():
        for chunk in chunks:
            yield chunk

    resp = client.post(f"/v3/clusters/{cid}/topics/{topic}/partitions/1/records", content=body(),
                       headers={"Content-Type": "application/json"})
    assert resp.status_code == 200
    reports = [json.loads(line) for line in resp.text.splitlines()]
    assert [r["error_code"] for r in reports] == [200, 200, 42206, 200]
    assert [r.get("offset") for r in reports] == [0, 1, None, 2]
    values = [unb64(r["value"]) for r in fetch(client, topic, 1)]
    assert values == [b"s0", b"s1", '{"k":"é"}'.encode()]


def test_streaming_mode_reports_broken_json_at_the_end(client, cid, topic):
    async def body():
        yield b'{"value": {"type": "STRING", "data": "fine"}}'
        yield b'{"value": nope}'

    resp = client.post(f"/v3/clusters/{cid}/topics/{topic}/partitions/0/records", content=body(),
                       headers={"Content-Type": "application/json"})
    assert resp.status_code == 200
    reports = [json.loads(line) for line in resp.text.splitlines()]
    assert [r["error_code"] for r in reports] == [200, 40002]


def test_v3_acks_0(client, cid, topic):
    resp = client.post(f"/v3/clusters/{cid}/topics/{topic}/records", params={"acks": "0"},
                       json={"partition_id": 0, "value": {"type": "STRING", "data": "z"}})
    assert resp.status_code == 200
    report = resp.json()
    assert (report["error_code"], report["partition_id"], report["offset"]) == (200, 0, None)
    got = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0, "timeout": 5000}).json()
    assert unb64(got[0]["value"]) == b"z"
