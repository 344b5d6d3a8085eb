"""Unclean leader election with real processes: an out-of-sync replica takes over, and
the old leader, killed -9 and restarted from its files, gives up its divergent suffix.

A topic with replicas {L, F} (the third broker X is no replica): records acknowledged
while both were in sync; F frozen (SIGSTOP) until it leaves the ISR; records
acknowledged by L alone; then L killed -9 and F resumed. With
unclean.leader.election.enable=true (set through the v3 configs endpoint) F becomes
leader, keeping what was acknowledged while it was in sync; L, restarted, gives up its
divergent suffix and follows, and serves F's log when it leads again.

The same scenario, and the one with unclean election off (the partition stays
offline), run on the in-process cluster in tests/cluster/test_broker_deaths.py in
seconds; this one stays as the end-to-end proof that the truncation survives a crash.
"""

from __future__ import annotations

import itertools

import pytest

from .history import History, check, describe
from .support import Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def _produce_ok(cluster: Cluster, history: History, via, topic: str, values: list[str], acks: str = "all") -> None:
    history.invoke(0, values)
    resp = cluster.produce(via, topic, 0, values, acks=acks)
    assert resp.status_code == 200, f"acks={acks} via {via!r}: {resp.status_code} {resp.text}"
    for value, entry in zip(values, resp.json()["offsets"]):
        history.ok(value, entry["partition"], entry["offset"])


def _leave_only_the_leader_in_sync(cluster: Cluster, topic: str, history: History) -> tuple[int, int, int]:
    """Freeze the follower until it leaves the ISR, with acknowledged records before
    and after; returns (leader, follower, third broker)."""
    part = cluster.partitions(topic)[0]
    leader = part["leader"]
    (follower,) = [b for b in cluster.replica_ids(part) if b != leader]
    (third,) = [b for b in cluster.brokers if b not in (leader, follower)]
    _produce_ok(cluster, history, cluster[third], topic, [f"in-sync-{i}" for i in range(5)])

    cluster[follower].pause()
    cluster.wait_view(topic, 0, lambda p: cluster.in_sync(p) == {leader},
                      f"frozen broker {follower} out of the ISR", via=[cluster[leader]])
    _produce_ok(cluster, history, cluster[third], topic, [f"leader-only-{i}" for i in range(3)])
    return leader, follower, third


@pytest.mark.timeout(300)
def test_with_unclean_election_an_out_of_sync_replica_takes_over(cluster, unique):
    topic = cluster.make_topic(unique("unclean"), 1, 2)
    history = History()
    leader, follower, third = _leave_only_the_leader_in_sync(cluster, topic, history)
    x = cluster[third].rest
    resp = x.http.put(x.v3(f"/topics/{topic}/configs/unclean.leader.election.enable"), json={"value": "true"})
    assert resp.status_code == 204, resp.text

    cluster[leader].kill9()
    cluster[follower].resume()
    cluster.wait_view(topic, 0, lambda p: p["leader"] == follower, f"out-of-sync broker {follower} elected")
    # What L alone acknowledged is gone with an unclean election: unknown, not lost.
    history.unknown([op.value for op in history.ops() if op.value.startswith("leader-only")], "unclean")

    attempts = itertools.count()

    def produced() -> bool:
        value = f"new-{next(attempts)}"
        history.invoke(0, [value])
        resp = cluster.produce(cluster[third], topic, 0, [value], acks="1")
        if resp.status_code != 200:
            history.unknown([value], f"HTTP {resp.status_code}")
            return False
        history.ok(value, 0, resp.json()["offsets"][0]["offset"])
        return True

    wait_until(produced, f"acks=1 produce to {topic}-0 led by broker {follower}", every_s=0.5)
    _produce_ok(cluster, history, cluster[third], topic, ["new-last"], acks="1")

    cluster[leader].restart()
    cluster.wait_healthy(topic, f"with broker {leader} following {follower}")
    assert cluster.leader(topic, 0) == follower
    logs, ends = cluster.read_all(topic, [0], cluster[leader])
    problems = check(history, logs, ends)
    assert not problems, f"read through broker {leader}: " + describe(problems, history)

    # L must have given up its divergent suffix: leading again, it serves F's log.
    cluster[follower].kill9()
    cluster.wait_view(topic, 0, lambda p: p["leader"] == leader, f"broker {leader} leading again")
    logs, ends = cluster.read_all(topic, [0], cluster[third])
    problems = check(history, logs, ends)
    assert not problems, f"read from broker {leader} after it led again: " + describe(problems, history)
