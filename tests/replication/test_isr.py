"""The ISR shrinks when a follower dies, and min.insync.replicas is enforced.

Replication factor 3, min.insync.replicas 2: a killed follower leaves the ISR (in the
partition metadata of every live broker and in the ``_system/replicas`` Delta table)
and acks=all goes on with two replicas; once a second follower is killed acks=all is
refused with NOT_ENOUGH_REPLICAS (nothing written) while acks=1 still succeeds. Every
acknowledged record is then read back at its offset, and the refused one is absent.
"""

from __future__ import annotations

import pytest

from .history import History, check, describe
from .support import NOT_ENOUGH_REPLICAS, Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def _produce_ok(cluster: Cluster, history: History, via, topic: str, values: list[str], acks: str) -> None:
    history.invoke(0, values)
    resp = cluster.produce(via, topic, 0, values, acks=acks)
    assert resp.status_code == 200, f"acks={acks} via {via!r}: {resp.status_code} {resp.text}"
    for value, entry in zip(values, resp.json()["offsets"]):
        history.ok(value, entry["partition"], entry["offset"])


def _wait_isr_rows(cluster: Cluster, topic: str, expected: dict[int, bool]) -> None:
    """Until ``_system/replicas`` holds ``{broker: in_isr}`` for partition 0."""

    def rows_match() -> bool:
        rows = {b: row["in_isr"] for (p, b), row in cluster.replicas_table(topic).items() if p == 0}
        assert rows == expected, f"in_isr per broker: {rows}"
        return True

    wait_until(rows_match, f"_system/replicas to hold in_isr {expected} for {topic}-0")


@pytest.mark.timeout(300)
def test_a_killed_follower_leaves_the_isr_and_a_second_one_stops_acks_all(cluster, unique):
    topic = cluster.make_topic(unique("isr"), 1, 3, {"min.insync.replicas": "2"})
    part = cluster.partitions(topic)[0]
    leader = part["leader"]
    first, second = [b for b in cluster.replica_ids(part) if b != leader]
    history = History()
    _produce_ok(cluster, history, cluster[first], topic, ["all-three-0", "all-three-1"], "all")
    _wait_isr_rows(cluster, topic, {0: True, 1: True, 2: True})

    cluster[first].kill9()
    cluster.wait_view(topic, 0, lambda p: cluster.in_sync(p) == {leader, second} and p["leader"] == leader,
                      f"broker {first} out of the ISR, {leader} still leading")
    replicas = cluster.replica_ids(cluster.partitions(topic)[0])
    assert first in replicas, f"the dead broker must stay a replica, only out of the ISR: {replicas}"
    _wait_isr_rows(cluster, topic, {leader: True, second: True, first: False})
    rows = cluster.replicas_table(topic)
    assert rows[(0, leader)]["role"] == "leader" and rows[(0, second)]["role"] == "follower", rows
    _produce_ok(cluster, history, cluster[second], topic, ["two-0", "two-1", "two-2"], "all")
    _produce_ok(cluster, history, cluster[leader], topic, ["two-3"], "all")

    cluster[second].kill9()
    cluster.wait_view(topic, 0, lambda p: cluster.in_sync(p) == {leader}, f"only {leader} in the ISR")
    history.invoke(0, ["refused"])
    resp = cluster.produce(cluster[leader], topic, 0, ["refused"], acks="all")
    assert resp.status_code == 503, f"acks=all with an ISR of one: {resp.status_code} {resp.text}"
    body = resp.json()
    assert body["error_code"] == NOT_ENOUGH_REPLICAS and body["message"].startswith("NOT_ENOUGH_REPLICAS"), body
    history.failed(["refused"], "NOT_ENOUGH_REPLICAS")
    _produce_ok(cluster, history, cluster[leader], topic, ["one-0", "one-1"], "1")
    _wait_isr_rows(cluster, topic, {leader: True, second: False, first: False})

    logs, ends = cluster.read_all(topic, [0], cluster[leader])
    problems = check(history, logs, ends)
    assert not problems, describe(problems, history)
    assert ends == {0: 8}, ends
