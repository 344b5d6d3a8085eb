"""Three brokers on one bucket, each with its own local folder (three hosts, no shared
file system): one cluster, whose coordinators (on the controller) keep a group's
committed offsets, whose console sees all three, and which survives a kill -9 of the
controller: another broker takes over, its coordinators load the offsets again from the
internal topic, and every acknowledged record is served."""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.conftest import V2
from tests.console.support import commit, committed
from tests.integration.support import wait_until
from tests.object_store.conftest import Bucket, local_s3_folders
from tests.object_store.test_s3_cluster import CLUSTER_ENV, SETTLE_S

pytestmark = [pytest.mark.integration, pytest.mark.fault]

BROKERS = 3


def _overview(url: str) -> dict:
    resp = httpx.get(f"{url}/v1/console/overview", timeout=30.0)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_three_brokers_on_one_bucket_keep_offsets_and_the_console_across_a_controller_kill(
        bucket: Bucket, s3_broker_factory) -> None:
    root = bucket.uri("cluster-c")
    env = CLUSTER_ENV | {"LAKETAIL_OFFSETS_TOPIC_REPLICATION_FACTOR": "3"}
    brokers = [s3_broker_factory(root, env=env, broker_id=i) for i in range(BROKERS)]

    def alive(url: str) -> list[int]:
        return sorted(b["broker_id"] for b in _overview(url)["brokers"] if b["alive"])

    wait_until(lambda: all(alive(b.url) == list(range(BROKERS)) for b in brokers),
               "every console to show the three brokers alive", SETTLE_S)
    controllers = {b["broker_id"] for b in _overview(brokers[0].url)["brokers"] if b["controller"]}
    assert len(controllers) == 1, _overview(brokers[0].url)
    controller = brokers[controllers.pop()]
    others = [b for b in brokers if b is not controller]

    topic = "shipments"
    resp = others[0].rest.create_topic(topic, 3, 3, {"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text
    wait_until(lambda: _overview(others[1].url)["partitions"]["online"] >= 3, "the topic's partitions online",
               SETTLE_S)

    values = {p: [f"shipment-{p}-{i}" for i in range(6)] for p in range(3)}
    resp = httpx.get(f"{brokers[0].url}/topics/{topic}/partitions", headers={"Accept": V2}, timeout=30.0)
    assert resp.status_code == 200, resp.text
    leaders = {row["partition"]: row["leader"] for row in resp.json()}
    for p, vals in values.items():
        resp = brokers[leaders[p]].rest.produce_binary(topic, [{"value": v.encode()} for v in vals], partition=p,
                                                       acks="all")
        assert resp.status_code == 200, resp.text
        assert all(o.get("error_code") is None for o in resp.json()["offsets"]), resp.text

    group = "billing"
    offsets = {(topic, p): 4 for p in range(3)}
    wait_until(lambda: (commit(others[0].rest, group, offsets), True)[1], "the group's commit", SETTLE_S)
    assert committed(others[1].rest, group, topic, [0, 1, 2]) == {0: 4, 1: 4, 2: 4}

    controller.kill9()
    survivors = others

    def new_controller() -> int | None:
        found = [b["broker_id"] for b in _overview(survivors[0].url)["brokers"] if b["controller"] and b["alive"]]
        return found[0] if found and found[0] != controller.broker_id else None

    wait_until(new_controller, "a surviving broker to become the controller", SETTLE_S)
    wait_until(lambda: committed(survivors[1].rest, group, topic, [0, 1, 2]) == {0: 4, 1: 4, 2: 4},
               "the new controller's coordinators to serve the group's offsets", SETTLE_S)
    for p, vals in values.items():
        def served(p: int = p) -> list[str] | None:
            try:
                got = [base64.b64decode(e["value"]).decode()
                       for e in survivors[0].rest.fetch_range(topic, p, 0, len(values[p]))]
            except AssertionError:  # the partition's leadership is still moving
                return None
            return got or None

        assert wait_until(served, f"{topic}-{p} served by the survivors", SETTLE_S) == vals
    wait_until(lambda: alive(survivors[0].url) == sorted(b.broker_id for b in survivors),
               "the console to show the killed broker gone", SETTLE_S)
    assert local_s3_folders(*(b.run_dir for b in brokers), *(b.data_dir for b in brokers)) == []
