"""Typed columns (``laketail.table.mode=value_schema_id_prefix``) on a real broker and a
real Delta table: Avro produced through the REST Proxy lands decoded in
``value_struct`` next to the raw ``value``; a value that does not decode is a null
struct, counted on ``/metrics``; a new schema version with an optional field widens the
column; the table stays sound for Kafka reads and ``laketail check``. Keys the same way
(``laketail.table.key.mode``): ``key_struct`` next to the raw ``key``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pyarrow as pa
from deltalake import DeltaTable

from laketail.schemas import wire
from tests.integration.support import TIER_DEADLINE_S, wait_until

AVRO = "application/vnd.kafka.avro.v2+json"
ORDER_V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]}
ORDER_V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None}]}
TYPED = {"laketail.table.mode": "value_schema_id_prefix"}


def _produce_avro(rest: Any, topic: str, schema: dict, values: list[dict]) -> None:
    resp = rest.http.post(f"/topics/{topic}", content=json.dumps({
        "value_schema": json.dumps(schema), "records": [{"value": v, "partition": 0} for v in values]}),
        headers={"Content-Type": AVRO})
    assert resp.status_code == 200, resp.text
    assert all(o.get("error") is None for o in resp.json()["offsets"]), resp.text


def _table_rows(broker: Any, topic: str, records: int) -> pa.Table:
    """The topic's Delta table once it holds ``records`` rows, sorted by offset."""
    def tiered() -> pa.Table | None:
        table = DeltaTable(str(broker.table_path(topic))).to_pyarrow_table()
        return table.sort_by("offset") if table.num_rows == records else None

    return wait_until(tiered, f"{records} records of {topic} in its table", timeout_s=TIER_DEADLINE_S)


def _undecoded(broker: Any, topic: str) -> float:
    text = httpx.get(f"{broker.url}/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith("laketail_table_values_undecoded_total{") and f'topic="{topic}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_values_land_decoded_and_the_column_widens_with_the_schema(broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs=TYPED)
    rest = broker.rest
    _produce_avro(rest, topic, ORDER_V1, [{"id": "o-1", "amount": 1.5}, {"id": "o-2", "amount": 2.25}])
    assert rest.produce_binary(topic, [{"value": b"not avro", "partition": 0},
                                       {"value": None, "partition": 0}]).status_code == 200
    table = _table_rows(broker, topic, 4)
    assert table.schema.field("value_struct").type == pa.struct([("id", pa.string()), ("amount", pa.float64())])
    assert table.column("value_struct").to_pylist() == [
        {"id": "o-1", "amount": 1.5}, {"id": "o-2", "amount": 2.25}, None, None]
    assert table.column("value")[2].as_py() == b"not avro"  # the raw value stays beside it
    assert _undecoded(broker, topic) == 1.0  # the null value is no failure

    # a compatible v2 (an optional field) widens the column; v1 rows read it as null
    _produce_avro(rest, topic, ORDER_V2, [{"id": "o-3", "amount": 3.0, "note": {"string": "rush"}}])
    _produce_avro(rest, topic, ORDER_V1, [{"id": "o-4", "amount": 4.0}])
    table = _table_rows(broker, topic, 6)
    assert table.schema.field("value_struct").type == pa.struct(
        [("id", pa.string()), ("amount", pa.float64()), ("note", pa.string())])
    assert table.column("value_struct").to_pylist() == [
        {"id": "o-1", "amount": 1.5, "note": None}, {"id": "o-2", "amount": 2.25, "note": None}, None, None,
        {"id": "o-3", "amount": 3.0, "note": "rush"}, {"id": "o-4", "amount": 4.0, "note": None}]

    # the table is laketail's still: Kafka reads serve it, the check finds no damage
    check = httpx.get(f"{broker.url}/v1/topics/{topic}/check", timeout=60)
    assert check.status_code == 200 and check.json()["ok"], check.text
    records = rest.fetch_range(topic, 0, 0, 6)
    assert [r["offset"] for r in records] == list(range(6))


def test_topics_without_the_mode_keep_the_record_schema(broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-1", "amount": 1.5}])
    table = _table_rows(broker, topic, 1)
    assert "value_struct" not in table.schema.names


def test_the_mode_is_a_validated_topic_config(broker: Any) -> None:
    resp = broker.rest.create_topic("typed-bad-mode", 1, configs={"laketail.table.mode": "value_schema_any"})
    assert resp.status_code == 400, resp.text
    assert "laketail.table.mode='value_schema_any': must be one of" in resp.json()["message"]
    assert broker.rest.http.get("/topics/typed-bad-mode").status_code == 404  # nothing created


def test_value_schema_latest_decodes_unframed_values_by_the_latest_schema(broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={"laketail.table.mode": "value_schema_latest"})
    rest = broker.rest
    resp = rest.http.post(f"/subjects/{topic}-value/versions", content=json.dumps({"schema": json.dumps(ORDER_V1)}),
                          headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    assert resp.status_code == 200, resp.text
    codec = wire.codec("AVRO", json.dumps(ORDER_V1))
    plain = codec.encode({"id": "o-1", "amount": 1.5})  # Avro binary with no magic byte and id
    framed = wire.frame(resp.json()["id"], codec.encode({"id": "o-2", "amount": 2.5}))
    assert rest.produce_binary(topic, [{"value": plain, "partition": 0}, {"value": framed, "partition": 0},
                                       {"value": b"\xff", "partition": 0}]).status_code == 200
    table = _table_rows(broker, topic, 3)
    assert table.column("value_struct").to_pylist() == [{"id": "o-1", "amount": 1.5}, None, None]
    assert _undecoded(broker, topic) == 2.0  # the framed value is not this mode's: it reads to no end


KEY_V1 = {"type": "record", "name": "OrderKey", "fields": [{"name": "region", "type": "string"}]}
KEY_V2 = {"type": "record", "name": "OrderKey", "fields": [
    {"name": "region", "type": "string"}, {"name": "shard", "type": ["null", "int"], "default": None}]}
KEYED = {"laketail.table.key.mode": "key_schema_id_prefix"}


def _produce_keyed_avro(rest: Any, topic: str, key_schema: dict, value_schema: dict,
                        records: list[tuple[dict, dict]]) -> None:
    resp = rest.http.post(f"/topics/{topic}", content=json.dumps({
        "key_schema": json.dumps(key_schema), "value_schema": json.dumps(value_schema),
        "records": [{"key": k, "value": v, "partition": 0} for k, v in records]}),
        headers={"Content-Type": AVRO})
    assert resp.status_code == 200, resp.text
    assert all(o.get("error") is None for o in resp.json()["offsets"]), resp.text


def test_keys_land_decoded_in_key_struct_and_the_column_widens(broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={**TYPED, **KEYED})
    rest = broker.rest
    _produce_keyed_avro(rest, topic, KEY_V1, ORDER_V1, [({"region": "eu"}, {"id": "o-1", "amount": 1.5}),
                                                        ({"region": "us"}, {"id": "o-2", "amount": 2.0})])
    assert rest.produce_binary(topic, [{"key": b"raw key", "value": None, "partition": 0},
                                       {"key": None, "value": None, "partition": 0}]).status_code == 200
    table = _table_rows(broker, topic, 4)
    assert table.schema.field("key_struct").type == pa.struct([("region", pa.string())])
    assert table.column("key_struct").to_pylist() == [{"region": "eu"}, {"region": "us"}, None, None]
    assert table.column("value_struct").to_pylist() == [
        {"id": "o-1", "amount": 1.5}, {"id": "o-2", "amount": 2.0}, None, None]
    assert table.column("key")[2].as_py() == b"raw key"  # the raw key stays beside it
    assert _undecoded(broker, topic) == 1.0  # the raw key; null keys and values are no failure

    # a compatible key v2 widens key_struct; v1 keys read the new field as null
    _produce_keyed_avro(rest, topic, KEY_V2, ORDER_V1, [({"region": "ap", "shard": {"int": 7}},
                                                         {"id": "o-3", "amount": 3.0})])
    table = _table_rows(broker, topic, 5)
    assert table.schema.field("key_struct").type == pa.struct([("region", pa.string()), ("shard", pa.int32())])
    assert table.column("key_struct").to_pylist() == [
        {"region": "eu", "shard": None}, {"region": "us", "shard": None}, None, None, {"region": "ap", "shard": 7}]
    check = httpx.get(f"{broker.url}/v1/topics/{topic}/check", timeout=60)
    assert check.status_code == 200 and check.json()["ok"], check.text


def test_typed_keys_need_no_typed_values(broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs=KEYED)
    _produce_keyed_avro(broker.rest, topic, KEY_V1, ORDER_V1, [({"region": "eu"}, {"id": "o-1", "amount": 1.5})])
    table = _table_rows(broker, topic, 1)
    assert table.column("key_struct").to_pylist() == [{"region": "eu"}]
    assert "value_struct" not in table.schema.names


def test_key_schema_latest_decodes_unframed_keys(broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={"laketail.table.key.mode": "key_schema_latest"})
    rest = broker.rest
    resp = rest.http.post(f"/subjects/{topic}-key/versions", content=json.dumps({"schema": json.dumps(KEY_V1)}),
                          headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    assert resp.status_code == 200, resp.text
    plain = wire.codec("AVRO", json.dumps(KEY_V1)).encode({"region": "eu"})
    assert rest.produce_binary(topic, [{"key": plain, "value": b"v", "partition": 0},
                                       {"key": b"\xff", "value": b"v", "partition": 0}]).status_code == 200
    table = _table_rows(broker, topic, 2)
    assert table.column("key_struct").to_pylist() == [{"region": "eu"}, None]


def test_the_key_mode_is_a_validated_topic_config(broker: Any) -> None:
    resp = broker.rest.create_topic("typed-bad-key-mode", 1, configs={"laketail.table.key.mode": "value_schema_latest"})
    assert resp.status_code == 400, resp.text
    assert "laketail.table.key.mode='value_schema_latest': must be one of" in resp.json()["message"]
    assert broker.rest.http.get("/topics/typed-bad-key-mode").status_code == 404  # nothing created
