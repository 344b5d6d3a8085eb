"""confluent-kafka's official SchemaRegistryClient and its Avro, JSON Schema and
Protobuf serializers, unchanged,
against a real broker: register, evolve, look up, delete; and Confluent wire-format
bytes (magic byte 0, the 4-byte schema id, the Avro body) through REST produce and
fetch."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

V1 = json.dumps({"type": "record", "name": "Payment", "namespace": "acme",
                 "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]})
V2 = json.dumps({"type": "record", "name": "Payment", "namespace": "acme",
                 "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"},
                            {"name": "currency", "type": "string", "default": "EUR"}]})
BAD = json.dumps({"type": "record", "name": "Payment", "namespace": "acme",
                  "fields": [{"name": "id", "type": "string"}, {"name": "fee", "type": "int"}]})


@pytest.fixture
def client(broker) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": broker.url})


def test_register_evolve_lookup_delete(client: SchemaRegistryClient, topic: str) -> None:
    subject = f"{topic}-value"
    first = client.register_schema(subject, Schema(V1, "AVRO"))
    assert client.register_schema(subject, Schema(V1, "AVRO")) == first
    second = client.register_schema(subject, Schema(V2, "AVRO"))
    assert second != first
    assert client.test_compatibility(subject, Schema(BAD, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(BAD, "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 40901)
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(latest.schema.schema_str) == json.loads(V2)
    found = client.lookup_schema(subject, Schema(V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, first)
    assert json.loads(client.get_schema(first).schema_str) == json.loads(V1)
    assert client.get_versions(subject) == [1, 2]
    assert subject in client.get_subjects()
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    assert client.delete_version(subject, 1) == 1
    assert client.get_versions(subject) == [2]
    assert client.delete_subject(subject) == [2]
    assert client.delete_subject(subject, permanent=True) == [1, 2]  # both soft-deleted before
    with pytest.raises(SchemaRegistryError) as gone:
        client.get_versions(subject)
    assert gone.value.error_code == 40401


def test_avro_serializer_round_trip_through_rest_produce_and_fetch(broker, client, topic: str) -> None:
    ctx = SerializationContext(topic, MessageField.VALUE)
    serialize = AvroSerializer(client, V1)
    value = serialize({"id": "p-1", "amount": 12.5}, ctx)
    magic, schema_id = struct.unpack(">bI", value[:5])
    assert magic == 0
    assert schema_id == client.get_latest_version(f"{topic}-value").schema_id
    resp = broker.rest.produce_binary(topic, [{"value": value}])
    assert resp.status_code == 200, resp.text
    fetched = broker.rest.fetch(topic, 0, 0)
    assert fetched.status_code == 200, fetched.text
    stored = base64.b64decode(fetched.json()[0]["value"])
    assert stored == value  # the wire-format bytes as the serializer made them
    assert AvroDeserializer(client)(stored, ctx) == {"id": "p-1", "amount": 12.5}


def test_json_schema_serializer_round_trip(client: SchemaRegistryClient, topic: str) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Ping",
                         "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    ctx = SerializationContext(topic, MessageField.VALUE)
    value = JSONSerializer(schema, client)({"n": 7}, ctx)
    assert value[0] == 0
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "JSON"
    assert struct.unpack(">I", value[1:5])[0] == registered.schema_id
    assert JSONDeserializer(schema, schema_registry_client=client)(value, ctx) == {"n": 7}


def test_protobuf_serializer_registers_its_descriptor(client: SchemaRegistryClient, topic: str) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    def message_class(fields: list[tuple[str, int, int]], file_name: str):
        fd = descriptor_pb2.FileDescriptorProto(name=file_name, package="acme", syntax="proto3")
        msg = fd.message_type.add(name="Reading")
        for name, number, kind in fields:
            msg.field.add(name=name, number=number, type=kind,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("acme.Reading"))

    F = descriptor_pb2.FieldDescriptorProto
    Reading = message_class([("sensor", 1, F.TYPE_STRING), ("value", 2, F.TYPE_DOUBLE)], "reading.proto")
    ctx = SerializationContext(topic, MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    data = ProtobufSerializer(Reading, client, conf)(Reading(sensor="s1", value=2.5), ctx)
    assert data[0] == 0
    subject = f"{topic}-value"
    assert client.get_latest_version(subject).schema.schema_type == "PROTOBUF"
    back = ProtobufDeserializer(Reading, {"use.deprecated.format": False})(data, ctx)
    assert (back.sensor, back.value) == ("s1", 2.5)
    # a field number whose type changes is refused (BACKWARD), read from the descriptor
    Changed = message_class([("sensor", 1, F.TYPE_STRING), ("value", 2, F.TYPE_STRING)], "reading2.proto")
    with pytest.raises(SchemaRegistryError) as refused:
        ProtobufSerializer(Changed, client, conf)(Changed(sensor="s1", value="x"), ctx)
    assert refused.value.error_code == 40901
