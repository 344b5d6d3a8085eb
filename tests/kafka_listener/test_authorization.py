"""Kafka requests go through the same ACLs as HTTP: a PLAINTEXT Kafka client is
``User:ANONYMOUS``, as in Kafka, and an ACL created over REST v3 applies to it."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from tests.kafka_listener.conftest import KafkaBroker

pytestmark = pytest.mark.integration
QUIET = {"log_level": 0}



def _deny(broker: KafkaBroker, topic: str, operation: str, permission: str = "DENY") -> None:
    resp = httpx.post(f"{broker.url}/v3/clusters/{broker.rest.cluster_id}/acls", json={
        "resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL",
        "principal": "User:ANONYMOUS", "host": "*", "operation": operation, "permission": permission})
    assert resp.status_code == 201, resp.text


def _produce_one(broker: KafkaBroker, topic: str):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20_000, **QUIET})
    reports: list = []
    producer.produce(topic, value=b"x", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    return reports[0]


def test_a_denied_write_is_topic_authorization_failed_and_writes_nothing(acl_broker):
    allowed, denied = f"ok-{uuid.uuid4().hex[:8]}", f"no-{uuid.uuid4().hex[:8]}"
    for t in (allowed, denied):
        assert acl_broker.rest.create_topic(t, 1).status_code in (200, 201)
    _deny(acl_broker, denied, "WRITE")
    # with an ACL on the topic, "no ACL found" no longer allows Describe (Kafka's rule): grant it
    _deny(acl_broker, denied, "DESCRIBE", permission="ALLOW")
    time.sleep(0.5)  # acl.refresh: the decision cache is dropped when the bindings change
    assert _produce_one(acl_broker, allowed) is None
    err = _produce_one(acl_broker, denied)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert acl_broker.rest.offsets(denied, 0)[1] == 0
    assert acl_broker.rest.offsets(allowed, 0)[1] == 1


def test_metadata_lists_only_topics_the_principal_may_describe(acl_broker):
    seen, hidden = f"seen-{uuid.uuid4().hex[:8]}", f"hidden-{uuid.uuid4().hex[:8]}"
    for t in (seen, hidden):
        assert acl_broker.rest.create_topic(t, 1).status_code in (200, 201)
    _deny(acl_broker, hidden, "DESCRIBE")
    time.sleep(0.5)
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **QUIET})
    topics = admin.list_topics(timeout=30).topics
    assert seen in topics and hidden not in topics


def test_create_partitions_needs_alter_on_the_topic(acl_broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    topic = f"grow-{uuid.uuid4().hex[:8]}"
    assert acl_broker.rest.create_topic(topic, 1).status_code in (200, 201)
    _deny(acl_broker, topic, "ALTER")
    _deny(acl_broker, topic, "DESCRIBE", permission="ALLOW")
    time.sleep(0.5)  # acl.refresh
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **QUIET})
    with pytest.raises(KafkaException) as denied:
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(60)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == 1
