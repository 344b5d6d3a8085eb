"""The topic's Delta table, read with ``deltalake``, holds exactly what was produced:
same partitions, offsets, keys, values, headers and timestamps, in the record schema
of docs/architecture.md §4.2, with offset and timestamp statistics on every file."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from laketail.records import RECORD_SCHEMA

from .support import decode_binary, read_table, rows_by_offset, wait_for_table, wait_until

pytestmark = pytest.mark.integration

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def ms_to_datetime(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def _schema_triples(schema: pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
    return [(f.name, f.type, f.nullable) for f in schema]


def test_table_exists_with_the_record_schema_from_creation(broker, make_topic):
    topic = make_topic(partitions=2)
    dt = DeltaTable(str(broker.table_path(topic)))
    assert _schema_triples(pa.schema(dt.schema().to_arrow())) == _schema_triples(RECORD_SCHEMA)
    assert dt.metadata().partition_columns == ["partition"]
    assert dt.to_pyarrow_table().num_rows == 0


def test_table_equals_what_was_produced(broker, make_topic):
    """Records sent through v3 (headers, explicit timestamps), v2 binary (keys, nulls,
    empties) and v2 json end up in the table exactly, once each."""
    rest = broker.rest
    topic = make_topic(partitions=3)
    expected: dict[tuple[int, int], dict] = {}

    base = datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)
    for i in range(12):
        ts = base + timedelta(milliseconds=37 * i)
        headers = [("n", f"{i}".encode()), ("bin", bytes([i, 0, 255]))][: i % 3]
        body = {
            "partition_id": i % 3,
            "key": {"type": "STRING", "data": f"v3-key-{i}"},
            "value": {"type": "BINARY", "data": b64(f"v3-value-{i}".encode() * (i + 1))},
            "headers": [{"name": k, "value": b64(v)} for k, v in headers],
            "timestamp": ts.isoformat().replace("+00:00", "Z"),
        }
        resp = rest.produce_v3(topic, body)
        assert resp.status_code == 200, resp.text
        report = resp.json()
        expected[(report["partition_id"], report["offset"])] = {
            "key": f"v3-key-{i}".encode(),
            "value": f"v3-value-{i}".encode() * (i + 1),
            "headers": headers,
            "timestamp": ts,
        }

    binary = [{"key": f"k{i}".encode() if i % 4 else None, "value": f"b{i}".encode()} for i in range(20)]
    binary += [{"key": b"", "value": b""}, {"key": b"tomb", "value": None}]
    resp = rest.produce_binary(topic, binary)
    assert resp.status_code == 200, resp.text
    for record, entry in zip(binary, resp.json()["offsets"]):
        expected[(entry["partition"], entry["offset"])] = {
            "key": record["key"], "value": record["value"], "headers": [], "timestamp": None,
        }

    json_records = [{"key": {"id": i}, "value": {"n": i, "s": "x" * i}} for i in range(5)]
    resp = rest.produce_json(topic, json_records, partition=1)
    assert resp.status_code == 200, resp.text
    json_offsets = resp.json()["offsets"]
    for record, entry in zip(json_records, json_offsets):
        expected[(1, entry["offset"])] = {"json": record, "headers": [], "timestamp": None}

    end = rest.end_offsets(topic)
    assert sum(end.values()) == len(expected)
    table = wait_for_table(broker.table_path(topic), end)
    rows = rows_by_offset(table)
    assert set(rows) == set(expected)

    # Timestamps the broker chose are the ones fetch reports (milliseconds).
    fetched_ts = {}
    for p, e in end.items():
        for r in rest.fetch_range(topic, p, 0, e):
            fetched_ts[(p, r["offset"])] = ms_to_datetime(r["timestamp"])

    for pos, want in expected.items():
        row = rows[pos]
        if "json" in want:
            assert json.loads(row["key"]) == want["json"]["key"]
            assert json.loads(row["value"]) == want["json"]["value"]
        else:
            assert (row["key"], row["value"]) == (want["key"], want["value"]), pos
        assert [(h["key"], h["value"]) for h in row["headers"] or []] == want["headers"], pos
        assert row["timestamp"] == (want["timestamp"] or fetched_ts[pos]), pos
        assert row["timestamp"] == fetched_ts[pos], pos
        assert row["timestamp_type"] == 0
        assert (row["producer_id"], row["producer_epoch"], row["sequence"]) == (-1, -1, -1)
        assert row["transactional"] is False
        assert row["control"] is None
        assert row["leader_epoch"] >= 0

    dt = DeltaTable(str(broker.table_path(topic)))
    assert _schema_triples(table.schema) == _schema_triples(RECORD_SCHEMA)
    assert _schema_triples(pa.schema(dt.schema().to_arrow())) == _schema_triples(RECORD_SCHEMA)


def test_table_files_carry_offset_and_timestamp_statistics(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=2)
    for i in range(4):
        resp = rest.produce_binary(topic, [{"value": f"{i}-{j}".encode(), "partition": j % 2} for j in range(6)])
        assert resp.status_code == 200, resp.text
    table = wait_for_table(broker.table_path(topic), rest.end_offsets(topic))
    rows_by_offset(table)
    actions = pa.table(DeltaTable(str(broker.table_path(topic))).get_add_actions(flatten=True)).to_pylist()
    assert actions
    for action in actions:
        for column in ("min.offset", "max.offset", "min.timestamp", "max.timestamp"):
            assert action.get(column) is not None, f"{column} missing in {action['path']}"
        assert action["min.offset"] <= action["max.offset"]
        assert action["max.offset"] - action["min.offset"] + 1 >= action["num_records"] >= 1


def test_records_that_left_the_hot_tier_are_fetched_from_the_table(broker, make_topic):
    """With tiny segments and no local retention, tiered segments are deleted and a
    fetch from offset 0 must be served from the table, unchanged."""
    rest = broker.rest
    topic = make_topic(configs={"segment.bytes": "14", "local.retention.ms": "0"})
    n = 12
    for i in range(n):
        body = {
            "key": {"type": "STRING", "data": f"k{i}"},
            "value": {"type": "STRING", "data": f"v{i}"},
            "headers": [{"name": "i", "value": b64(bytes([i]))}],
            "timestamp": f"2023-01-01T00:00:{i:02d}.500Z",
        }
        assert rest.produce_v3(topic, body).status_code == 200
    hot_before = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, n)]
    wait_for_table(broker.table_path(topic), {0: n})

    # Each frame is bigger than segment.bytes, so each rolled a segment of its own;
    # once most of them are gone, offset 0 can only come from the table.
    hot_dir = broker.data_dir / "logs" / "broker-0" / f"{topic}-0"

    def tiered_segments_deleted():
        return len(list(hot_dir.iterdir())) < n // 2

    wait_until(tiered_segments_deleted, f"tiered hot segments in {hot_dir} to be deleted", timeout_s=90)
    from_table = [decode_binary(r) for r in rest.fetch_range(topic, 0, 0, n)]
    assert from_table == hot_before
    assert read_table(broker.table_path(topic)).num_rows == n


def test_large_values_and_edge_records_reach_the_table_unchanged(broker, topic):
    import os

    rest = broker.rest
    records = [{"key": os.urandom(512), "value": os.urandom(100 * 1024)} for _ in range(4)]
    records += [{"key": b"", "value": b""}, {"key": None, "value": None}, {"key": b"", "value": None}]
    resp = rest.produce_binary(topic, records)
    assert resp.status_code == 200, resp.text
    rows = rows_by_offset(wait_for_table(broker.table_path(topic), {0: len(records)}))
    assert [(rows[(0, o)]["key"], rows[(0, o)]["value"]) for o in range(len(records))] == [
        (r["key"], r["value"]) for r in records]
