"""Admin APIs over the Kafka listener: CreateTopics, DeleteTopics, DescribeGroups,
ListGroups, with confluent-kafka's AdminClient and kafka-python's KafkaAdminClient."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

pytestmark = pytest.mark.integration
QUIET = {"log_level": 0}


def _admin(kafka_broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})


def test_create_and_delete_topics_with_confluent_kafka(kafka_broker):
    admin = _admin(kafka_broker)
    name = f"adm-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=3, config={"retention.ms": "3600000"})])[name].result(60)
    resp = httpx.get(f"{kafka_broker.url}/topics/{name}")  # the same topic over REST v2
    assert resp.status_code == 200 and len(resp.json()["partitions"]) == 3
    assert resp.json()["configs"]["retention.ms"] == "3600000"
    with pytest.raises(KafkaException) as again:
        admin.create_topics([NewTopic(name, num_partitions=1)])[name].result(60)
    assert again.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as bad:
        admin.create_topics([NewTopic(f"{name}-bad", num_partitions=1, config={"no.such.config": "1"})])[
            f"{name}-bad"].result(60)
    assert bad.value.args[0].code() == KafkaError.INVALID_CONFIG
    admin.delete_topics([name])[name].result(60)
    assert httpx.get(f"{kafka_broker.url}/topics/{name}").status_code == 404
    with pytest.raises(KafkaException) as gone:
        admin.delete_topics([name])[name].result(60)
    assert gone.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_topic_validate_only_creates_nothing(kafka_broker):
    admin = _admin(kafka_broker)
    name = f"adm-v-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=2)], validate_only=True)[name].result(60)
    assert httpx.get(f"{kafka_broker.url}/topics/{name}").status_code == 404


def test_describe_and_list_a_group_joined_over_kafka(kafka_broker):
    topic = f"adm-g-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 2).status_code in (200, 201)
    group = f"adm-group-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group, **QUIET})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.5)
    assert sorted(tp.partition for tp in consumer.assignment()) == [0, 1]
    try:
        admin = _admin(kafka_broker)
        listed = admin.list_consumer_groups().result(60)
        assert group in [g.group_id for g in listed.valid]
        described = admin.describe_consumer_groups([group])[group].result(60)
        assert str(described.state).endswith("STABLE")
        assert len(described.members) == 1
        assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == [0, 1]
    finally:
        consumer.close()


def test_create_and_delete_topics_with_kafka_python(kafka_broker):
    name = f"adm-kp-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic(name, num_partitions=2, replication_factor=1)])
        assert len(httpx.get(f"{kafka_broker.url}/topics/{name}").json()["partitions"]) == 2
        admin.delete_topics([name])
        assert httpx.get(f"{kafka_broker.url}/topics/{name}").status_code == 404
    finally:
        admin.close()


def test_create_partitions_with_confluent_kafka(kafka_broker):
    from confluent_kafka.admin import NewPartitions

    admin = _admin(kafka_broker)
    name = f"adm-p-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(name, 2).status_code in (200, 201)
    admin.create_partitions([NewPartitions(name, 5)], validate_only=True)[name].result(60)
    assert len(httpx.get(f"{kafka_broker.url}/topics/{name}").json()["partitions"]) == 2  # validated only
    admin.create_partitions([NewPartitions(name, 5)])[name].result(60)
    assert len(httpx.get(f"{kafka_broker.url}/topics/{name}").json()["partitions"]) == 5
    md = admin.list_topics(name, timeout=30)
    assert sorted(md.topics[name].partitions) == [0, 1, 2, 3, 4]
    for count in (5, 3):  # not more than the topic has: Kafka's INVALID_PARTITIONS, nothing changes
        with pytest.raises(KafkaException) as bad:
            admin.create_partitions([NewPartitions(name, count)])[name].result(60)
        assert bad.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    missing = f"adm-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KafkaException) as gone:
        admin.create_partitions([NewPartitions(missing, 2)])[missing].result(60)
    assert gone.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(httpx.get(f"{kafka_broker.url}/topics/{name}").json()["partitions"]) == 5
