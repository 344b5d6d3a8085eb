"""Consumer groups on a three-broker cluster: one coordinator, whichever broker is asked.

Two members of one group join through two different brokers; they must land in the same
generation with disjoint assignments that cover the topic (each broker running its own
coordinator would give each member every partition). An offset committed through one
broker is read back through another, and, after the controller (where the coordinators
run) is killed -9, through the new one, rebuilt from ``__consumer_offsets``; the new
coordinator never hands out a producer id the old one did (issue 35, finding 3).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import httpx
import pytest

from tests.replication.support import Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

QUICK_GROUPS = {"LAKETAIL_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "LAKETAIL_GROUP_MIN_SESSION_TIMEOUT_MS": "500"}


def assignment_when_stable(url: str, group: str, topic: str, name: str, stop: threading.Event,
                           out: dict) -> None:
    """A member's loop (join, sync, heartbeat; rejoin when the group rebalances) that
    publishes its generation and assignment after each sync."""
    with httpx.Client(base_url=url, timeout=120.0) as http:
        member = {"member_id": "", "generation_id": -1}
        rejoin = True
        while not stop.is_set():
            if rejoin:
                resp = http.post(f"/v1/groups/{group}/join", json={
                    "member_id": member["member_id"], "client_id": name, "topics": [topic],
                    "strategies": ["range"], "session_timeout_ms": 30_000, "rebalance_timeout_ms": 60_000,
                })
                assert resp.status_code == 200, resp.text
                member = {"member_id": resp.json()["member_id"], "generation_id": resp.json()["generation_id"]}
                sync = http.post(f"/v1/groups/{group}/sync", json=member)
                if sync.status_code != 200:
                    continue  # the group rebalanced again meanwhile
                out[name] = (dict(member), sync.json()["assignment"])
                rejoin = False
            beat = http.post(f"/v1/groups/{group}/heartbeat", json=member)
            rejoin = beat.status_code == 409
            stop.wait(0.2)


def committed(url: str, group: str, topic: str) -> int:
    resp = httpx.post(f"{url}/v1/groups/{group}/committed", timeout=60.0,
                      json={"partitions": [{"topic": topic, "partition": 0}]})
    assert resp.status_code == 200, resp.text
    return resp.json()["offsets"][0]["offset"]


def producer_id(url: str) -> int:
    """A new idempotent producer's id (``POST /v1/producers``)."""
    resp = httpx.post(f"{url}/v1/producers", json={}, timeout=60.0)
    assert resp.status_code == 200, resp.text
    return resp.json()["producer_id"]


def controller_of(cluster: Cluster) -> int:
    broker = cluster.live()[0]
    cid = cluster.get(broker, "/v3/clusters").json()["data"][0]
    return int(cid["controller"]["related"].rsplit("/", 1)[1])


@pytest.mark.timeout(600)
def test_members_joining_through_different_brokers_share_one_coordinator(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, env=QUICK_GROUPS).start()
    try:
        topic = cluster.make_topic(f"groups-{uuid.uuid4().hex[:8]}", 4, 2)
        group = f"g-{uuid.uuid4().hex[:8]}"
        controller = controller_of(cluster)
        a, b = cluster.others(controller)  # neither is the coordinators' broker
        joined: dict = {}
        stop = threading.Event()
        threads = [threading.Thread(target=assignment_when_stable, args=(x.url, group, topic, name, stop, joined))
                   for x, name in ((a, "via-a"), (b, "via-b"))]
        for t in threads:
            t.start()
        try:
            def settled():
                if len(joined) < 2 or joined["via-a"][0]["generation_id"] != joined["via-b"][0]["generation_id"]:
                    return None
                return joined["via-a"], joined["via-b"]

            (member_a, got_a), (member_b, got_b) = wait_until(settled, "both members in one generation")
            parts_a = {p["partition"] for p in got_a}
            parts_b = {p["partition"] for p in got_b}
            assert parts_a and parts_b and not parts_a & parts_b
            assert parts_a | parts_b == {0, 1, 2, 3}
        finally:
            stop.set()
            for t in threads:
                t.join()

        owner = member_a if 0 in parts_a else member_b
        resp = httpx.post(f"{a.url}/v1/groups/{group}/commit", timeout=60.0, json={
            **owner, "offsets": [{"topic": topic, "partition": 0, "offset": 7}]})
        assert resp.status_code == 200, resp.text
        assert committed(b.url, group, topic) == 7  # through another broker

        before = {producer_id(a.url) for _ in range(3)}

        cluster[controller].kill9()
        assert wait_until(lambda: controller_of(cluster) != controller, "a new controller")
        # The new controller rebuilt the group's offsets from __consumer_offsets.
        assert wait_until(lambda: committed(a.url, group, topic) == 7 or None,
                          "the committed offset through the new coordinator")
        assert committed(b.url, group, topic) == 7
        # Producer ids come from durable blocks: none handed out before is handed out again.
        after = {wait_until(lambda: producer_id(b.url), "a producer id from the new coordinator") for _ in range(3)}
        assert len(before) == 3 and len(after) == 3 and not before & after, (before, after)
    finally:
        cluster.close()
