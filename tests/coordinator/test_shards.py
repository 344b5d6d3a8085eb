"""Coordinator shards load and unload one partition at a time (Kafka's
``CoordinatorRuntime``: ``onElection`` / ``onResignation``): what keeps its state in a
partition that is not run here is answered NOT_COORDINATOR, in one that is still
loading COORDINATOR_LOAD_IN_PROGRESS, and a load or a write that crosses an unload
never brings the partition's state back. On the in-memory coordinator log and a
``ManualClock``: milliseconds."""

import asyncio

import pytest

from laketail.clock import ManualClock
from laketail.coordinator.fakes import InMemoryLog, InMemoryProducerIdBlocks
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetStore, partition_for_group
from laketail.coordinator.shards import ShardOwnership
from laketail.coordinator.transactions import TransactionCoordinator
from laketail.errors import CoordinatorLoadInProgress, NotCoordinator

PARTITIONS = 3


class GatedLog(InMemoryLog):
    """An in-memory log whose reads of the gated partitions wait for :meth:`open`."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: dict[int, asyncio.Event] = {}

    def gate(self, partition: int) -> None:
        self.gates[partition] = asyncio.Event()

    def open(self, partition: int) -> None:
        self.gates.pop(partition).set()

    async def read_to_log_end(self, topic, partition):
        gate = self.gates.get(partition)
        if gate is not None:
            await gate.wait()
        async for table in super().read_to_log_end(topic, partition):
            yield table


def _groups_by_partition() -> dict[int, str]:
    """One group name per partition of a 3-partition ``__consumer_offsets``."""
    out: dict[int, str] = {}
    i = 0
    while len(out) < PARTITIONS:
        out.setdefault(partition_for_group(f"g{i}", PARTITIONS), f"g{i}")
        i += 1
    return out


def test_ownership_orders_elections_and_resignations_by_epoch() -> None:
    shards = ShardOwnership("__consumer_offsets")
    shards.check(0, "group 'g'")  # a coordinator never elected anything runs everything
    assert shards.elect(0, 5)
    with pytest.raises(CoordinatorLoadInProgress):
        shards.check(0, "group 'g'")
    with pytest.raises(NotCoordinator):
        shards.check(1, "group 'h'")
    assert not shards.elect(0, 4)  # an older election changes nothing
    assert shards.activate(0, 5)
    shards.check(0, "group 'g'")
    assert not shards.resign(0, 4)  # an older resignation is ignored
    assert shards.serves(0)
    assert shards.resign(0, 5)
    assert not shards.owns(0)
    assert not shards.activate(0, 5)  # a load finishing after the resignation is dropped


def test_offset_shards_load_and_unload_one_partition_at_a_time() -> None:
    async def scenario() -> None:
        log = GatedLog()
        log.add_topic("t", 1)
        store = OffsetStore(log, ManualClock(), num_partitions=PARTITIONS, replication_factor=1)
        groups = _groups_by_partition()
        for p, group in groups.items():
            await store.commit(group, {("t", 0): CommittedOffset(10 + p)})
        assert log.list_topics() == [OFFSETS_TOPIC, "t"]

        # A new coordinator: partition 0 elected and loading, 1 loaded, 2 not run here.
        fresh = OffsetStore(log, ManualClock(), num_partitions=PARTITIONS, replication_factor=1)
        log.gate(0)
        loading = asyncio.create_task(fresh.load_partition(0, epoch=3))
        await fresh.load_partition(1, epoch=3)
        await asyncio.sleep(0)
        with pytest.raises(CoordinatorLoadInProgress):
            fresh.committed(groups[0], ("t", 0))
        with pytest.raises(CoordinatorLoadInProgress):
            await fresh.commit(groups[0], {("t", 0): CommittedOffset(99)})
        assert fresh.committed(groups[1], ("t", 0)).offset == 11
        with pytest.raises(NotCoordinator):
            fresh.committed(groups[2], ("t", 0))
        with pytest.raises(NotCoordinator):
            await fresh.commit(groups[2], {("t", 0): CommittedOffset(99)})
        assert fresh.groups() == [groups[1]]

        log.open(0)
        await loading
        assert fresh.committed(groups[0], ("t", 0)).offset == 10
        assert sorted(fresh.groups()) == sorted([groups[0], groups[1]])

        fresh.unload_partition(1, epoch=3)
        with pytest.raises(NotCoordinator):
            fresh.committed(groups[1], ("t", 0))
        assert fresh.committed(groups[0], ("t", 0)).offset == 10  # the others stay

    asyncio.run(scenario())


def test_a_load_that_finishes_after_its_unload_is_dropped() -> None:
    async def scenario() -> None:
        log = GatedLog()
        log.add_topic("t", 1)
        group = _groups_by_partition()[0]
        await OffsetStore(log, ManualClock(), num_partitions=PARTITIONS, replication_factor=1).commit(
            group, {("t", 0): CommittedOffset(7)})
        store = OffsetStore(log, ManualClock(), num_partitions=PARTITIONS, replication_factor=1)
        log.gate(0)
        loading = asyncio.create_task(store.load_partition(0, epoch=1))
        await asyncio.sleep(0)
        store.unload_partition(0, epoch=1)  # resigned while its records were being read
        log.open(0)
        await loading
        with pytest.raises(NotCoordinator):
            store.committed(group, ("t", 0))
        assert store.groups() == []

        store.unload_partition(0, epoch=1)
        await store.load_partition(0, epoch=2)
        store.unload_partition(0, epoch=1)  # an older resignation: ignored
        assert store.committed(group, ("t", 0)).offset == 7

    asyncio.run(scenario())


def test_a_commit_acknowledged_across_an_unload_is_the_next_loads() -> None:
    """A commit whose append completes after its partition was unloaded and loaded again
    is not replayed over the new shard (its load read it, and may have read newer)."""

    async def scenario() -> None:
        log = InMemoryLog()
        log.add_topic("t", 1)
        group = _groups_by_partition()[0]
        store = OffsetStore(log, ManualClock(), num_partitions=PARTITIONS, replication_factor=1)
        await store.load(epoch=1)
        await store.commit(group, {("t", 0): CommittedOffset(1)})
        appended = asyncio.Event()
        release = asyncio.Event()
        produce = log.produce

        async def slow_produce(*args, **kwargs):
            result = await produce(*args, **kwargs)
            appended.set()
            await release.wait()
            return result

        log.produce = slow_produce  # type: ignore[method-assign]
        committing = asyncio.create_task(store.commit(group, {("t", 0): CommittedOffset(2)}))
        await appended.wait()
        store.unload_partition(0, epoch=1)
        log.produce = produce  # type: ignore[method-assign]
        await store.load_partition(0, epoch=2)  # reads 2
        await store.commit(group, {("t", 0): CommittedOffset(3)})
        release.set()
        await committing
        assert store.committed(group, ("t", 0)).offset == 3  # not rolled back to 2

    asyncio.run(scenario())


def test_unloading_a_partition_resigns_its_groups_only() -> None:
    async def scenario() -> None:
        log = InMemoryLog()
        log.add_topic("t", 2)
        clock = ManualClock()
        offsets = OffsetStore(log, clock, num_partitions=PARTITIONS, replication_factor=1)
        await offsets.load(epoch=1)
        groups = GroupCoordinator(log, offsets, clock, min_session_timeout_ms=100, initial_rebalance_delay_ms=0)
        by_partition = _groups_by_partition()
        first = await groups.join(by_partition[0], "", topics=["t"], session_timeout_ms=1000)
        await groups.join(by_partition[1], "", topics=["t"], session_timeout_ms=1000)
        # A second member's join waits for the first member to rejoin.
        waiting = asyncio.create_task(groups.join(by_partition[0], "", topics=["t"], session_timeout_ms=1000))
        await asyncio.sleep(0)
        assert not waiting.done()

        groups.unload_partition(0)
        offsets.unload_partition(0)
        with pytest.raises(NotCoordinator):
            await waiting
        with pytest.raises(NotCoordinator):
            groups.heartbeat(by_partition[0], first.generation_id, first.member_id)
        with pytest.raises(NotCoordinator):
            await groups.join(by_partition[0], "", topics=["t"], session_timeout_ms=1000)
        assert groups.group(by_partition[0]) is None
        assert groups.group(by_partition[1]) is not None
        assert len(groups.timer) == 1  # only the other group's member's session is left

    asyncio.run(scenario())


def test_transaction_shards_load_and_unload_one_partition_at_a_time() -> None:
    async def scenario() -> None:
        log = InMemoryLog()
        log.add_topic("t", 1)
        clock = ManualClock()
        blocks = InMemoryProducerIdBlocks()

        def coordinator() -> TransactionCoordinator:
            offsets = OffsetStore(log, clock, num_partitions=1, replication_factor=1)
            return TransactionCoordinator(log, log, GroupCoordinator(log, offsets, clock), offsets, clock,
                                          producer_ids=blocks, num_partitions=PARTITIONS, replication_factor=1)

        ids = {}
        i = 0
        while len(ids) < 2:
            ids.setdefault(partition_for_group(f"app{i}", PARTITIONS), f"app{i}")
            i += 1
        (p_a, app_a), (p_b, app_b) = sorted(ids.items())
        first = coordinator()
        pid_a, _ = await first.init_producer_id(app_a)
        pid_b, _ = await first.init_producer_id(app_b)
        await first.add_partitions(app_a, pid_a, 0, [("t", 0)])

        second = coordinator()
        await second.load_partition(p_a, epoch=1)
        assert second.describe(app_a).state == "Ongoing"
        assert second.transactional_id_of(pid_a) == app_a
        with pytest.raises(NotCoordinator):
            second.describe(app_b)
        with pytest.raises(NotCoordinator):
            await second.init_producer_id(app_b)
        assert second.transactional_id_of(pid_b) is None

        second.unload_partition(p_a, epoch=1)
        with pytest.raises(NotCoordinator):
            second.describe(app_a)
        assert second.transactional_id_of(pid_a) is None
        assert len(second.timer) == 0  # its transaction's timeout left with it
        await second.load_partition(p_a, epoch=2)
        assert second.describe(app_a).state == "Ongoing"
        assert len(second.timer) == 1

    asyncio.run(scenario())


def test_a_deposed_broker_unloads_every_shard_and_its_groups(tmp_path):
    """Giving the coordinators up unloads them (the state is the next coordinator's), and
    taking them over again loads every shard from the log, not from what it held."""
    from tests.api_inprocess import create_topic, gateway

    with gateway(tmp_path / "data") as gw:
        create_topic(gw, "t")
        broker = gw.broker

        async def scenario() -> None:
            await broker.offsets.commit("g", {("t", 0): CommittedOffset(3)})
            await broker.groups.join("members", "", topics=["t"], session_timeout_ms=10_000)
            pid, _ = await broker.transactions.init_producer_id("app")
            assert broker.groups.group("members") is not None

            broker.give_up_coordinators()
            with pytest.raises(NotCoordinator):
                broker.offsets.committed("g", ("t", 0))
            with pytest.raises(NotCoordinator):
                broker.transactions.describe("app")
            assert broker.groups.group("members") is None  # its members rejoin at the next coordinator
            assert broker.offsets.groups() == [] and broker.transactions.transactional_id_of(pid) is None

            broker.take_over_coordinators()
            while not broker.coordinators_loaded:
                await asyncio.sleep(0.02)
            assert broker.offsets.committed("g", ("t", 0)).offset == 3
            assert broker.transactions.transactional_id_of(pid) == "app"
            assert broker.offsets.epoch == broker.coordinator_epoch() >= 1

        gw.run(scenario())
