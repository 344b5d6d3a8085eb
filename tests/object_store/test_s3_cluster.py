"""Two brokers on one bucket, each with its own local working directory and hot logs (no
shared file system): they form one cluster through the ``_system`` tables in the bucket,
replicate a partition, and when its leader is killed the other leads it and serves every
acknowledged record."""

from __future__ import annotations

import base64

import httpx
import pytest
from deltalake import DeltaTable

from tests.conftest import BINARY_V2, V2
from tests.integration.support import TIER_DEADLINE_S, wait_until
from tests.object_store.conftest import Bucket, local_s3_folders

pytestmark = [pytest.mark.integration, pytest.mark.fault]

#: Kafka's session timeout (9 s), not the replication tests' 3 s: every controller decision
#: is a Delta commit to the S3 server, which a loaded machine slows past 3 s at times.
CLUSTER_ENV = {
    "LAKETAIL_OFFSETS_TOPIC_NUM_PARTITIONS": "2",
    "LAKETAIL_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "2",
    "LAKETAIL_OFFSETS_TOPIC_REPLICATION_FACTOR": "2",
    "LAKETAIL_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "2",
}
#: Failure bound for membership, ISR and elections on a loaded machine (not a speed claim).
SETTLE_S = 90.0


def _partition(url: str, topic: str) -> dict:
    resp = httpx.get(f"{url}/topics/{topic}/partitions", headers={"Accept": V2}, timeout=30.0)
    assert resp.status_code == 200, resp.text
    return resp.json()[0]


def test_two_brokers_on_one_bucket_replicate_and_fail_over(bucket: Bucket, s3_broker_factory) -> None:
    root = bucket.uri("cluster-b")
    brokers = [s3_broker_factory(root, env=CLUSTER_ENV, broker_id=i) for i in range(2)]

    def members(url: str) -> list[int]:
        resp = httpx.get(f"{url}/brokers", headers={"Accept": V2}, timeout=30.0)
        assert resp.status_code == 200, resp.text
        return sorted(resp.json()["brokers"])

    wait_until(lambda: all(members(b.url) == [0, 1] for b in brokers), "both brokers to see both", SETTLE_S)

    topic = "payments"
    resp = brokers[0].rest.create_topic(topic, 1, 2, {"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text

    def in_sync() -> dict | None:
        state = _partition(brokers[0].url, topic)
        return state if sorted(r["broker"] for r in state["replicas"] if r["in_sync"]) == [0, 1] else None

    leader_id = wait_until(in_sync, f"{topic}-0 led and in sync on both", SETTLE_S)["leader"]
    leader, follower = brokers[leader_id], brokers[1 - leader_id]

    values = [f"payment-{i}" for i in range(20)]
    for chunk in (values[:10], values[10:]):
        resp = httpx.post(f"{leader.url}/topics/{topic}/partitions/0", params={"acks": "all"}, timeout=60.0,
                          json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in chunk]},
                          headers={"Content-Type": BINARY_V2, "Accept": V2})
        assert resp.status_code == 200, resp.text
        assert all(o.get("error_code") is None for o in resp.json()["offsets"]), resp.text
    table_uri = f"{root}/topics/{topic}"
    wait_until(lambda: DeltaTable(table_uri).to_pyarrow_table(columns=["offset"]).num_rows == len(values),
               f"{len(values)} records in {table_uri}", TIER_DEADLINE_S, 0.2)
    for b in brokers:  # each replica on its own host's disk
        assert (b.run_dir / "laketail-logs" / f"broker-{b.broker_id}" / f"{topic}-0").is_dir()

    leader.kill9()
    wait_until(lambda: _partition(follower.url, topic)["leader"] == follower.broker_id,
               f"broker {follower.broker_id} to lead {topic}-0", SETTLE_S)
    fetched = [base64.b64decode(e["value"]).decode() for e in follower.rest.fetch_range(topic, 0, 0, len(values))]
    assert fetched == values
    assert local_s3_folders(*(b.run_dir for b in brokers), *(b.data_dir for b in brokers)) == []
