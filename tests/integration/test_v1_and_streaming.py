"""laketail's own ``/v1`` (Arrow IPC produce and fetch, offsets by timestamp) and the
v3 produce modes that carry many records in one request (concatenated JSON, a JSON
array, a chunked stream split at awkward places)."""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from integration.support import ipc as _ipc
from laketail.records import HEADER_TYPE, RECORD_SCHEMA

from .support import decode_binary, parse_concatenated_json, wait_for_table, wait_until

pytestmark = pytest.mark.integration

ARROW = "application/vnd.apache.arrow.stream"
T0 = 1_700_000_000_000


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")




def test_arrow_ipc_produce_and_fetch_round_trip(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=2)
    n = 20
    table = pa.table({
        "key": pa.array([f"k{i}".encode() if i % 3 else None for i in range(n)], pa.binary()),
        "value": pa.array([f"v{i}".encode() * i if i % 5 else None for i in range(n)], pa.binary()),
        "headers": pa.array([[{"key": "i", "value": bytes([i])}] if i % 2 else [] for i in range(n)], HEADER_TYPE),
        "timestamp": pa.array([T0 + i for i in range(n)], pa.int64()),
        "partition": pa.array([i % 2 for i in range(n)], pa.int32()),
    })
    resp = rest.http.post(f"/v1/topics/{topic}/records", content=_ipc(table), headers={"Content-Type": ARROW})
    assert resp.status_code == 200, resp.text
    summary = {o["partition"]: o for o in resp.json()["offsets"]}
    assert {p: (o["base_offset"], o["last_offset"], o["count"]) for p, o in summary.items()} == {
        0: (0, 9, 10), 1: (0, 9, 10)}

    for p in range(2):
        resp = rest.http.get(f"/v1/topics/{topic}/partitions/{p}/records", params={"offset": 0},
                             headers={"Accept": ARROW})
        assert resp.status_code == 200, resp.text
        assert resp.headers["X-Laketail-Next-Offset"] == "10"
        assert resp.headers["X-Laketail-High-Watermark"] == "10"
        got = pa.ipc.open_stream(resp.content).read_all()
        assert got.schema.equals(RECORD_SCHEMA)
        sent = table.filter(pc.equal(table.column("partition"), p))
        assert got.column("offset").to_pylist() == list(range(10))
        assert got.column("key").to_pylist() == sent.column("key").to_pylist()
        assert got.column("value").to_pylist() == sent.column("value").to_pylist()
        assert [h or [] for h in got.column("headers").to_pylist()] == sent.column("headers").to_pylist()
        assert [t.timestamp() * 1000 for t in got.column("timestamp").to_pylist()] == sent.column(
            "timestamp").to_pylist()


def test_offsets_by_timestamp_from_hot_tier_and_from_table(broker, make_topic):
    """Kafka's ListOffsets by time answers the same before and after the records have
    left the hot tier for the table."""
    rest = broker.rest
    topic = make_topic(configs={"segment.bytes": "14", "local.retention.ms": "0"})
    for i in range(10):
        resp = rest.produce_v3(topic, {"value": {"type": "STRING", "data": f"{i}"}, "timestamp": T0 + 1000 * i})
        assert resp.status_code == 200, resp.text

    def lookup(spec) -> tuple[int, int]:
        resp = rest.http.get(f"/v1/topics/{topic}/partitions/0/offsets", params={"timestamp": spec})
        assert resp.status_code == 200, resp.text
        return resp.json()["offset"], resp.json()["timestamp"]

    expected = {
        str(T0): (0, T0),
        str(T0 + 3500): (4, T0 + 4000),
        str(T0 + 9000): (9, T0 + 9000),
        str(T0 + 9001): (-1, -1),
        "earliest": (0, -1),
        "latest": (10, -1),
    }
    assert {spec: lookup(spec) for spec in expected} == expected

    wait_for_table(broker.table_path(topic), {0: 10})
    hot_dir = broker.data_dir / "logs" / "broker-0" / f"{topic}-0"
    wait_until(lambda: len(list(hot_dir.iterdir())) < 5, f"tiered hot segments in {hot_dir} to be deleted", 90)
    assert {spec: lookup(spec) for spec in expected} == expected


def test_v3_concatenated_records_with_a_bad_one_report_each_in_order(broker, topic):
    rest = broker.rest
    records = [
        {"value": {"type": "STRING", "data": "first"}},
        {"value": {"type": "BINARY", "data": "@@@@"}},
        {"value": {"type": "STRING", "data": "third"}},
    ]
    resp = rest.produce_v3(topic, records)
    assert resp.status_code == 200, resp.text
    reports = parse_concatenated_json(resp.text)
    assert len(reports) == 3, reports
    assert reports[0]["error_code"] == 200 and reports[2]["error_code"] == 200
    assert reports[1]["error_code"] == 42206 and "INVALID_RECORD" in reports[1]["message"], reports[1]
    assert [reports[0]["offset"], reports[2]["offset"]] == [0, 1]
    assert [decode_binary(r)["value"] for r in rest.fetch_range(topic, 0, 0, 2)] == [b"first", b"third"]


def test_v3_json_array_body(broker, topic):
    rest = broker.rest
    body = json.dumps([{"value": {"type": "STRING", "data": f"a{i}"}} for i in range(4)])
    resp = rest.produce_v3(topic, body)
    assert resp.status_code == 200, resp.text
    reports = parse_concatenated_json(resp.text)
    assert [r["offset"] for r in reports] == [0, 1, 2, 3]


def test_v3_chunked_stream_split_inside_records(broker, topic):
    """Chunk boundaries fall inside JSON strings and inside multi-byte UTF-8."""
    rest = broker.rest
    values = [f"r{i} \u00e9\u2713\U0001f600 " + "x" * (i * 37) for i in range(25)]
    text = "\n".join(
        json.dumps({"key": {"type": "STRING", "data": f"k{i}"}, "value": {"type": "STRING", "data": v}},
                   ensure_ascii=False)
        for i, v in enumerate(values)
    ).encode("utf-8")

    def chunks():
        for i in range(0, len(text), 7):
            yield text[i:i + 7]

    resp = rest.http.post(rest.v3(f"/topics/{topic}/records"), content=chunks(),
                          headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text
    reports = parse_concatenated_json(resp.text)
    assert [r["error_code"] for r in reports] == [200] * len(values)
    assert [r["offset"] for r in reports] == list(range(len(values)))
    fetched = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, len(values))]
    assert [r["value"].decode("utf-8") for r in fetched] == values
    assert [r["key"] for r in fetched] == [f"k{i}".encode() for i in range(len(values))]
