"""Any broker answers metadata and forwards produce and fetch to the leader (a
replication factor above the live brokers being refused is tested on the in-process
cluster, tests/cluster/test_broker_deaths.py).

The forwarding test uses replication factor 2 on three brokers, so that one broker
holds no replica at all: a record produced through the follower and read through
that third broker crosses the cluster twice.
"""

from __future__ import annotations

import base64

import pytest

from .support import b64, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_any_broker_answers_metadata_and_forwards_produce_and_fetch(steady_cluster, unique):
    cluster = steady_cluster
    topic = cluster.make_topic(unique("forward"), 1, 2, {"min.insync.replicas": "2"})
    views = {b.broker_id: cluster.partitions(topic, b) for b in cluster.live()}
    part = views[0][0]
    assert all(v == views[0] for v in views.values()), f"the brokers disagree: {views}"
    leader = part["leader"]
    (follower,) = [b for b in cluster.replica_ids(part) if b != leader]
    (third,) = [b for b in cluster.brokers if b not in (leader, follower)]
    assert [r["broker"] for r in part["replicas"] if r["leader"]] == [leader], part

    for b in cluster.live():
        assert cluster.members_seen_by(b) == {0, 1, 2}
        single = cluster.get(b, f"/topics/{topic}/partitions/0", headers={"Accept": "application/vnd.kafka.v2+json"})
        assert single.status_code == 200 and single.json() == part, single.text
        rest = b.rest
        listed = rest.http.get(rest.v3("/brokers"))
        assert listed.status_code == 200, listed.text
        urls = {d["broker_id"]: d["url"] for d in listed.json()["data"]}
        assert urls == {i: c.url for i, c in cluster.brokers.items()}, listed.text

    values = [f"through-follower-{i}" for i in range(5)]
    resp = cluster.produce(cluster[follower], topic, 0, values, acks="all")
    assert resp.status_code == 200, f"produce through follower {follower}: {resp.status_code} {resp.text}"
    assert [e["offset"] for e in resp.json()["offsets"]] == [0, 1, 2, 3, 4], resp.text

    rest = cluster[third].rest
    resp = rest.http.post(rest.v3(f"/topics/{topic}/records"), json={
        "partition_id": 0, "value": {"type": "BINARY", "data": b64("through-third")},
    }, params={"acks": "all"})
    assert resp.status_code == 200 and resp.json()["error_code"] == 200, resp.text
    assert resp.json()["offset"] == 5, resp.text

    assert rest.offsets(topic, 0) == (0, 6)
    fetched = [(e["offset"], base64.b64decode(e["value"]).decode()) for e in rest.fetch_range(topic, 0, 0, 6)]
    assert fetched == list(enumerate(values + ["through-third"]))

    # What the leader acknowledges is readable through the broker without a replica.
    resp = cluster.produce(cluster[leader], topic, 0, ["late"], acks="all")
    assert resp.status_code == 200, resp.text

    def late() -> list:
        resp = rest.fetch(topic, 0, 6, timeout_ms=1000)
        assert resp.status_code == 200, resp.text
        return resp.json()

    got = wait_until(late, "the record produced through the leader, fetched through the third broker")
    assert [(e["offset"], base64.b64decode(e["value"]).decode()) for e in got] == [(6, "late")]
