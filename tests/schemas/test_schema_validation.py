"""Broker-side schema validation (Confluent Server's ``confluent.value.schema.validation``
and ``confluent.key.schema.validation``) on a real broker, through REST and through a
Kafka client: a record not in the wire format of a schema its subject holds is refused
with INVALID_RECORD and nothing is written; the serializers' and the proxy's records
pass."""

from __future__ import annotations

import json
import struct
import uuid
from typing import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.kafka_listener.conftest import KafkaBroker

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]})
AVRO = "application/vnd.kafka.avro.v2+json"


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    proc = KafkaBroker(tmp_path_factory.mktemp("validating") / "data")
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()


def _topic(broker, **configs: str) -> str:
    name = f"validated-{uuid.uuid4().hex[:10]}"
    resp = broker.rest.create_topic(name, 1, configs=configs)
    assert resp.status_code in (200, 201), resp.text
    return name


def _register(broker, topic: str) -> tuple[SchemaRegistryClient, bytes]:
    client = SchemaRegistryClient({"url": broker.url})
    good = AvroSerializer(client, ORDER)({"id": "o-1", "amount": 1.0}, SerializationContext(topic, MessageField.VALUE))
    return client, good


def _refused(resp, what: str) -> None:
    assert (resp.status_code, resp.json()["error_code"]) == (422, 42206), resp.text
    assert "schema validation" in resp.json()["message"], what


def test_values_outside_the_subjects_schemas_are_refused(kafka_broker) -> None:
    topic = _topic(kafka_broker, **{"confluent.value.schema.validation": "true"})
    _, good = _register(kafka_broker, topic)
    schema_id = struct.unpack(">i", good[1:5])[0]
    rest = kafka_broker.rest
    refusals = {
        "no magic byte": b"plain bytes",
        "an unknown schema id": b"\x00" + struct.pack(">i", schema_id + 1000) + good[5:],
        "a payload that does not read": good[:5] + b"\xff",
        "bytes after the datum": good + b"\x00",
    }
    for what, data in refusals.items():
        # one good record beside the bad one: the request is refused whole
        _refused(rest.produce_binary(topic, [{"value": good}, {"value": data}]), what)
    assert rest.offsets(topic, 0) == (0, 0)
    # the serializer's bytes, the proxy's records and tombstones pass
    assert rest.produce_binary(topic, [{"value": good}, {"value": None}]).status_code == 200
    proxied = rest.http.post(f"/topics/{topic}", content=json.dumps({
        "value_schema_id": schema_id, "records": [{"value": {"id": "o-2", "amount": 2.0}}]}),
        headers={"Content-Type": AVRO})
    assert proxied.status_code == 200, proxied.text
    assert rest.offsets(topic, 0) == (0, 3)


def test_a_schema_of_another_subject_is_refused(kafka_broker) -> None:
    topic = _topic(kafka_broker, **{"confluent.value.schema.validation": "true"})
    other = _topic(kafka_broker)
    _, elsewhere = _register(kafka_broker, other)  # registered under <other>-value only
    _refused(kafka_broker.rest.produce_binary(topic, [{"value": elsewhere}]), "another subject's id")


def test_keys_are_checked_only_with_key_validation(kafka_broker) -> None:
    keyed = _topic(kafka_broker, **{"confluent.key.schema.validation": "true"})
    _refused(kafka_broker.rest.produce_binary(keyed, [{"key": b"raw", "value": b"raw"}]), "a raw key")
    values_only = _topic(kafka_broker, **{"confluent.value.schema.validation": "true"})
    _, good = _register(kafka_broker, values_only)
    assert kafka_broker.rest.produce_binary(values_only, [{"key": b"raw", "value": good}]).status_code == 200


def test_a_bad_key_refuses_the_whole_produce_and_writes_nothing(kafka_broker) -> None:
    topic = _topic(kafka_broker, **{"confluent.key.schema.validation": "true"})
    client = SchemaRegistryClient({"url": kafka_broker.url})
    key = AvroSerializer(client, ORDER)({"id": "k-1", "amount": 1.0}, SerializationContext(topic, MessageField.KEY))
    unknown_id = struct.pack(">bi", 0, 999_999) + key[5:]
    rest = kafka_broker.rest
    for bad in (b"raw", unknown_id, key[:-1]):
        _refused(rest.produce_binary(topic, [{"key": key, "value": b"v"}, {"key": bad, "value": b"v"}]), "a bad key")
    assert rest.offsets(topic, 0) == (0, 0)  # nothing written, not even the good first record
    assert rest.produce_binary(topic, [{"key": key, "value": b"raw value"}, {"key": None}]).status_code == 200
    assert rest.offsets(topic, 0) == (0, 2)


def test_a_kafka_client_gets_invalid_record(kafka_broker) -> None:
    topic = _topic(kafka_broker, **{"confluent.value.schema.validation": "true"})
    _, good = _register(kafka_broker, topic)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "log_level": 0, "retries": 0})
    reports: list = []
    for value in (b"not framed", good):
        producer.produce(topic, value=value, on_delivery=lambda err, msg: reports.append(err))
        assert producer.flush(60) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.INVALID_RECORD, reports
    assert reports[1] is None
    assert kafka_broker.rest.offsets(topic, 0) == (0, 1)


def test_the_configs_are_described_as_topic_configs(kafka_broker) -> None:
    topic = _topic(kafka_broker, **{"confluent.value.schema.validation": "true"})
    resp = kafka_broker.rest.http.get(kafka_broker.rest.v3(f"/topics/{topic}/configs"))
    assert resp.status_code == 200, resp.text
    found = {c["name"]: c["value"] for c in resp.json()["data"]}
    assert found["confluent.value.schema.validation"] == "true"
    assert found["confluent.key.schema.validation"] == "false"


def test_acks_0_is_refused_before_the_answer_where_the_registry_runs(kafka_broker) -> None:
    """acks=0 answers before the append, but the check runs first (on a lone broker the
    registry is here): the client learns, and nothing is written."""
    topic = _topic(kafka_broker, **{"confluent.value.schema.validation": "true"})
    _, good = _register(kafka_broker, topic)
    rest = kafka_broker.rest
    _refused(rest.produce_binary(topic, [{"value": b"not framed"}], acks="0"), "acks=0")
    assert rest.produce_binary(topic, [{"value": good}]).json()["offsets"][0]["offset"] == 0
    assert rest.offsets(topic, 0) == (0, 1)
