"""The REST Proxy's schema'd embedded formats against a real broker: v2 produce in
``avro``, ``jsonschema`` and ``protobuf`` registers the schema under TopicNameStrategy's
subject, stores Confluent's wire format that confluent-kafka's deserializers read,
and refuses what kafka-rest refuses, with its codes, writing nothing."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

AVRO = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA = "application/vnd.kafka.jsonschema.v2+json"
PROTOBUF = "application/vnd.kafka.protobuf.v2+json"

ORDER_AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None}]})
KEY_AVRO = json.dumps({"type": "string"})
ORDER_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                         "properties": {"id": {"type": "string"}, "amount": {"type": "number"}},
                         "required": ["id", "amount"]})
ORDER_PROTO = """syntax = "proto3";
package shop;
message Order {
  string id = 1;
  double amount = 2;
  repeated string tags = 3;
}
"""


@pytest.fixture
def client(broker) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": broker.url})


def _produce(broker, topic: str, content_type: str, body: dict, partition: int | None = None):
    path = f"/topics/{topic}" + ("" if partition is None else f"/partitions/{partition}")
    return broker.rest.http.post(path, content=json.dumps(body), headers={"Content-Type": content_type})


def _stored(broker, topic: str, count: int) -> list[dict]:
    fetched = broker.rest.fetch(topic, 0, 0)
    assert fetched.status_code == 200, fetched.text
    records = fetched.json()
    assert len(records) == count
    return records


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def test_avro_produce_registers_and_writes_the_wire_format(broker, client, topic: str) -> None:
    resp = _produce(broker, topic, AVRO, {
        "key_schema": KEY_AVRO, "value_schema": ORDER_AVRO,
        "records": [{"key": "k1", "value": {"id": "o-1", "amount": 12.5, "note": {"string": "gift"}}},
                    {"key": "k2", "value": {"id": "o-2", "amount": 3.0, "note": None}}],
    })
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    key_id = client.get_latest_version(f"{topic}-key").schema_id
    value_id = client.get_latest_version(f"{topic}-value").schema_id
    assert (answer["key_schema_id"], answer["value_schema_id"]) == (key_id, value_id)
    assert [o["offset"] for o in answer["offsets"]] == [0, 1]
    stored = _stored(broker, topic, 2)
    value = _bytes(stored[0]["value"])
    assert value[0] == 0 and struct.unpack(">i", value[1:5])[0] == value_id
    values = AvroDeserializer(client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert values(value, ctx) == {"id": "o-1", "amount": 12.5, "note": "gift"}
    assert values(_bytes(stored[1]["value"]), ctx) == {"id": "o-2", "amount": 3.0, "note": None}
    keys = AvroDeserializer(client)
    assert keys(_bytes(stored[1]["key"]), SerializationContext(topic, MessageField.KEY)) == "k2"
    # the same schema again, now by id: no new version
    again = _produce(broker, topic, AVRO, {"value_schema_id": value_id, "records": [
        {"value": {"id": "o-3", "amount": 1.0, "note": None}}]})
    assert again.status_code == 200, again.text
    assert again.json()["value_schema_id"] == value_id
    assert client.get_versions(f"{topic}-value") == [1]


def test_jsonschema_produce_is_read_by_the_json_deserializer(broker, client, topic: str) -> None:
    resp = _produce(broker, topic, JSONSCHEMA, {"value_schema": ORDER_JSON, "records": [
        {"value": {"id": "o-1", "amount": 7}}]})
    assert resp.status_code == 200, resp.text
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "JSON"
    assert resp.json()["value_schema_id"] == registered.schema_id
    value = _bytes(_stored(broker, topic, 1)[0]["value"])
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert JSONDeserializer(ORDER_JSON, schema_registry_client=client)(value, ctx) == {"id": "o-1", "amount": 7}


def test_protobuf_produce_is_read_by_the_protobuf_deserializer(broker, client, topic: str) -> None:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    resp = _produce(broker, topic, PROTOBUF, {"value_schema": ORDER_PROTO, "records": [
        {"value": {"id": "o-1", "amount": 2.5, "tags": ["a", "b"]}}]})
    assert resp.status_code == 200, resp.text
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "PROTOBUF"
    # the reader's class, built apart from laketail's .proto conversion
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="order_reader.proto", package="shop", syntax="proto3")
    msg = fd.message_type.add(name="Order")
    msg.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="amount", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    msg.field.add(name="tags", number=3, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    value = _bytes(_stored(broker, topic, 1)[0]["value"])
    assert value[5] == 0  # message indexes [0]: the first message
    back = ProtobufDeserializer(order, {"use.deprecated.format": False})(
        value, SerializationContext(topic, MessageField.VALUE))
    assert (back.id, back.amount, list(back.tags)) == ("o-1", 2.5, ["a", "b"])


@pytest.mark.parametrize(("body", "status", "code"), [
    # a value that the schema does not take: JSON_CONVERSION
    ({"value_schema": ORDER_AVRO, "records": [{"value": {"id": "x", "amount": "lots"}}]}, 422, 42203),
    # values and no value schema: VALUE_SCHEMA_MISSING
    ({"records": [{"value": {"id": "x", "amount": 1.0}}]}, 422, 42202),
    # a key and no key schema: KEY_SCHEMA_MISSING
    ({"value_schema": ORDER_AVRO, "records": [{"key": "k", "value": {"id": "x", "amount": 1.0, "note": None}}]},
     422, 42201),
    # not an Avro schema: INVALID_SCHEMA (kafka-rest's 42205)
    ({"value_schema": '{"type": "no-such-type"}', "records": [{"value": {}}]}, 422, 42205),
    # an unknown schema id: the registry's 40403 behind kafka-rest's 42207
    ({"value_schema_id": 987654, "records": [{"value": {"id": "x"}}]}, 422, 42207),
])
def test_a_refused_produce_writes_nothing(broker, topic: str, body: dict, status: int, code: int) -> None:
    resp = _produce(broker, topic, AVRO, body)
    assert (resp.status_code, resp.json()["error_code"]) == (status, code), resp.text
    assert broker.rest.offsets(topic, 0) == (0, 0)


def test_an_incompatible_schema_is_refused_by_the_subject(broker, client, topic: str) -> None:
    first = _produce(broker, topic, AVRO, {"value_schema": ORDER_AVRO, "records": [
        {"value": {"id": "o-1", "amount": 1.0, "note": None}}]})
    assert first.status_code == 200, first.text
    changed = json.dumps({"type": "record", "name": "Order", "namespace": "shop",
                          "fields": [{"name": "id", "type": "int"}]})
    resp = _produce(broker, topic, AVRO, {"value_schema": changed, "records": [{"value": {"id": 1}}]})
    assert (resp.status_code, resp.json()["error_code"]) == (422, 42207), resp.text
    assert "40901" in resp.json()["message"] or "incompatible" in resp.json()["message"]
    assert broker.rest.offsets(topic, 0) == (0, 1)
    assert client.get_versions(f"{topic}-value") == [1]


# -- v2 consumers of the schema'd formats -------------------------------------------------------


def _consumer(broker, topic: str, fmt: str):
    from tests.groups.support import V2Consumer

    consumer = V2Consumer(broker.url, f"g-{topic}", "c", format=fmt, **{"auto.offset.reset": "earliest"})
    assert consumer.post("/assignments", {"partitions": [{"topic": topic, "partition": 0}]}).status_code == 204
    return consumer


def _read(consumer, accept: str, count: int) -> list[dict]:
    seen: list[dict] = []
    for _ in range(30):  # each poll waits up to 2 s for records
        if len(seen) >= count:
            break
        resp = consumer.records_response(timeout_ms=2000, accept=accept)
        assert resp.status_code == 200, resp.text
        seen.extend(resp.json())
    assert len(seen) >= count, seen
    return seen


def test_an_avro_consumer_reads_the_proxys_and_the_serializers_records(broker, client, topic: str) -> None:
    from confluent_kafka.schema_registry.avro import AvroSerializer

    resp = _produce(broker, topic, AVRO, {"key_schema": KEY_AVRO, "value_schema": ORDER_AVRO, "records": [
        {"key": "k1", "value": {"id": "o-1", "amount": 1.5, "note": {"string": "gift"}}}]})
    assert resp.status_code == 200, resp.text
    # a Kafka client's serializer writes the same format; the consumer reads both
    data = AvroSerializer(client, ORDER_AVRO)({"id": "o-2", "amount": 2.0, "note": None},
                                                SerializationContext(topic, MessageField.VALUE))
    assert broker.rest.produce_binary(topic, [{"value": data}]).status_code == 200
    consumer = _consumer(broker, topic, "avro")
    try:
        records = _read(consumer, AVRO, 2)
        assert [(r["offset"], r["key"], r["value"]) for r in records] == [
            (0, "k1", {"id": "o-1", "amount": 1.5, "note": {"string": "gift"}}),
            (1, None, {"id": "o-2", "amount": 2.0, "note": None}),
        ]
        # the instance answers its format only (kafka-rest's 40601)
        mismatch = consumer.records_response(timeout_ms=0, accept=JSONSCHEMA)
        assert mismatch.status_code == 406
    finally:
        consumer.delete()
        consumer.close()


@pytest.mark.parametrize(("fmt", "content_type", "schema", "value"), [
    ("jsonschema", JSONSCHEMA, ORDER_JSON, {"id": "o-1", "amount": 7}),
    ("protobuf", PROTOBUF, ORDER_PROTO, {"id": "o-1", "amount": 2.5, "tags": ["a"]}),
])
def test_jsonschema_and_protobuf_consumers_decode(broker, topic: str, fmt: str, content_type: str,
                                                  schema: str, value: dict) -> None:
    resp = _produce(broker, topic, content_type, {"value_schema": schema, "records": [{"value": value}]})
    assert resp.status_code == 200, resp.text
    consumer = _consumer(broker, topic, fmt)
    try:
        [record] = _read(consumer, content_type, 1)
        assert record["value"] == value
    finally:
        consumer.delete()
        consumer.close()


def test_a_record_without_the_wire_format_stops_the_consumer_on_it(broker, topic: str) -> None:
    resp = _produce(broker, topic, AVRO, {"value_schema": ORDER_AVRO, "records": [
        {"value": {"id": "o-1", "amount": 1.0, "note": None}}]})
    assert resp.status_code == 200, resp.text
    assert broker.rest.produce_binary(topic, [{"value": b"plain bytes"}]).status_code == 200
    consumer = _consumer(broker, topic, "avro")
    try:
        first = _read(consumer, AVRO, 1)
        assert [r["offset"] for r in first] == [0]
        refused = consumer.records_response(timeout_ms=500, accept=AVRO)
        assert (refused.status_code, refused.json()["error_code"]) == (422, 42203), refused.text
        assert "offset 1" in refused.json()["message"]
    finally:
        consumer.delete()
        consumer.close()


# -- v3 produce -------------------------------------------------------------------------------


def _v3(broker, topic: str, record: dict):
    return broker.rest.http.post(broker.rest.v3(f"/topics/{topic}/records"), json=record)


def test_v3_produce_with_a_schema_then_by_id_version_and_latest(broker, client, topic: str) -> None:
    first = _v3(broker, topic, {"value": {"type": "AVRO", "schema": ORDER_AVRO,
                                          "data": {"id": "o-1", "amount": 1.0, "note": None}}})
    assert first.status_code == 200, first.text
    report = first.json()["value"]
    registered = client.get_latest_version(f"{topic}-value")
    assert report == {"type": "AVRO", "subject": f"{topic}-value", "schema_id": registered.schema_id,
                      "schema_version": 1, "size": report["size"]}
    for how in ({"schema_id": registered.schema_id}, {"schema_version": 1}, {"type": "AVRO"},
                {"subject": f"{topic}-value", "schema_version": 1}):
        resp = _v3(broker, topic, {"key": {"type": "STRING", "data": "k"},
                                   "value": {**how, "data": {"id": "o-2", "amount": 2.0, "note": {"string": "x"}}}})
        assert resp.status_code == 200, (how, resp.text)
        assert resp.json()["value"]["schema_id"] == registered.schema_id
        assert resp.json()["key"] == {"type": "STRING", "size": 1}
    stored = broker.rest.fetch(topic, 0, 0).json()
    assert len(stored) == 5
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert AvroDeserializer(client)(_bytes(stored[4]["value"]), ctx) == {"id": "o-2", "amount": 2.0, "note": "x"}


def test_v3_jsonschema_and_protobuf(broker, client, topic: str) -> None:
    js = _v3(broker, topic, {"value": {"type": "JSONSCHEMA", "schema": ORDER_JSON, "data": {"id": "a", "amount": 1}}})
    assert js.status_code == 200, js.text
    assert js.json()["value"]["type"] == "JSONSCHEMA"
    value_id = js.json()["value"]["schema_id"]
    key = _v3(broker, topic, {"key": {"type": "PROTOBUF", "schema": ORDER_PROTO, "data": {"id": "k"}},
                              "value": {"schema_id": value_id, "data": {"id": "b", "amount": 2}}})
    assert key.status_code == 200, key.text
    assert (key.json()["key"]["type"], key.json()["key"]["subject"]) == ("PROTOBUF", f"{topic}-key")
    assert key.json()["value"]["type"] == "JSONSCHEMA"


@pytest.mark.parametrize(("value", "status", "code"), [
    ({"type": "AVRO", "schema": ORDER_AVRO, "data": {"id": 5}}, 422, 42203),
    ({"type": "AVRO", "schema": "not a schema", "data": {}}, 422, 42205),
    ({"schema_id": 987654, "data": {}}, 422, 42207),
    ({"type": "AVRO", "schema_id": 1, "data": {}}, 400, 40002),  # kafka-rest: an id takes no type
    ({"schema": ORDER_AVRO, "data": {}}, 400, 40002),  # a schema needs its type
])
def test_v3_refusals_write_nothing(broker, topic: str, value: dict, status: int, code: int) -> None:
    resp = _v3(broker, topic, {"value": value})
    assert (resp.status_code, resp.json()["error_code"]) == (status, code), resp.text
    assert broker.rest.offsets(topic, 0) == (0, 0)


@pytest.mark.parametrize("body", [
    {"value_schema": 5, "records": [{"value": {}}]},
    {"value_schema_id": "1", "records": [{"value": {}}]},
    {"value_schema_id": True, "records": [{"value": {}}]},
    {"value_schema": ORDER_AVRO, "value_schema_id": 1, "records": [{"value": {}}]},
    {"value_schema": ORDER_AVRO, "records": [{"value": [1, 2]}]},
    {"value_schema": ORDER_AVRO, "records": [{"value": "text"}]},
    {"value_schema": ORDER_AVRO, "records": ["not a record"]},
    {"value_schema": ORDER_AVRO, "records": []},
    {"value_schema": "", "records": [{"value": {}}]},
    {"value_schema": ORDER_AVRO, "records": [{"value": {"id": "x", "amount": 1e400}}]},
    {"value_schema": json.dumps({"type": "bytes"}), "records": [{"value": "\u0100"}]},
])
def test_malformed_schemad_bodies_are_4xx_and_write_nothing(broker, topic: str, body: dict) -> None:
    for content_type in (AVRO, JSONSCHEMA, PROTOBUF):
        resp = _produce(broker, topic, content_type, body)
        assert 400 <= resp.status_code < 500, (content_type, resp.status_code, resp.text)
        assert isinstance(resp.json()["error_code"], int)
    assert broker.rest.offsets(topic, 0) == (0, 0)


@pytest.mark.parametrize("value", [
    {"type": "AVRO", "schema": 5, "data": {}},
    {"schema_id": "1", "data": {}},
    {"schema_version": "latest", "data": {}},
    {"subject": 5, "schema_version": 1, "data": {}},
    {"subject": "", "schema_version": 1, "data": {}},
    {"type": "AVRO", "subject_name_strategy": "RECORD_NAME", "schema": ORDER_AVRO, "data": {}},
    {"schema_id": 1, "schema_version": 1, "data": {}},
    {"type": 5, "data": {}},
    {"type": "PROTOBUF", "schema": "message {", "data": {}},
])
def test_malformed_v3_schemad_values_are_4xx_and_write_nothing(broker, topic: str, value: dict) -> None:
    resp = _v3(broker, topic, {"value": value})
    assert 400 <= resp.status_code < 500, resp.text
    assert isinstance(resp.json()["error_code"], int)
    assert broker.rest.offsets(topic, 0) == (0, 0)
