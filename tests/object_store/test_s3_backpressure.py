"""Backpressure at ``local.retention.bytes`` while the object store is down.

On an object-store root the hot log is a buffer in front of the store: while the store
is unreachable a partition's leader acknowledges produce from the hot log until the
bytes not yet tiered pass the topic's ``local.retention.bytes`` (-2: ``retention.bytes``;
-1: no limit), then refuses every producer's append with KAFKA_STORAGE_ERROR (retriable;
REST 503, ``error_code`` 50307), writing nothing. Once the store answers again the
tierer catches up and produce is accepted again; the table ends with every acknowledged
record once and no refused one. A local root keeps taking records whatever its backlog.
"""

from __future__ import annotations

import socket

import pytest
from deltalake import DeltaTable
from kafka import KafkaProducer
from kafka.errors import KafkaStorageError, NotLeaderForPartitionError

from tests.conftest import free_port
from tests.integration.support import TIER_DEADLINE_S, wait_until
from tests.object_store.conftest import Bucket, table_rows, wait_table
from tests.object_store.fault_proxy import FaultProxy

pytestmark = [pytest.mark.integration]

#: The topic's local.retention.bytes, and each record's value size: the hot log takes
#: at most LIMIT // VALUE_BYTES + 1 records before it refuses.
LIMIT = 16 * 1024
VALUE_BYTES = 2048


def _value(label: str) -> bytes:
    return label.encode().ljust(VALUE_BYTES, b".")


def _rest_produce(broker, topic: str, value: bytes):
    return broker.rest.produce_binary(topic, [{"value": value}], partition=0, acks="all")


def _acked(broker, topic: str, label: str) -> tuple[tuple[int, int], bytes]:
    value = _value(label)
    resp = _rest_produce(broker, topic, value)
    assert resp.status_code == 200, resp.text
    return (0, resp.json()["offsets"][0]["offset"]), value


def _wait_port(port: int) -> None:
    def opened() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return True
        except OSError:
            return False
    wait_until(opened, f"the Kafka listener on port {port}", 60.0, 0.1)


def test_produce_is_refused_past_local_retention_bytes_while_the_store_is_down_then_accepted_again(
        bucket: Bucket, s3_broker_factory, proxy: FaultProxy) -> None:
    kafka_port = free_port()
    broker = s3_broker_factory(bucket.uri("backpressure"), env={
        "AWS_ENDPOINT_URL": proxy.endpoint,
        "LAKETAIL_LISTENERS": f"KAFKA://127.0.0.1:{kafka_port}",
        "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "KAFKA:PLAINTEXT",
    })
    _wait_port(kafka_port)
    topic = "orders"
    resp = broker.rest.create_topic(topic, 1, configs={"table.flush.interval.ms": "100",
                                                       "local.retention.bytes": str(LIMIT)})
    assert resp.status_code in (200, 201), resp.text
    uri = broker.table_uri(topic)
    acked = dict(_acked(broker, topic, f"before-{i}") for i in range(2))
    wait_table(uri, acked)

    proxy.mode = "down"
    version = DeltaTable(uri).version()
    refused = None
    during = 0
    for i in range(LIMIT // VALUE_BYTES + 2):  # the hot log takes at most LIMIT // VALUE_BYTES + 1 of them
        value = _value(f"during-{i}")
        resp = _rest_produce(broker, topic, value)
        if resp.status_code != 200:
            refused = resp
            break
        acked[(0, resp.json()["offsets"][0]["offset"])] = value
        during += 1
    assert refused is not None, f"{during} records of {VALUE_BYTES} bytes acknowledged past {LIMIT} bytes"
    assert during >= 2, "acknowledgements stopped before the hot log held local.retention.bytes"
    assert refused.status_code == 503, refused.text
    assert refused.json()["error_code"] == 50307, refused.text
    assert refused.json()["message"].startswith("KAFKA_STORAGE_ERROR: "), refused.text

    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{kafka_port}", acks="all", retries=0,
                             request_timeout_ms=30_000)
    try:
        with pytest.raises(KafkaStorageError):  # the Kafka protocol's produce is refused the same way
            producer.send(topic, value=_value("kafka-refused"), partition=0).get(timeout=60)
        # Produce v3 predates KAFKA_STORAGE_ERROR: NOT_LEADER_OR_FOLLOWER, as Kafka down-converts it
        old = KafkaProducer(bootstrap_servers=f"127.0.0.1:{kafka_port}", acks="all", retries=0,
                            api_version=(0, 11, 0), request_timeout_ms=30_000)
        try:
            with pytest.raises(NotLeaderForPartitionError):
                old.send(topic, value=_value("v3-refused"), partition=0).get(timeout=60)
        finally:
            old.close(timeout=10)
        assert broker.rest.offsets(topic, 0)[1] == len(acked), "a refused record was written"
        assert DeltaTable(uri).version() == version, "a commit reached the bucket during the outage"

        proxy.mode = "pass"
        back = wait_until(lambda: (lambda r: r if r.status_code == 200 else None)(
            _rest_produce(broker, topic, _value("after-rest"))),
            "produce to be accepted again once the store answers", TIER_DEADLINE_S, 0.5)
        acked[(0, back.json()["offsets"][0]["offset"])] = _value("after-rest")
        meta = producer.send(topic, value=_value("after-kafka"), partition=0).get(timeout=60)
        acked[(0, meta.offset)] = _value("after-kafka")
    finally:
        producer.close(timeout=10)
    wait_table(uri, acked)  # every acknowledged record once, no refused one
    output = broker.output()
    assert output.count(f"{topic}-0: refusing produce (KAFKA_STORAGE_ERROR)") == 1, output  # once, not per request
    assert f"{topic}-0: accepting produce again" in output, output
    assert broker.rest.offsets(topic, 0)[1] == len(acked)


def test_a_local_root_takes_every_record_whatever_its_backlog(broker, make_topic) -> None:
    """The same limit on a local root, with nothing tiered meanwhile (a long flush
    interval): every record is acknowledged, as before backpressure existed."""
    topic = make_topic(1, configs={"table.flush.interval.ms": "600000", "local.retention.bytes": str(LIMIT)})
    count = 2 * (LIMIT // VALUE_BYTES + 2)
    offsets = [_acked(broker, topic, f"local-{i}")[0][1] for i in range(count)]
    assert offsets == list(range(count))
    assert table_rows(str(broker.table_path(topic))) == {}, "records were tiered: the backlog never passed the limit"
