"""Gateway contracts of laketail's /v1: Arrow IPC produce and fetch, offsets by time."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from api_inprocess import ARROW, assert_error, b64, create_topic, gateway
from integration.support import ipc

from laketail.records import RECORD_SCHEMA


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with gateway(tmp_path_factory.mktemp("api-v1")) as c:
        yield c


@pytest.fixture
def topic(client):
    name = f"v1-{uuid.uuid4().hex[:10]}"
    create_topic(client, name, 2)
    return name




def post_arrow(client, path: str, table: pa.Table, **params: str):
    return client.post(path, content=ipc(table), headers={"Content-Type": ARROW}, params=params)


def fetch_arrow(client, topic: str, partition: int, **params):
    resp = client.get(f"/v1/topics/{topic}/partitions/{partition}/records", params=params,
                      headers={"Accept": ARROW})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == ARROW
    return resp, pa.ipc.open_stream(resp.content).read_all()


def test_arrow_produce_summarises_per_partition(client, topic):
    table = pa.table({
        "value": pa.array([b"a", b"b", b"c", None]),
        "partition": pa.array([1, 0, 1, 1], pa.int32()),
    })
    resp = post_arrow(client, f"/v1/topics/{topic}/records", table)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"offsets": [
        {"partition": 0, "base_offset": 0, "last_offset": 0, "count": 1},
        {"partition": 1, "base_offset": 0, "last_offset": 2, "count": 3},
    ]}


def test_arrow_produce_to_one_partition_summarises_its_span(client, topic):
    table = pa.table({"value": pa.array([b"a", b"b", b"c"])})
    answers = [post_arrow(client, f"/v1/topics/{topic}/partitions/1/records", table) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200], answers[-1].text
    assert [a.json() for a in answers] == [
        {"offsets": [{"partition": 1, "base_offset": 0, "last_offset": 2, "count": 3}]},
        {"offsets": [{"partition": 1, "base_offset": 3, "last_offset": 5, "count": 3}]},
    ]
    # keyless records without a partition column go to one partition (sticky): one span
    sticky = post_arrow(client, f"/v1/topics/{topic}/records", table)
    assert sticky.status_code == 200, sticky.text
    [span] = sticky.json()["offsets"]
    assert span["count"] == 3 and span["last_offset"] == span["base_offset"] + 2


def test_arrow_round_trip_with_every_column(client, topic):
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    table = pa.table({
        "key": pa.array(["k0", None], pa.string()),  # cast to binary
        "value": pa.array([b"v0", b""], pa.large_binary()),  # cast to binary
        "headers": pa.array([[{"key": "h", "value": b"1"}], None], headers_type),
        "timestamp": pa.array([1_700_000_000_000, 1_700_000_000_500], pa.int64()),
    })
    resp = post_arrow(client, f"/v1/topics/{topic}/partitions/1/records", table)
    assert resp.status_code == 200, resp.text
    assert resp.json()["offsets"] == [{"partition": 1, "base_offset": 0, "last_offset": 1, "count": 2}]

    resp, got = fetch_arrow(client, topic, 1, offset=0)
    assert got.schema == RECORD_SCHEMA
    assert got.column("offset").to_pylist() == [0, 1]
    assert got.column("partition").to_pylist() == [1, 1]
    assert got.column("key").to_pylist() == [b"k0", None]
    assert got.column("value").to_pylist() == [b"v0", b""]
    assert got.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}], None]
    assert got.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_000_000, 1_700_000_000_500_000]
    assert resp.headers["x-laketail-next-offset"] == "2"
    assert resp.headers["x-laketail-high-watermark"] == "2"
    assert resp.headers["x-laketail-log-start-offset"] == "0"

    _, bounded = fetch_arrow(client, topic, 1, offset=1, max_records=5)
    assert bounded.column("offset").to_pylist() == [1]


def test_arrow_fetch_at_the_end_is_an_empty_stream(client, topic):
    resp, got = fetch_arrow(client, topic, 0, offset=0)
    assert got.num_rows == 0 and got.schema == RECORD_SCHEMA
    assert resp.headers["x-laketail-next-offset"] == "0"


def test_arrow_fetch_out_of_range(client, topic):
    resp = client.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": 3})
    assert_error(resp, 416, 41601, "OFFSET_OUT_OF_RANGE")


@pytest.mark.parametrize("table, code", [
    (pa.table({"key": pa.array([b"k"])}), 42206),  # no value column
    (pa.table({"value": pa.array([b"v"]), "colour": pa.array(["red"])}), 42206),  # unknown column
    (pa.table({"value": pa.array([[1, 2]])}), 42206),  # a list is not binary
    (pa.table({"value": pa.array([], pa.binary())}), 40002),  # no records
])
def test_bad_arrow_bodies(client, topic, table, code):
    resp = post_arrow(client, f"/v1/topics/{topic}/records", table)
    assert resp.status_code == code // 100, resp.text
    assert resp.json()["error_code"] == code
    assert client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"] == 0


def test_a_body_that_is_not_arrow_is_400(client, topic):
    resp = client.post(f"/v1/topics/{topic}/records", content=b"hello", headers={"Content-Type": ARROW})
    assert_error(resp, 400, 40002, "INVALID_REQUEST")


def test_arrow_partition_column_must_agree_with_the_path(client, topic):
    table = pa.table({"value": pa.array([b"v"]), "partition": pa.array([0], pa.int32())})
    resp = post_arrow(client, f"/v1/topics/{topic}/partitions/1/records", table)
    assert_error(resp, 422, 42206, "INVALID_RECORD")


def test_arrow_acks_0_checks_then_appends(client, topic):
    too_big = pa.table({"value": pa.array([b"x" * 1_100_000])})
    assert_error(post_arrow(client, f"/v1/topics/{topic}/records", too_big, acks="0"), 413, 41301,
                 "MESSAGE_TOO_LARGE")
    bad_partition = pa.table({"value": pa.array([b"x"]), "partition": pa.array([7], pa.int32())})
    assert_error(post_arrow(client, f"/v1/topics/{topic}/records", bad_partition, acks="0"), 404, 40402,
                 "UNKNOWN_TOPIC_OR_PARTITION")
    resp = post_arrow(client, f"/v1/topics/{topic}/partitions/0/records", pa.table({"value": [b"q"]}), acks="0")
    assert resp.status_code == 200
    assert resp.json() == {"offsets": None}
    _, got = fetch_arrow(client, topic, 0, offset=0, timeout=5000)
    assert got.column("value").to_pylist() == [b"q"]


def test_offsets_by_timestamp(client, topic):
    path = f"/v1/topics/{topic}/partitions/0/offsets"
    assert client.get(path, params={"timestamp": "latest"}).json() == {"offset": 0, "timestamp": -1}
    assert client.get(path, params={"timestamp": "1000"}).json() == {"offset": -1, "timestamp": -1}
    table = pa.table({"value": pa.array([b"a", b"b", b"c"]),
                      "timestamp": pa.array([1_000, 2_000, 3_000], pa.int64())})
    assert post_arrow(client, f"/v1/topics/{topic}/partitions/0/records", table).status_code == 200
    assert client.get(path, params={"timestamp": "earliest"}).json() == {"offset": 0, "timestamp": -1}
    assert client.get(path, params={"timestamp": "-2"}).json() == {"offset": 0, "timestamp": -1}
    assert client.get(path, params={"timestamp": "latest"}).json() == {"offset": 3, "timestamp": -1}
    assert client.get(path).json() == {"offset": 3, "timestamp": -1}
    assert client.get(path, params={"timestamp": "1500"}).json() == {"offset": 1, "timestamp": 2_000}
    assert client.get(path, params={"timestamp": "3000"}).json() == {"offset": 2, "timestamp": 3_000}
    assert client.get(path, params={"timestamp": "3001"}).json() == {"offset": -1, "timestamp": -1}
    assert_error(client.get(path, params={"timestamp": "noon"}), 400, 40002, "INVALID_REQUEST")
    assert_error(client.get(f"/v1/topics/{topic}/partitions/9/offsets"), 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION")


def test_v1_produce_agrees_with_v2_fetch(client, topic):
    post_arrow(client, f"/v1/topics/{topic}/partitions/1/records", pa.table({"value": [b"same"]}))
    got = client.get(f"/topics/{topic}/partitions/1/records", params={"offset": 0}).json()
    assert got[0]["value"] == b64(b"same")
