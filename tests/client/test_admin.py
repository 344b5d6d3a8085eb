"""The Python client's AdminClient against a real broker: topics and configs through
Confluent v3, with confluent-kafka's futures and result types."""

from __future__ import annotations

import uuid

import pytest

from laketail.client import KafkaError, KafkaException
from laketail.client.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.integration


def fresh_name(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:10]}"


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=60)
    return caught.value.args[0]


def test_create_list_describe_delete(servers, clients):
    admin = clients(AdminClient({"bootstrap.servers": servers}))
    a, b = fresh_name("admin-a"), fresh_name("admin-b")
    futures = admin.create_topics([
        NewTopic(a, num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"}),
        NewTopic(b, 1),
    ])
    assert set(futures) == {a, b}
    for topic, future in futures.items():
        assert future.result(timeout=60) is None, topic

    metadata = admin.list_topics(timeout=30)
    assert isinstance(metadata, ClusterMetadata) and metadata.cluster_id
    assert metadata.brokers and all(b.id == i for i, b in metadata.brokers.items())
    assert sorted(metadata.topics[a].partitions) == [0, 1, 2]
    p0 = metadata.topics[a].partitions[0]
    assert p0.leader in metadata.brokers and p0.replicas == [p0.leader] and p0.isrs == [p0.leader]
    assert metadata.topics[a].error is None and list(metadata.topics[b].partitions) == [0]

    one = admin.list_topics(topic=a)
    assert list(one.topics) == [a]
    missing = admin.list_topics(topic=fresh_name("missing")).topics
    assert next(iter(missing.values())).error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    resource = ConfigResource(ResourceType.TOPIC, a)
    configs = admin.describe_configs([resource])[resource].result(timeout=60)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].is_default and configs["cleanup.policy"].value == "delete"

    deleted = admin.delete_topics([a, b], operation_timeout=30)
    for future in deleted.values():
        assert future.result(timeout=60) is None
    remaining = admin.list_topics().topics
    assert a not in remaining and b not in remaining


def test_create_existing_and_delete_missing_fail_in_their_futures(servers, clients, make_topic):
    admin = clients(AdminClient({"bootstrap.servers": servers}))
    existing = make_topic()
    err = error_of(admin.create_topics([NewTopic(existing, 1)])[existing])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS and err.name() == "TOPIC_ALREADY_EXISTS"
    missing = fresh_name("missing")
    assert error_of(admin.delete_topics([missing])[missing]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    bad = fresh_name("bad")
    assert error_of(admin.create_topics([NewTopic(bad, 1, config={"retention.ms": "soon"})])[bad]).code() \
        == KafkaError.INVALID_CONFIG
    assert error_of(admin.create_topics([NewTopic("bad/name", 1)])["bad/name"]).code() == KafkaError.TOPIC_EXCEPTION


def test_alter_configs_replaces_and_incremental_alter_changes_one_at_a_time(servers, clients, make_topic):
    admin = clients(AdminClient({"bootstrap.servers": servers}))
    topic = make_topic(configs={"retention.ms": "3600000"})
    resource = ConfigResource("topic", topic)

    def describe() -> dict[str, ConfigEntry]:
        return admin.describe_configs([resource])[resource].result(timeout=60)

    incremental = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    assert admin.incremental_alter_configs([incremental])[incremental].result(timeout=60) is None
    after = describe()
    assert after["retention.ms"].value == "7200000"
    assert after["cleanup.policy"].value == "delete,compact"
    assert after["table.flush.interval.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG  # left alone

    reset = ConfigResource(ResourceType.TOPIC, topic)
    reset.add_incremental_config(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    admin.incremental_alter_configs([reset])[reset].result(timeout=60)
    assert describe()["retention.ms"].is_default

    whole = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "1048576"})
    assert admin.alter_configs([whole])[whole].result(timeout=60) is None
    final = describe()
    overrides = {n for n, e in final.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
    assert overrides == {"retention.bytes"}  # alter_configs replaced every other override
    assert final["cleanup.policy"].is_default


def test_config_resources_other_than_topics_are_not_implemented(servers, clients):
    admin = clients(AdminClient({"bootstrap.servers": servers}))
    resource = ConfigResource(ResourceType.BROKER, "0")
    assert error_of(admin.describe_configs([resource])[resource]).code() == KafkaError._NOT_IMPLEMENTED
