"""Round trips through a real broker: what a producer sends over REST (Confluent v2
binary and json, Confluent v3 records) is what a fetch by offset gives back, byte for
byte, with partitions, offsets, headers and timestamps."""

from __future__ import annotations

import base64
import json
import os
import time
from datetime import datetime, timezone

import pytest

from laketail.partitioner import partition_for_key

from .support import decode_binary, parse_concatenated_json, wait_until

pytestmark = pytest.mark.integration


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def assert_v2_offsets(resp, n: int, partition: int | None = None) -> list[dict]:
    """A v2 produce response: 200 with one ``offsets[]`` entry per record, no errors."""
    assert resp.status_code == 200, resp.text
    offsets = resp.json()["offsets"]
    assert len(offsets) == n, offsets
    for entry in offsets:
        assert set(entry) >= {"partition", "offset", "error_code", "error"}, entry
        assert entry["error_code"] is None and entry["error"] is None, entry
        if partition is not None:
            assert entry["partition"] == partition, entry
    return offsets


EDGE_RECORDS = [
    {"key": b"k1", "value": b"v1"},
    {"key": None, "value": b"no key"},
    {"key": b"tombstone", "value": None},
    {"key": b"", "value": b""},
    {"key": None, "value": None},
    {"key": b"", "value": None},
    {"key": None, "value": b""},
    {"key": bytes(range(256)), "value": bytes(range(255, -1, -1))},
]


def test_v2_binary_round_trip_keeps_null_and_empty_apart(broker, topic):
    rest = broker.rest
    resp = rest.produce_binary(topic, EDGE_RECORDS)
    offsets = assert_v2_offsets(resp, len(EDGE_RECORDS), partition=0)
    assert [o["offset"] for o in offsets] == list(range(len(EDGE_RECORDS)))

    fetched = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, len(EDGE_RECORDS))]
    assert [(r["key"], r["value"]) for r in fetched] == [(r["key"], r["value"]) for r in EDGE_RECORDS]
    assert [r["offset"] for r in fetched] == list(range(len(EDGE_RECORDS)))
    assert {r["topic"] for r in fetched} == {topic}
    assert {r["partition"] for r in fetched} == {0}
    assert rest.offsets(topic, 0) == (0, len(EDGE_RECORDS))


def test_fetch_entries_have_redpanda_shape_plus_timestamp_and_headers(broker, topic):
    rest = broker.rest
    assert_v2_offsets(rest.produce_binary(topic, [{"key": b"k", "value": b"v"}]), 1)
    resp = rest.fetch(topic, 0, 0)
    assert resp.status_code == 200, resp.text
    (entry,) = resp.json()
    assert set(entry) >= {"topic", "key", "value", "partition", "offset", "timestamp", "headers"}
    assert isinstance(entry["timestamp"], int)


def test_v2_produce_to_a_partition_endpoint(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=3)
    resp = rest.produce_binary(topic, [{"value": b"a"}, {"value": b"b"}], partition=2)
    offsets = assert_v2_offsets(resp, 2, partition=2)
    assert [o["offset"] for o in offsets] == [0, 1]
    assert rest.end_offsets(topic) == {0: 0, 1: 0, 2: 2}
    assert [decode_binary(r)["value"] for r in rest.fetch_range(topic, 2, 0, 2)] == [b"a", b"b"]


def test_v2_explicit_partitions_per_record_and_request_order(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=3)
    records = [{"value": f"r{i}".encode(), "partition": i % 3} for i in range(9)]
    offsets = assert_v2_offsets(rest.produce_binary(topic, records), 9)
    assert [o["partition"] for o in offsets] == [i % 3 for i in range(9)]
    assert [o["offset"] for o in offsets] == [i // 3 for i in range(9)]
    for p in range(3):
        values = [decode_binary(r)["value"] for r in rest.fetch_range(topic, p, 0, 3)]
        assert values == [f"r{i}".encode() for i in range(p, 9, 3)]


def test_keyed_records_use_kafkas_default_partitioner(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=4)
    keys = [f"user-{i}".encode() for i in range(40)] + [b"21", b"foobar", b"abc", b""]
    offsets = assert_v2_offsets(rest.produce_binary(topic, [{"key": k, "value": b"x"} for k in keys]), len(keys))
    assert [o["partition"] for o in offsets] == [partition_for_key(k, 4) for k in keys]


JSON_VALUES = [
    {"a": 1, "b": [1, 2, "x"], "c": {"d": None}},
    "a string",
    "",
    42,
    3.5,
    True,
    [],
    {},
    "h\u00e9llo \u2713 \U0001f600",
]


def test_v2_json_round_trip(broker, topic):
    rest = broker.rest
    records = [{"key": {"id": i}, "value": v} for i, v in enumerate(JSON_VALUES)]
    records.append({"key": "string key", "value": {"nested": {"deep": [1, {"x": "y"}]}}})
    resp = rest.produce_json(topic, records)
    assert_v2_offsets(resp, len(records), partition=0)

    resp = rest.fetch(topic, 0, 0, fmt="json")
    assert resp.status_code == 200, resp.text
    fetched = resp.json()
    assert [(r["key"], r["value"]) for r in fetched] == [(r["key"], r["value"]) for r in records]

    # The same records read in the binary format are the JSON documents' bytes.
    binary = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, len(records))]
    assert [json.loads(r["value"]) for r in binary] == [r["value"] for r in records]
    assert [json.loads(r["key"]) for r in binary] == [r["key"] for r in records]


def test_v2_json_null_key_and_value(broker, topic):
    rest = broker.rest
    resp = rest.produce_json(topic, [{"value": {"x": 1}}, {"key": None, "value": None}])
    assert_v2_offsets(resp, 2)
    binary = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, 2)]
    assert binary[0]["key"] is None
    resp = rest.fetch(topic, 0, 0, fmt="json")
    assert [(r["key"], r["value"]) for r in resp.json()] == [(None, {"x": 1}), (None, None)]


def test_100_kb_values(broker, topic):
    rest = broker.rest
    records = [{"key": os.urandom(1024), "value": os.urandom(100 * 1024)} for _ in range(5)]
    assert_v2_offsets(rest.produce_binary(topic, records), 5)
    fetched = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, 5)]
    assert [(r["key"], r["value"]) for r in fetched] == [(r["key"], r["value"]) for r in records]


def test_100_kb_value_through_v3(broker, topic):
    rest = broker.rest
    value = os.urandom(100 * 1024)
    resp = rest.produce_v3(topic, {"value": {"type": "BINARY", "data": b64(value)}})
    assert resp.status_code == 200, resp.text
    offset = resp.json()["offset"]
    assert decode_binary(rest.fetch_range(topic, 0, offset, offset + 1)[0])["value"] == value


def test_v3_record_with_headers_timestamp_and_every_format(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=2)
    headers = [
        {"name": "trace", "value": b64(b"abc")},
        {"name": "trace", "value": b64(b"again")},  # Kafka keeps repeated names, in order
        {"name": "empty", "value": b64(b"")},
        {"name": "bin", "value": b64(bytes([0, 255, 7]))},
    ]
    body = {
        "partition_id": 1,
        "headers": headers,
        "key": {"type": "BINARY", "data": b64(b"\x00\x01key")},
        "value": {"type": "STRING", "data": "h\u00e9llo"},
        "timestamp": "2021-02-05T19:14:42.123Z",
    }
    resp = rest.produce_v3(topic, body)
    assert resp.status_code == 200, resp.text
    report = resp.json()
    assert report["error_code"] == 200, report
    assert report["cluster_id"] == rest.cluster_id
    assert report["topic_name"] == topic
    assert report["partition_id"] == 1
    assert report["offset"] == 0
    expected_ts = datetime(2021, 2, 5, 19, 14, 42, 123000, tzinfo=timezone.utc)
    assert datetime.fromisoformat(report["timestamp"].replace("Z", "+00:00")) == expected_ts

    json_value = {"type": "JSON", "data": {"x": [1, 2, {"y": None}]}}
    resp = rest.produce_v3(topic, {"partition_id": 1, "key": {"type": "JSON", "data": "k"}, "value": json_value})
    assert resp.status_code == 200, resp.text
    assert resp.json()["offset"] == 1

    (first, second) = [decode_binary(r) for r in rest.fetch_range(topic, 1, 0, 2)]
    assert first["key"] == b"\x00\x01key"
    assert first["value"] == "h\u00e9llo".encode()
    assert first["headers"] == [
        ("trace", b"abc"), ("trace", b"again"), ("empty", b""), ("bin", bytes([0, 255, 7]))
    ]
    assert first["timestamp"] == int(expected_ts.timestamp() * 1000)
    assert json.loads(second["key"]) == "k"
    assert json.loads(second["value"]) == {"x": [1, 2, {"y": None}]}
    assert second["headers"] == []
    assert rest.end_offsets(topic) == {0: 0, 1: 2}


def test_v3_header_with_null_value_stays_null(broker, topic):
    """Kafka headers may have null values, distinct from empty ones."""
    rest = broker.rest
    body = {"headers": [{"name": "null", "value": None}, {"name": "empty", "value": ""}],
            "value": {"type": "STRING", "data": "v"}}
    resp = rest.produce_v3(topic, body)
    assert resp.status_code == 200, resp.text
    (entry,) = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, 1)]
    assert entry["headers"] == [("null", None), ("empty", b"")]


def test_v3_without_timestamp_gets_the_brokers_time(broker, topic):
    rest = broker.rest
    before = time.time_ns() // 1_000_000
    resp = rest.produce_v3(topic, {"value": {"type": "STRING", "data": "now"}})
    after = time.time_ns() // 1_000_000
    assert resp.status_code == 200, resp.text
    (entry,) = rest.fetch_range(topic, 0, 0, 1)
    assert before <= entry["timestamp"] <= after


def test_v3_null_key_and_value(broker, topic):
    rest = broker.rest
    resp = rest.produce_v3(topic, {"key": {"type": "STRING", "data": "only a key"}})
    assert resp.status_code == 200, resp.text
    (entry,) = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, 1)]
    assert entry["key"] == b"only a key"
    assert entry["value"] is None


def test_v3_streaming_mode_one_report_per_record_in_order(broker, topic):
    rest = broker.rest
    records = [{"value": {"type": "STRING", "data": f"s{i}"}} for i in range(7)]
    resp = rest.produce_v3(topic, records)
    assert resp.status_code == 200, resp.text
    reports = parse_concatenated_json(resp.text)
    assert len(reports) == 7, reports
    assert [r["error_code"] for r in reports] == [200] * 7
    assert [r["offset"] for r in reports] == list(range(7))
    values = [decode_binary(r)["value"] for r in rest.fetch_range(topic, 0, 0, 7)]
    assert values == [f"s{i}".encode() for i in range(7)]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_acks_mode_appends(broker, topic, acks):
    rest = broker.rest
    resp = rest.produce_binary(topic, [{"value": b"acked"}], acks=acks)
    assert resp.status_code == 200, resp.text
    if acks != "0":
        assert resp.json()["offsets"][0]["offset"] == 0
    wait_until(lambda: rest.offsets(topic, 0)[1] == 1, f"the acks={acks} record to be appended")
    assert decode_binary(rest.fetch_range(topic, 0, 0, 1)[0])["value"] == b"acked"


@pytest.mark.parametrize("one_request", [True, False], ids=["one produce request", "one request each"])
def test_fetch_bounds_max_records_and_max_bytes(broker, topic, one_request):
    """The bounds hold whether the records arrived in one produce request (one batch
    on disk) or in many."""
    rest = broker.rest
    records = [{"value": bytes(1000)} for _ in range(10)]
    if one_request:
        assert_v2_offsets(rest.produce_binary(topic, records), 10)
    else:
        for record in records:
            assert_v2_offsets(rest.produce_binary(topic, [record]), 1)
    resp = rest.fetch(topic, 0, 0, max_records=3)
    assert resp.status_code == 200, resp.text
    assert [r["offset"] for r in resp.json()] == [0, 1, 2]
    resp = rest.fetch(topic, 0, 4, max_bytes=3500)
    assert resp.status_code == 200, resp.text
    got = [r["offset"] for r in resp.json()]
    assert 1 <= len(got) <= 4 and got == list(range(4, 4 + len(got))), got
    # Like Kafka, a record larger than max_bytes still comes back alone: progress.
    resp = rest.fetch(topic, 0, 7, max_bytes=1)
    assert resp.status_code == 200, resp.text
    assert [r["offset"] for r in resp.json()] == [7]


def test_fetch_at_log_end_without_timeout_is_empty(broker, topic):
    rest = broker.rest
    resp = rest.fetch(topic, 0, 0, timeout_ms=0)
    assert resp.status_code == 200, resp.text
    assert resp.json() == []
