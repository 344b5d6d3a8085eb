"""Adding partitions to a topic: Confluent's ``PATCH /v3/clusters/{c}/topics/{t}``
``{"partitions_count": N}`` (Confluent Cloud's "Update Partition Count", 200 with the
``KafkaTopic``), ``AdminClient.create_partitions`` and ``laketail topics alter
--partitions N``. Kafka's CreatePartitions rules: only more (a count that is not larger
is INVALID_PARTITIONS, with Kafka's messages), never the internal topics; the new
partitions take produce and fetch, reach the topic's Delta table, and keyed records
go to murmur2(key) modulo the new count.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from integration.support import TIER_DEADLINE_S, wait_until

from laketail.client import AdminClient, KafkaException
from laketail.client.admin import NewPartitions
from laketail.partitioner import partition_for_key

pytestmark = pytest.mark.integration

INVALID_PARTITIONS = 40002  # Kafka's INVALID_PARTITIONS (37) as a REST 400 error code


def _patch(broker: Any, topic: str, count: Any) -> Any:
    rest = broker.rest
    return rest.http.patch(rest.v3(f"/topics/{topic}"), json={"partitions_count": count})


def _laketail(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "laketail.cli", *args], capture_output=True, timeout=120)


def test_patch_partitions_count_grows_the_topic_everywhere(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    rest = broker.rest
    assert rest.produce_binary(topic, [{"value": b"before"}], partition=1).status_code == 200

    for count, message in ((2, "Topic already has 2 partitions."),
                           (1, "Topic currently has 2 partitions, which is higher than the requested 1.")):
        refused = _patch(broker, topic, count)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error_code"] == INVALID_PARTITIONS, refused.text
        assert message in refused.json()["message"], refused.text
    assert _patch(broker, "no-such-topic-here", 3).status_code == 404
    internal = _patch(broker, "__consumer_offsets", 60)
    assert internal.status_code == 400 and "internal topic" in internal.json()["message"], internal.text
    assert rest.partition_ids(topic) == [0, 1]  # nothing changed by the refusals

    grown = _patch(broker, topic, 4)
    assert grown.status_code == 200, grown.text
    assert grown.json()["partitions_count"] == 4 and grown.json()["kind"] == "KafkaTopic"
    assert rest.http.get(rest.v3(f"/topics/{topic}")).json()["partitions_count"] == 4
    assert rest.partition_ids(topic) == [0, 1, 2, 3]
    v3_ids = [p["partition_id"] for p in rest.http.get(rest.v3(f"/topics/{topic}/partitions")).json()["data"]]
    assert v3_ids == [0, 1, 2, 3]

    # The new partitions take produce and fetch; the old ones keep their records.
    resp = rest.produce_binary(topic, [{"value": b"new"}], partition=3)
    assert resp.status_code == 200 and resp.json()["offsets"][0]["offset"] == 0, resp.text
    assert [e["offset"] for e in rest.fetch_range(topic, 3, 0, 1)] == [0]
    assert rest.offsets(topic, 1) == (0, 1)

    # Keyed records without a partition: murmur2 over the new count (Kafka's rule).
    keys = [f"key-{i}".encode() for i in range(24)]
    resp = rest.produce_binary(topic, [{"key": k, "value": b"k"} for k in keys])
    assert resp.status_code == 200, resp.text
    placed = [o["partition"] for o in resp.json()["offsets"]]
    assert placed == [partition_for_key(k, 4) for k in keys]
    assert {2, 3} & set(placed), "no key went to a new partition: the test proves nothing"

    # The topic's Delta table gets the new partitions' records.
    table = Path(broker.data_dir) / "topics" / topic

    def tiered_partitions() -> set[int]:
        return set(DeltaTable(str(table)).to_pyarrow_table(columns=["partition"]).column("partition").to_pylist())

    wait_until(lambda: {3} <= tiered_partitions(), f"{topic}-3 in the table", TIER_DEADLINE_S)


def test_admin_client_and_cli_add_partitions(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.url})
    try:
        admin.create_partitions([NewPartitions(topic, 3)], validate_only=True)[topic].result(timeout=60)
        assert broker.rest.partition_ids(topic) == [0]  # validate_only changes nothing
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=60)
        assert broker.rest.partition_ids(topic) == [0, 1, 2]
        with pytest.raises(KafkaException) as failed:
            admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=60)
        assert failed.value.args[0].name() == "INVALID_PARTITIONS", failed.value
    finally:
        admin.close()

    done = _laketail("topics", "alter", topic, "--partitions", "5", "--server", broker.url)
    assert done.returncode == 0, done.stderr
    assert f"altered topic {topic}: partitions=5" in done.stdout.decode()
    described = _laketail("topics", "describe", topic, "--server", broker.url)
    assert "partitions: 5" in described.stdout.decode(), described.stdout
    refused = _laketail("topics", "alter", topic, "--partitions", "4", "--server", broker.url)
    assert refused.returncode == 1
    assert "INVALID_PARTITIONS" in refused.stderr.decode() and "higher than the requested 4" in refused.stderr.decode()


@pytest.mark.fault
def test_added_partitions_survive_a_restart_and_a_kill9(broker_factory: Any, make_topic: Any) -> None:
    """A broker starts again after a topic grew, with the new partitions and their records."""
    own = broker_factory()
    topic = make_topic(partitions=1, broker=own)
    assert _patch(own, topic, 3).status_code == 200
    assert own.rest.produce_binary(topic, [{"value": b"in-2"}], partition=2).status_code == 200
    for crash in (False, True):
        if crash:
            own.kill9()
        else:
            own.stop()
        own.restart()
        assert own.rest.partition_ids(topic) == [0, 1, 2]
        end = own.rest.http.get(f"/topics/{topic}/partitions/2/offsets").json()["end_offset"]
        assert end == 1
