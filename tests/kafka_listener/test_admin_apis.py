"""The admin APIs for configs, groups, the cluster and ACLs over the Kafka listener,
with confluent-kafka's AdminClient (and kafka-python's for OffsetDelete, which
confluent-kafka's Python API does not expose), against a broker with ACLs on: what the
Kafka client changes is what REST v2/v3 shows, and the other way round."""

from __future__ import annotations

import socket
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KpTopicPartition

from tests.kafka_listener.conftest import KafkaBroker

pytestmark = pytest.mark.integration
QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def admin_broker(acl_broker: KafkaBroker) -> KafkaBroker:
    return acl_broker


def _admin(broker: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})


def _topic(broker: KafkaBroker, configs: dict[str, str] | None = None) -> str:
    name = f"cfg-{uuid.uuid4().hex[:10]}"
    resp = broker.rest.create_topic(name, 1, configs=configs)
    assert resp.status_code in (200, 201), resp.text
    return name


def _rest_configs(broker: KafkaBroker, topic: str) -> dict[str, str]:
    resp = httpx.get(f"{broker.url}/topics/{topic}", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["configs"]


def _code(exc: KafkaException) -> int:
    return exc.args[0].code()


# -- configs -------------------------------------------------------------------------------------


def test_describe_topic_and_broker_configs(admin_broker):
    topic = _topic(admin_broker, {"retention.ms": "3600000"})
    admin = _admin(admin_broker)
    entries = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    configs = next(iter(entries.values())).result(60)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].is_default and configs["segment.bytes"].value == "1073741824"
    broker_id = admin.describe_cluster().result(60).controller.id
    found = next(iter(admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker_id))]).values()))
    broker_configs = found.result(60)
    assert broker_configs["auto.create.topics.enable"].is_read_only
    with pytest.raises(KafkaException) as unknown:
        next(iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, "no-such-topic-here")]).values())
             ).result(60)
    assert _code(unknown.value) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs_set_delete_append_and_validate_only(admin_broker):
    topic = _topic(admin_broker, {"retention.ms": "3600000", "segment.ms": "600000"})
    admin = _admin(admin_broker)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    # validate_only: checked, nothing written
    next(iter(admin.incremental_alter_configs([resource], validate_only=True).values())).result(60)
    before = _rest_configs(admin_broker, topic)
    assert (before["retention.ms"], before["segment.ms"]) == ("3600000", "600000")
    next(iter(admin.incremental_alter_configs([resource]).values())).result(60)
    after = _rest_configs(admin_broker, topic)
    assert after["retention.ms"] == "7200000"
    assert after["segment.ms"] == "604800000"  # back to its default
    assert after["cleanup.policy"] == "delete,compact"
    # a bad value: INVALID_CONFIG, and nothing of the resource written
    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.insync.replicas", "zero", incremental_operation=AlterConfigOpType.SET),
    ])
    with pytest.raises(KafkaException) as refused:
        next(iter(admin.incremental_alter_configs([bad]).values())).result(60)
    assert _code(refused.value) == KafkaError.INVALID_CONFIG
    assert _rest_configs(admin_broker, topic)["retention.ms"] == "7200000"
    # APPEND to a config that is not a list
    not_list = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(KafkaException) as append:
        next(iter(admin.incremental_alter_configs([not_list]).values())).result(60)
    assert _code(append.value) == KafkaError.INVALID_CONFIG


def test_alter_configs_replaces_the_whole_set_and_broker_configs_are_static(admin_broker):
    topic = _topic(admin_broker, {"retention.ms": "3600000", "segment.ms": "600000"})
    admin = _admin(admin_broker)
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "1800000"})
    with pytest.warns(DeprecationWarning):  # the client prefers IncrementalAlterConfigs; the API is Kafka's still
        futures = admin.alter_configs([resource])
    next(iter(futures.values())).result(60)
    configs = _rest_configs(admin_broker, topic)
    assert (configs["retention.ms"], configs["segment.ms"]) == ("1800000", "604800000")
    broker_id = admin.describe_cluster().result(60).controller.id
    static = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[
        ConfigEntry("auto.create.topics.enable", "false", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        next(iter(admin.incremental_alter_configs([static]).values())).result(60)
    assert _code(refused.value) == KafkaError.INVALID_REQUEST


def test_a_denied_describe_configs_is_topic_authorization_failed(admin_broker):
    topic = _topic(admin_broker)
    admin = _admin(admin_broker)
    futures = admin.create_acls([AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
        AclOperation.DESCRIBE_CONFIGS, AclPermissionType.DENY)])
    for f in futures.values():
        f.result(60)
    with pytest.raises(KafkaException) as denied:
        next(iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values())).result(60)
    assert _code(denied.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED


# -- groups --------------------------------------------------------------------------------------


def _commit(broker: KafkaBroker, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **QUIET})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _committed_over_rest(broker: KafkaBroker, group: str, topic: str) -> list[int]:
    resp = httpx.post(f"{broker.url}/v1/groups/{group}/committed",
                      json={"partitions": [{"topic": topic, "partition": 0}]}, timeout=30)
    assert resp.status_code == 200, resp.text
    return [o["offset"] for o in resp.json()["offsets"] if o.get("offset") is not None and o["offset"] >= 0]


def test_delete_consumer_groups(admin_broker):
    topic = _topic(admin_broker)
    group = f"del-{uuid.uuid4().hex[:8]}"
    _commit(admin_broker, group, topic, 5)
    assert _committed_over_rest(admin_broker, group, topic) == [5]
    admin = _admin(admin_broker)
    admin.delete_consumer_groups([group])[group].result(60)
    assert _committed_over_rest(admin_broker, group, topic) == []
    assert group not in [g.group_id for g in admin.list_consumer_groups().result(60).valid]
    with pytest.raises(KafkaException) as gone:
        admin.delete_consumer_groups([group])[group].result(60)
    assert _code(gone.value) == KafkaError.GROUP_ID_NOT_FOUND


def test_a_group_with_members_is_not_deleted(admin_broker):
    topic = _topic(admin_broker)
    group = f"busy-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": group, **QUIET})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert consumer.assignment()
        admin = _admin(admin_broker)  # kept referenced: a collected client never completes its futures
        with pytest.raises(KafkaException) as busy:
            admin.delete_consumer_groups([group])[group].result(60)
        assert _code(busy.value) == KafkaError.NON_EMPTY_GROUP
    finally:
        consumer.close()


def test_a_denied_group_delete_is_group_authorization_failed(admin_broker):
    topic = _topic(admin_broker)
    group = f"keep-{uuid.uuid4().hex[:8]}"
    _commit(admin_broker, group, topic, 3)
    admin = _admin(admin_broker)
    # with an ACL on the group, "no ACL found" no longer allows Describe (Kafka's rule): grant it
    for f in admin.create_acls([
            AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", op, permission)
            for op, permission in ((AclOperation.DELETE, AclPermissionType.DENY),
                                   (AclOperation.DESCRIBE, AclPermissionType.ALLOW))]).values():
        f.result(60)
    with pytest.raises(KafkaException) as denied:
        admin.delete_consumer_groups([group])[group].result(60)
    assert _code(denied.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _committed_over_rest(admin_broker, group, topic) == [3]


def test_offset_delete_with_kafka_python(admin_broker):
    kept, dropped = _topic(admin_broker), _topic(admin_broker)
    group = f"offdel-{uuid.uuid4().hex[:8]}"
    _commit(admin_broker, group, kept, 4)
    _commit(admin_broker, group, dropped, 7)
    admin = KafkaAdminClient(bootstrap_servers=admin_broker.bootstrap)
    try:
        result = admin.delete_group_offsets(group, [KpTopicPartition(dropped, 0)])
        assert [(tp.topic, err.errno) for tp, err in result.items()] == [(dropped, 0)]
    finally:
        admin.close()
    assert _committed_over_rest(admin_broker, group, dropped) == []
    assert _committed_over_rest(admin_broker, group, kept) == [4]


# -- cluster -------------------------------------------------------------------------------------


def test_describe_cluster(admin_broker):
    admin = _admin(admin_broker)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(60)
    assert cluster.cluster_id == admin_broker.rest.cluster_id
    assert [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", admin_broker.kafka_port)]
    assert cluster.controller.id == cluster.nodes[0].id
    assert AclOperation.ALTER in cluster.authorized_operations  # no ACL on the cluster: everyone may


# -- ACLs ----------------------------------------------------------------------------------------


def test_create_describe_and_delete_acls_are_the_rest_v3_acls(admin_broker):
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    admin = _admin(admin_broker)
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, topic, ResourcePatternType.PREFIXED, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(60)
    v3 = httpx.get(f"{admin_broker.url}/v3/clusters/{admin_broker.rest.cluster_id}/acls",
                   params={"principal": "User:alice"}, timeout=30).json()["data"]
    assert sorted((a["resource_type"], a["resource_name"], a["pattern_type"], a["operation"]) for a in v3
                  if a["resource_name"] == topic) == [("GROUP", topic, "PREFIXED", "READ"),
                                                      ("TOPIC", topic, "LITERAL", "READ")]
    mine = AclBindingFilter(ResourceType.ANY, topic, ResourcePatternType.ANY, "User:alice", None,
                            AclOperation.ANY, AclPermissionType.ANY)
    described = admin.describe_acls(mine).result(60)
    assert sorted(b.restype for b in described) == sorted([ResourceType.TOPIC, ResourceType.GROUP])
    only_topics = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None,
                                   AclOperation.ANY, AclPermissionType.ANY)
    deleted = next(iter(admin.delete_acls([only_topics]).values())).result(60)
    assert [(b.restype, b.name, b.principal) for b in deleted] == [(ResourceType.TOPIC, topic, "User:alice")]
    assert [b.restype for b in admin.describe_acls(mine).result(60)] == [ResourceType.GROUP]


def test_an_invalid_acl_is_refused_and_nothing_is_stored(admin_broker):
    admin = _admin(admin_broker)
    bad = AclBinding(ResourceType.GROUP, f"bad-{uuid.uuid4().hex[:8]}", ResourcePatternType.LITERAL,
                     "User:bob", "*", AclOperation.WRITE, AclPermissionType.ALLOW)  # Write is not a group's
    with pytest.raises(KafkaException) as refused:
        next(iter(admin.create_acls([bad]).values())).result(60)
    assert _code(refused.value) == KafkaError.INVALID_REQUEST
    who = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(who).result(60) == []


def test_acl_apis_without_an_authorizer_are_security_disabled(kafka_broker):
    # over a raw socket: librdkafka (2.16) drops DescribeAcls' top-level error code and
    # reports an empty listing, so confluent-kafka cannot see SECURITY_DISABLED
    from tests.kafka_listener.test_listener import _call

    everything = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    with socket.create_connection(("127.0.0.1", kafka_broker.kafka_port), timeout=30) as sock:
        assert _call(sock, 29, 1, everything).error_code == 54  # DescribeAcls: SECURITY_DISABLED
        created = _call(sock, 30, 1, {"creations": [{
            "resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:a",
            "host": "*", "operation": 3, "permission_type": 3}]})
        assert [r.error_code for r in created.results] == [54]
        deleted = _call(sock, 31, 1, {"filters": [everything]})
        assert [r.error_code for r in deleted.filter_results] == [54]


def test_describe_cluster_api_over_a_raw_socket(admin_broker):
    # confluent-kafka answers describe_cluster from Metadata; DescribeCluster itself is
    # what Kafka's Java admin client sends
    from tests.kafka_listener.test_listener import _call

    with socket.create_connection(("127.0.0.1", admin_broker.kafka_port), timeout=30) as sock:
        answer = _call(sock, 60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert answer.error_code == 0 and answer.cluster_id == admin_broker.rest.cluster_id
        assert [(b.host, b.port) for b in answer.brokers] == [("127.0.0.1", admin_broker.kafka_port)]
        assert answer.controller_id == answer.brokers[0].broker_id
        assert answer.cluster_authorized_operations & (1 << 7)  # ALTER: no ACL on the cluster
        controllers = _call(sock, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert controllers.error_code == 119  # UNSUPPORTED_ENDPOINT_TYPE


# -- transactions under ACLs (the broker with ACLs is here) ---------------------------------------


def test_a_denied_transactional_id_cannot_init_transactions(admin_broker):
    transactional_id = f"ktx-denied-{uuid.uuid4().hex[:8]}"
    admin = _admin(admin_broker)
    # Describe allowed (FindCoordinator answers), Write denied (InitProducerId is refused)
    for f in admin.create_acls([
            AclBinding(ResourceType.TRANSACTIONAL_ID, transactional_id, ResourcePatternType.LITERAL,
                       "User:ANONYMOUS", "*", op, permission)
            for op, permission in ((AclOperation.WRITE, AclPermissionType.DENY),
                                   (AclOperation.DESCRIBE, AclPermissionType.ALLOW))]).values():
        f.result(60)
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap, "transactional.id": transactional_id,
                         **QUIET})
    with pytest.raises(KafkaException) as denied:
        producer.init_transactions(60)
    assert _code(denied.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with httpx.Client(base_url=admin_broker.url, timeout=30) as http:  # nothing was initialised
        assert http.get(f"/v1/transactions/{transactional_id}").status_code == 404
