"""Group membership on a real broker: REST members share partitions (disjoint,
covering, extras idle), a silent member is removed and its partitions move, and a
commit from a stale generation is refused.

Members here are v2 consumer instances (the broker heartbeats for them) and /v1
members (the test heartbeats for them, or stops to play dead).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from integration.support import wait_until

from .support import V1Member, V2Consumer, committed_v1, describe_v1, error_of, unb64, unique

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("members,partitions", [(2, 3), (5, 4)])
def test_rest_members_share_partitions(groups_broker: Any, make_topic: Any, members: int, partitions: int) -> None:
    topic = make_topic(partitions, broker=groups_broker)
    group = unique("share")
    consumers = [
        V2Consumer(groups_broker.url, group, f"member-{i}", **{"auto.offset.reset": "earliest"})
        for i in range(members)
    ]
    for consumer in consumers:
        assert consumer.subscribe([topic]).status_code == 204
    everything = [(topic, p) for p in range(partitions)]

    def settled() -> list[list[tuple[str, int]]] | None:
        described = describe_v1(groups_broker.url, group)
        if described["state"] != "Stable" or len(described["members"]) != members:
            return None
        held = [c.assignments() for c in consumers]
        by_member = sorted(sorted((a["topic"], a["partition"]) for a in m["assignment"]) for m in described["members"])
        if sorted(held) != by_member:  # every instance has synced the current generation
            return None
        return held

    held = wait_until(settled, f"{members} members to settle on {partitions} partitions")
    flat = sorted(tp for tps in held for tp in tps)
    assert flat == everything, "partitions must be covered exactly once (disjoint and covering)"
    assert sum(1 for tps in held if not tps) == max(members - partitions, 0), "extra members stay idle"

    # Each member reads exactly the partitions it holds.
    for p in range(partitions):
        resp = groups_broker.rest.produce_binary(topic, [{"value": b"p%d" % p}], partition=p)
        assert resp.status_code == 200, resp.text
    got: dict[str, list[dict]] = {c.instance_id: [] for c in consumers}

    def everyone_read() -> bool:
        for consumer in consumers:
            got[consumer.instance_id].extend(consumer.records(timeout_ms=100))
        return sum(len(v) for v in got.values()) >= partitions

    wait_until(everyone_read, "every partition's record to be read by its member")
    for consumer, tps in zip(consumers, held):
        assert sorted((topic, r["partition"]) for r in got[consumer.instance_id]) == tps
        assert all(unb64(r["value"]) == b"p%d" % r["partition"] for r in got[consumer.instance_id])
    for consumer in consumers:
        assert consumer.delete().status_code == 204
        consumer.close()
    assert describe_v1(groups_broker.url, group)["state"] == "Empty"


def test_a_silent_member_is_removed_and_its_partitions_move(groups_broker: Any, make_topic: Any) -> None:
    topic = make_topic(4, broker=groups_broker)
    group = unique("silent")
    alive = V1Member(groups_broker.url, group, [topic], "alive", session_timeout_ms=1000)
    silent = V1Member(groups_broker.url, group, [topic], "silent", session_timeout_ms=1000)
    alive.join()
    joining = threading.Thread(target=silent.join)
    joining.start()
    wait_until(lambda: alive.heartbeat().status_code == 409, "the first member to be told to rejoin")
    alive.join()
    joining.join()
    assert alive.generation_id == silent.generation_id
    mine, theirs = alive.sync(), silent.sync()
    assert sorted(mine + theirs) == [(topic, p) for p in range(4)] and mine and theirs

    # The silent member stops heartbeating; the other keeps going and rejoins when told.
    def moved() -> bool:
        resp = alive.heartbeat()
        if resp.status_code == 200:
            return False
        assert error_of(resp) == (409, 40905), resp.text
        alive.join()
        return len(alive.sync()) == 4

    wait_until(moved, "the silent member's partitions to move to the live one")
    described = describe_v1(groups_broker.url, group)
    assert [m["member_id"] for m in described["members"]] == [alive.member_id]
    assert error_of(silent.heartbeat()) == (404, 40405)
    assert alive.http.post(f"/v1/groups/{group}/leave", json={"member_id": alive.member_id}).status_code == 204
    assert describe_v1(groups_broker.url, group)["state"] == "Empty"
    alive.close()
    silent.close()


def test_a_commit_from_a_stale_generation_is_rejected(groups_broker: Any, make_topic: Any) -> None:
    topic = make_topic(2, broker=groups_broker)
    group = unique("stale")
    first = V1Member(groups_broker.url, group, [topic], "first", session_timeout_ms=5000)
    second = V1Member(groups_broker.url, group, [topic], "second", session_timeout_ms=5000)
    first.join()
    first.sync()
    old_generation = first.generation_id
    assert first.commit({(topic, 0): 1}).status_code == 200

    joining = threading.Thread(target=second.join)
    joining.start()
    wait_until(lambda: first.heartbeat().status_code == 409, "the first member to be told to rejoin")
    first.join()
    joining.join()
    assert first.generation_id == old_generation + 1

    stale = first.commit({(topic, 0): 2}, generation_id=old_generation)
    assert error_of(stale) == (409, 40904)
    assert stale.json()["message"].startswith("ILLEGAL_GENERATION")
    assert committed_v1(groups_broker.url, group, [(topic, 0)]) == {(topic, 0): 1}
    nobody = V1Member(groups_broker.url, group, [topic])
    nobody.member_id, nobody.generation_id = "nobody", first.generation_id
    assert error_of(nobody.commit({(topic, 0): 2})) == (404, 40405)
    standalone = nobody.commit({(topic, 0): 2}, generation_id=-1)
    assert error_of(standalone) == (404, 40405), "a group with members takes no standalone commit"

    first.sync()
    second.sync()
    assert first.commit({(topic, 0): 2}).status_code == 200
    assert committed_v1(groups_broker.url, group, [(topic, 0), (topic, 1)]) == {(topic, 0): 2, (topic, 1): -1}
    for member in (first, second, nobody):
        member.close()


def test_v1_group_listing(groups_broker: Any, make_topic: Any) -> None:
    topic = make_topic(1, broker=groups_broker)
    group = unique("listing")
    member = V1Member(groups_broker.url, group, [topic], "lister", session_timeout_ms=5000)
    joined = member.join()
    assert joined["leader_id"] == member.member_id and joined["members"] == [member.member_id]
    assert joined["protocol"] == "range"
    member.sync()
    listed = {g["group_id"]: g for g in member.http.get("/v1/groups").json()["groups"]}
    assert listed[group] == {"group_id": group, "state": "Stable", "protocol": "range", "members": 1}
    described = describe_v1(groups_broker.url, group)
    assert described["members"] == [{
        "member_id": member.member_id, "client_id": "lister", "client_host": "127.0.0.1",
        "assignment": [{"topic": topic, "partition": 0}],
    }]
    assert describe_v1(groups_broker.url, unique("nobody-knows"))["state"] == "Dead"
    member.close()
