"""Unclean leader election: off, a partition whose ISR is all dead stays offline; on,
an out-of-sync replica takes over.

Both tests set up the same history on a topic with replicas {L, F} (the third broker X
is no replica): records acknowledged while both were in sync; F frozen (SIGSTOP) until
it leaves the ISR; records acknowledged by L alone; then L killed -9 and F resumed.

* unclean.leader.election.enable=false: with F alive but out of sync, the partition
  must stay offline -- leader -1 on every live broker and LEADER_NOT_AVAILABLE for
  produce -- as long as we look (a few session timeouts, checked over and over);
  restarting L makes it lead again with every acknowledged record.
* unclean.leader.election.enable=true (set through the v3 configs endpoint): F
  becomes leader, keeping what was acknowledged while it was in sync; L, restarted,
  gives up its divergent suffix and follows, and serves F's log when it leads again.
"""

from __future__ import annotations

import itertools
import time

import pytest

from .history import History, check, describe
from .support import LEADER_NOT_AVAILABLE, SESSION_TIMEOUT_MS, Cluster, error_code, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

#: How long the offline partition is watched: a few session timeouts, so that every
#: broker has declared L dead and F alive again several times over.
OFFLINE_WATCH_S = 3 * SESSION_TIMEOUT_MS / 1000


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
def test_without_unclean_election_a_partition_with_a_dead_isr_stays_offline(cluster, unique):
    topic = cluster.make_topic(unique("clean"), 1, 2, {"unclean.leader.election.enable": "false"})
    history = History()
    leader, follower, third = _leave_only_the_leader_in_sync(cluster, topic, history)

    cluster[leader].kill9()
    cluster[follower].resume()
    cluster.wait_members({follower, third})
    cluster.wait_view(topic, 0, lambda p: p["leader"] == -1, "offline once its only ISR member died")

    refused = 0
    deadline = time.monotonic() + OFFLINE_WATCH_S
    while time.monotonic() < deadline:
        for b in cluster.live():
            state = cluster.partitions(topic, b)[0]
            assert state["leader"] == -1, (
                f"broker {b.broker_id} reports leader {state['leader']} for {topic}-0 whose ISR {{{leader}}} "
                f"is dead (unclean election is off); state: {state}"
            )
            value = f"offline-{refused}"
            history.invoke(0, [value])
            resp = cluster.produce(b, topic, 0, [value], acks="1")
            assert resp.status_code == 503 and error_code(resp) == LEADER_NOT_AVAILABLE, (
                f"produce via broker {b.broker_id} to the offline {topic}-0: {resp.status_code} {resp.text}"
            )
            assert resp.json()["message"].startswith("LEADER_NOT_AVAILABLE"), resp.text
            history.failed([value], "LEADER_NOT_AVAILABLE while offline")
            refused += 1
        time.sleep(0.5)

    def offline_rows() -> bool:
        roles = {b: row["role"] for (_, b), row in cluster.replicas_table(topic).items()}
        assert roles == {leader: "offline", follower: "offline"}, f"roles: {roles}"
        return True

    wait_until(offline_rows, f"_system/replicas to show the replicas of {topic}-0 offline")

    cluster[leader].restart()
    cluster.wait_view(topic, 0, lambda p: p["leader"] == leader, f"broker {leader} leading again")
    _produce_ok(cluster, history, cluster[third], topic, ["after-0", "after-1"], acks="1")
    cluster.wait_healthy(topic, f"with broker {follower} caught up")
    logs, ends = cluster.read_all(topic, [0], cluster[follower])
    problems = check(history, logs, ends)
    assert not problems, describe(problems, history)
    assert ends == {0: 10}, ends


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
