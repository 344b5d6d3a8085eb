"""Kafka requests go through the same ACLs as HTTP: a PLAINTEXT Kafka client is
``User:ANONYMOUS``, as in Kafka, and an ACL created over REST v3 applies to it."""

from __future__ import annotations

import socket
import time
import uuid

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from tests.kafka_listener.conftest import KafkaBroker
from tests.kafka_listener.test_listener import _call
from tests.kafka_listener.test_txn_admin import _describe_error_code

pytestmark = pytest.mark.integration
QUIET = {"log_level": 0}



def _deny(broker: KafkaBroker, topic: str, operation: str, permission: str = "DENY",
          resource_type: str = "TOPIC") -> None:
    resp = httpx.post(f"{broker.url}/v3/clusters/{broker.rest.cluster_id}/acls", json={
        "resource_type": resource_type, "resource_name": topic, "pattern_type": "LITERAL",
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


def test_transaction_admin_and_leader_epochs_are_authorized_as_kafka(acl_broker):
    """ListTransactions leaves out, and DescribeTransactions refuses, a transactional id
    the principal may not Describe; DescribeProducers needs Read and OffsetForLeaderEpoch
    Describe on the topic."""
    topic, txn_id = f"txa-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    assert acl_broker.rest.create_topic(topic, 1).status_code in (200, 201)
    producer = Producer({"bootstrap.servers": acl_broker.bootstrap, "transactional.id": txn_id, **QUIET})
    producer.init_transactions(30)
    with socket.create_connection(("127.0.0.1", acl_broker.kafka_port), timeout=30) as sock:
        def listed() -> set[str]:
            answer = _call(sock, 66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
            return {t.transactional_id for t in answer.transaction_states}

        def producers_code() -> int:
            answer = _call(sock, 61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
            return int(answer.topics[0].partitions[0].error_code)

        def epochs_code() -> int:
            answer = _call(sock, 23, 4, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
            return int(answer.topics[0].partitions[0].error_code)

        assert txn_id in listed() and producers_code() == 0 and epochs_code() == 0
        _deny(acl_broker, txn_id, "DESCRIBE", resource_type="TRANSACTIONAL_ID")
        _deny(acl_broker, topic, "READ")
        _deny(acl_broker, topic, "DESCRIBE")
        time.sleep(0.5)  # acl.refresh
        assert txn_id not in listed()
        assert _describe_error_code(sock, txn_id) == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert producers_code() == 29 and epochs_code() == 29  # TOPIC_AUTHORIZATION_FAILED
