"""Gateway contracts of Confluent v2 (metadata, produce content types, acks=0) and of
the Redpanda-style fetch (Accept negotiation), against an in-process gateway."""

from __future__ import annotations

import json
import uuid

import orjson
import pytest
from api_inprocess import BINARY_V2, JSON_V2, V2, assert_error, b64, create_topic, gateway, produce, unb64


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with gateway(tmp_path_factory.mktemp("api-v2")) as c:
        yield c


@pytest.fixture
def topic(client):
    name = f"v2-{uuid.uuid4().hex[:10]}"
    create_topic(client, name, 2)
    return name


def test_topic_metadata_shapes(client, topic):
    resp = client.get("/topics")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == V2
    assert topic in resp.json()

    body = client.get(f"/topics/{topic}").json()
    assert body["name"] == topic
    assert body["configs"]["cleanup.policy"] == "delete"
    assert body["partitions"] == [
        {"partition": p, "leader": 0, "replicas": [{"broker": 0, "leader": True, "in_sync": True}]}
        for p in (0, 1)
    ]
    assert client.get(f"/topics/{topic}/partitions").json() == body["partitions"]
    assert client.get(f"/topics/{topic}/partitions/1").json() == body["partitions"][1]
    assert client.get("/brokers").json() == {"brokers": [0]}


def test_partition_offsets_follow_produce(client, topic):
    assert client.get(f"/topics/{topic}/partitions/1/offsets").json() == {
        "beginning_offset": 0, "end_offset": 0,
    }
    produce(client, topic, [b"a", b"b", b"c"], partition=1)
    assert client.get(f"/topics/{topic}/partitions/1/offsets").json() == {
        "beginning_offset": 0, "end_offset": 3,
    }


@pytest.mark.parametrize("path", ["/topics/nope-x", "/topics/nope-x/partitions",
                                  "/topics/nope-x/partitions/0/offsets"])
def test_unknown_topic_metadata_is_40401(client, path):
    assert_error(client.get(path), 404, 40401, "UNKNOWN_TOPIC_OR_PARTITION")


def test_unknown_partition_metadata_is_40402(client, topic):
    assert_error(client.get(f"/topics/{topic}/partitions/2"), 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION")
    assert_error(client.get(f"/topics/{topic}/partitions/5/offsets"), 404, 40402,
                 "UNKNOWN_TOPIC_OR_PARTITION")


def test_produce_response_shape(client, topic):
    resp = client.post(f"/topics/{topic}", json={"records": [
        {"value": b64(b"x"), "partition": 1}, {"value": b64(b"y"), "partition": 0},
    ]}, headers={"Content-Type": BINARY_V2})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == V2
    assert resp.json() == {
        "key_schema_id": None,
        "value_schema_id": None,
        "offsets": [
            {"partition": 1, "offset": 0, "error_code": None, "error": None},
            {"partition": 0, "offset": 0, "error_code": None, "error": None},
        ],
    }


@pytest.mark.parametrize("content_type", ["application/json", V2, "application/vnd.kafka+json",
                                          "application/octet-stream"])
def test_generic_content_types_mean_binary(client, topic, content_type):
    """Confluent: whenever the embedded format is omitted, binary is assumed."""
    resp = client.post(f"/topics/{topic}/partitions/0", content=f'{{"records": [{{"value": "{b64(b"raw")}"}}]}}',
                       headers={"Content-Type": content_type})
    assert resp.status_code == 200, resp.text
    offset = resp.json()["offsets"][0]["offset"]
    got = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": offset}).json()
    assert unb64(got[0]["value"]) == b"raw"


@pytest.mark.parametrize("content_type", ["application/vnd.kafka.cbor.v2+json", "text/plain"])
def test_unsupported_content_type_is_415(client, topic, content_type):
    resp = client.post(f"/topics/{topic}", content='{"records": [{"value": "AA=="}]}',
                       headers={"Content-Type": content_type})
    assert_error(resp, 415, 41501, "INVALID_REQUEST")
    assert client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"] == 0


def test_acks_0_answers_null_offsets_and_still_appends(client, topic):
    resp = client.post(f"/topics/{topic}/partitions/1", params={"acks": "0"},
                       json={"records": [{"value": b64(b"fire")}, {"value": b64(b"forget")}]},
                       headers={"Content-Type": BINARY_V2})
    assert resp.status_code == 200
    assert [(o["partition"], o["offset"]) for o in resp.json()["offsets"]] == [(1, None), (1, None)]
    # The append may still be in flight: the fetch long-polls for it.
    got = client.get(f"/topics/{topic}/partitions/1/records", params={"offset": 0, "timeout": 5000}).json()
    if len(got) < 2:
        got += client.get(f"/topics/{topic}/partitions/1/records", params={"offset": 1, "timeout": 5000}).json()
    assert [unb64(r["value"]) for r in got] == [b"fire", b"forget"]


def test_acks_0_still_refuses_bad_records(client, topic):
    resp = client.post(f"/topics/{topic}", params={"acks": "0"},
                       json={"records": [{"value": b64(b"ok"), "partition": 9}]},
                       headers={"Content-Type": BINARY_V2})
    assert_error(resp, 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION")


def test_v2_record_headers_extension(client, topic):
    resp = client.post(f"/topics/{topic}/partitions/0", json={"records": [
        {"value": b64(b"v"), "headers": [{"key": "trace", "value": b64(b"abc")}, {"key": "empty", "value": None}]},
    ]}, headers={"Content-Type": BINARY_V2})
    assert resp.status_code == 200, resp.text
    got = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0}).json()
    assert got[0]["headers"] == [{"key": "trace", "value": b64(b"abc")}, {"key": "empty", "value": None}]


def test_fetch_accept_negotiation(client, topic):
    client.post(f"/topics/{topic}/partitions/0", json={"records": [{"key": "k", "value": {"n": 1}}]},
                headers={"Content-Type": JSON_V2})
    as_json = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0},
                         headers={"Accept": JSON_V2})
    assert as_json.headers["content-type"] == JSON_V2
    assert (as_json.json()[0]["key"], as_json.json()[0]["value"]) == ("k", {"n": 1})
    for accept in (None, "*/*", BINARY_V2, f"{V2}, {BINARY_V2}"):
        headers = {"Accept": accept} if accept else {}
        resp = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0}, headers=headers)
        assert resp.status_code == 200
        assert resp.headers["content-type"] == BINARY_V2
        assert unb64(resp.json()[0]["value"]) == b'{"n":1}'
    resp = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0},
                      headers={"Accept": "text/html"})
    assert_error(resp, 406, 40601, "INVALID_REQUEST")


def test_json_fetch_of_non_json_bytes_is_422_naming_the_record(client, topic):
    # 422 as the peer proxy's suite expects for a deserialization failure (Karapace
    # consumer_manager.fetch: unprocessable_entity "value deserialization error")
    produce(client, topic, [b"\xff not json"], partition=1)
    resp = client.get(f"/topics/{topic}/partitions/1/records", params={"offset": 0},
                      headers={"Accept": JSON_V2})
    assert_error(resp, 422, 42203, "RECORD_DESERIALIZATION_ERROR")
    assert f"the value of the record at offset 0 of {topic}-1 is not JSON" in resp.json()["message"]


def test_fetch_needs_an_offset(client, topic):
    assert_error(client.get(f"/topics/{topic}/partitions/0/records"), 400, 40002, "INVALID_REQUEST")
    assert_error(client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0, "timeout": -1}),
                 400, 40002, "INVALID_REQUEST")


def test_fetch_isolation_level_is_one_of_two(client, topic):
    """Read from the query as the fetch routes split it (with and without escapes)."""
    for query in ("offset=0&isolation_level=read_uncommited", "offset=0&isolation_level=read%5Fcommitted%20"):
        resp = client.get(f"/topics/{topic}/partitions/0/records?{query}", headers={"Accept": BINARY_V2})
        assert_error(resp, 400, 40002, "INVALID_REQUEST")
    for level in ("read_committed", "read_uncommitted"):
        resp = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0, "isolation_level": level},
                          headers={"Accept": BINARY_V2})
        assert resp.status_code == 200, resp.text


def test_fetch_timestamps_are_milliseconds(client, topic):
    resp = client.post(f"/v3/clusters/{client.get('/v3/clusters').json()['data'][0]['cluster_id']}"
                       f"/topics/{topic}/partitions/0/records",
                       json={"value": {"type": "STRING", "data": "t"}, "timestamp": 1_700_000_000_123})
    assert resp.status_code == 200, resp.text
    got = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0}).json()
    assert got[0]["timestamp"] == 1_700_000_000_123


def test_a_large_values_only_body_round_trips(client, topic):
    """300 values alone take the one-column decode through one joined pybase64 call:
    every value comes back as sent, empty ones and odd sizes included."""
    values = [bytes([i % 251]) * (i % 7 * 41) for i in range(300)]
    for body in (json.dumps({"records": [{"value": b64(v)} for v in values]}),  # ", " and ": "
                 orjson.dumps({"records": [{"value": b64(v)} for v in values]})):
        resp = client.post(f"/topics/{topic}/partitions/1", content=body, headers={"Content-Type": BINARY_V2})
        assert resp.status_code == 200, resp.text
        first = resp.json()["offsets"][0]["offset"]
        got = client.get(f"/topics/{topic}/partitions/1/records",
                         params={"offset": first, "max_bytes": 10_000_000}).json()
        assert [unb64(r["value"]) for r in got[:len(values)]] == values


def test_a_bad_value_in_a_large_values_only_body_is_named_and_nothing_is_written(client, topic):
    records = [{"value": b64(b"v" * 100)} for _ in range(200)]
    records[137] = {"value": "not base64!"}
    resp = client.post(f"/topics/{topic}/partitions/0", content=orjson.dumps({"records": records}),
                       headers={"Content-Type": BINARY_V2})
    body = assert_error(resp, 422, 42206, "INVALID_RECORD")
    assert "records[137].value" in body["message"]
    assert client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"] == 0
