"""Coordinator shards that follow their partitions' leadership (Kafka's
``onElection`` / ``onResignation``), on three real brokers in one process
(``tests/cluster/harness.py``): a leadership move of a ``__consumer_offsets`` partition
loads its shard on the new leader (COORDINATOR_LOAD_IN_PROGRESS until it is read to the
high watermark, then the acknowledged commits) and unloads it on the old one
(NOT_COORDINATOR), while the other brokers answer NOT_COORDINATOR throughout.

The broker's own coordinators still run on the controller (docs/architecture.md §9.1):
each broker here gets a second, leadership-placed set (an ``OffsetStore`` and a
``GroupCoordinator`` over the broker's real log, driven by
:class:`laketail.coordinator.election.ShardElections` in its replica manager's
listeners)."""

from __future__ import annotations

import asyncio

import pytest

from laketail.coordinator.election import ShardElections
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetStore
from laketail.errors import CoordinatorLoadInProgress, LaketailError, NotCoordinator
from tests.cluster.harness import HEARTBEAT_MS, SESSION_MS, Cluster, run_three
from tests.coordinator.test_shards import _groups_by_partition

PARTITIONS = 3
TP = ("t", 0)


GROUPS = _groups_by_partition()


class _Probe:
    """Asks the broker's leadership-placed store about the partition's group at the very
    moment of each election and resignation (after ShardElections acted on it)."""

    def __init__(self, broker_id: int, offsets: OffsetStore, events: list) -> None:
        self.broker_id, self.offsets, self.events = broker_id, offsets, events

    def _answer(self, partition: int) -> str:
        try:
            self.offsets.committed(GROUPS[partition], TP)
        except LaketailError as exc:
            return type(exc).__name__
        return "served"

    def on_election(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic == OFFSETS_TOPIC:
            self.events.append((self.broker_id, "elected", partition, leader_epoch, self._answer(partition)))

    def on_resignation(self, topic: str, partition: int, leader_epoch: int | None) -> None:
        if topic == OFFSETS_TOPIC:
            self.events.append((self.broker_id, "resigned", partition, leader_epoch, self._answer(partition)))


def test_a_leadership_move_loads_the_shard_on_the_new_leader_and_unloads_it_on_the_old(tmp_path):
    async def scenario(c: Cluster) -> None:
        events: list = []
        stores: dict[int, OffsetStore] = {}
        elections: list[ShardElections] = []
        for broker_id, broker in c.brokers.items():
            offsets = OffsetStore(broker, c.clock, num_partitions=PARTITIONS, replication_factor=3)
            shard_elections = ShardElections(offsets, GroupCoordinator(broker, offsets, c.clock), retry_backoff_s=0.01)
            broker.cluster.replicas.listeners += [shard_elections, _Probe(broker_id, offsets, events)]
            stores[broker_id] = offsets
            elections.append(shard_elections)
        try:
            await _moves(c, stores, events)
        finally:
            for shard_elections in elections:
                await shard_elections.close()

    async def _moves(c: Cluster, stores: dict[int, OffsetStore], events: list) -> None:
        controller = c.controller()
        await controller.create_topic("t", 1, 3)
        await controller.create_topic(OFFSETS_TOPIC, PARTITIONS, 3, {"cleanup.policy": "compact"},
                                      internal_topics_allowed=True)
        await c.until("every broker took up its part", lambda: c.converged(OFFSETS_TOPIC, PARTITIONS)
                      and c.converged("t"))
        p = 1
        group = GROUPS[p]
        old = c.registration(OFFSETS_TOPIC, p)
        old_store = stores[old.leader]
        assert (old.leader, "elected", p, old.leader_epoch, "CoordinatorLoadInProgress") in events
        await c.until("the leader loaded its shard", lambda: old_store.ownership.serves(p))
        for broker_id, store in stores.items():  # one coordinator per partition: its leader
            if broker_id != old.leader:
                with pytest.raises(NotCoordinator):
                    store.committed(group, TP)
                with pytest.raises(NotCoordinator):
                    await store.commit(group, {TP: CommittedOffset(1)})
        await old_store.commit(group, {TP: CommittedOffset(5)})  # acks=all: on every ISR member
        assert old_store.committed(group, TP).offset == 5

        # The leader stalls and loses its session: another ISR member is elected. (Internal
        # topics' leaders start on the controller, so the controller moves too.)
        c.network.isolated.add(old.leader)
        c.paused.add(old.leader)
        await c.advance(SESSION_MS + 2 * HEARTBEAT_MS)
        new = c.registration(OFFSETS_TOPIC, p)
        assert new.leader not in (old.leader, -1) and new.leader_epoch > old.leader_epoch
        new_store = stores[new.leader]
        # At its election the new leader answered the group COORDINATOR_LOAD_IN_PROGRESS ...
        assert (new.leader, "elected", p, new.leader_epoch, "CoordinatorLoadInProgress") in events
        await c.until("the new leader loaded the shard", lambda: new_store.ownership.serves(p))
        # ... and then the acknowledged commit, read back from the log.
        assert new_store.committed(group, TP).offset == 5
        await new_store.commit(group, {TP: CommittedOffset(6)})
        assert new_store.committed(group, TP).offset == 6
        assert not any(e[:3] == (old.leader, "resigned", p) for e in events)  # stalled: it knows nothing yet

        # The old leader wakes up, applies the new image and unloads the shard.
        c.paused.clear()
        await c.beat([c.brokers[old.leader]])  # it learns it is no longer the controller
        c.network.heal()
        await c.advance(HEARTBEAT_MS)
        await c.until("the old leader follows", lambda: c.converged(OFFSETS_TOPIC, PARTITIONS))
        resigned = [e for e in events if e[:3] == (old.leader, "resigned", p)]
        assert resigned and resigned[-1][3:] == (new.leader_epoch, "NotCoordinator")
        with pytest.raises(NotCoordinator):
            old_store.committed(group, TP)
        with pytest.raises(NotCoordinator):
            await old_store.commit(group, {TP: CommittedOffset(2)})
        assert new_store.committed(group, TP).offset == 6
        # Every partition's shard is served on its leader, and only there.
        for q in range(PARTITIONS):
            leader = c.registration(OFFSETS_TOPIC, q).leader
            await c.until(f"partition {q} loaded on its leader",
                          lambda store=stores[leader], q=q: store.ownership.serves(q))
            assert [b for b, store in stores.items() if store.ownership.owns(q)] == [leader]

    run_three(tmp_path, scenario)


def test_a_resignation_older_than_the_election_held_changes_nothing():
    """A stale resignation (an image older than the one that elected this broker again)
    must not unload a shard loaded at a newer epoch."""

    async def scenario() -> None:
        from laketail.coordinator.fakes import InMemoryLog

        log = InMemoryLog()
        log.add_topic("t", 1)
        log.add_topic(OFFSETS_TOPIC, PARTITIONS)
        offsets = OffsetStore(log, _clock(), num_partitions=PARTITIONS, replication_factor=1)
        shard_elections = ShardElections(offsets, GroupCoordinator(log, offsets, offsets.clock))
        shard_elections.on_election(OFFSETS_TOPIC, 0, 4)
        with pytest.raises(CoordinatorLoadInProgress):
            offsets.committed(GROUPS[0], TP)
        for _ in range(100):  # the load task's few steps (a bound on a hang, not a timing claim)
            if not shard_elections.loading():
                break
            await asyncio.sleep(0)
        assert offsets.ownership.serves(0) and not shard_elections.loading()
        shard_elections.on_resignation(OFFSETS_TOPIC, 0, 3)
        assert offsets.committed(GROUPS[0], TP) is None  # still served
        shard_elections.on_resignation(OFFSETS_TOPIC, 0, 5)
        with pytest.raises(NotCoordinator):
            offsets.committed(GROUPS[0], TP)
        await shard_elections.close()

    asyncio.run(scenario())


def _clock():
    from laketail.clock import ManualClock

    return ManualClock()
