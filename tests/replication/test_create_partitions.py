"""Adding partitions on a three-broker cluster: asked of a broker that is not the
controller (forwarded, as every admin change), the new partitions get replicas, every
broker sees them led and in sync, and acks=all records written to one through any
broker are read back through any other."""

from __future__ import annotations

import pytest

from .support import Cluster

pytestmark = pytest.mark.integration


def _controller(cluster: Cluster) -> int:
    doc = cluster.get(cluster.live()[0], "/v3/clusters").json()["data"][0]
    return int(doc["controller"]["related"].rstrip("/").rsplit("/", 1)[1])


@pytest.mark.timeout(300)
def test_new_partitions_are_replicated_led_and_served_by_every_broker(steady_cluster: Cluster, unique) -> None:
    cluster = steady_cluster
    topic = cluster.make_topic(unique("grow"), 1, 2, {"min.insync.replicas": "2"})
    controller = _controller(cluster)
    asked = next(b for b in cluster.live() if b.broker_id != controller)
    rest = asked.rest
    resp = rest.http.patch(rest.v3(f"/topics/{topic}"), json={"partitions_count": 3})
    assert resp.status_code == 200 and resp.json()["partitions_count"] == 3, resp.text

    cluster.wait_healthy(topic, "after adding partitions")
    views = {b.broker_id: cluster.partitions(topic, b) for b in cluster.live()}
    assert all(sorted(v) == [0, 1, 2] for v in views.values()), views
    for part in views[controller].values():
        assert len(cluster.replica_ids(part)) == 2, part

    writer, reader = cluster.live()[0], cluster.live()[-1]
    for p in (1, 2):
        written = cluster.produce(writer, topic, p, [f"p{p}-a", f"p{p}-b"], acks="all")
        assert written.status_code == 200, f"produce to {topic}-{p}: {written.text}"
        assert cluster.read(topic, p, 2, reader) == [(0, f"p{p}-a"), (1, f"p{p}-b")]
