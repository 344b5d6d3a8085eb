"""A deposed coordinator's write never lands after its successor's (issue 35, finding 2),
on a real broker and its real internal topics.

Before: a coordinator's write was fenced only by a check after it. A paused controller
that woke up after its successor had acknowledged a commit appended its own, older
commit after it, answered NOT_COORDINATOR, and the next coordinator to load read the
stale record last: the acknowledged commit was rolled back. Now each write carries the
coordinator's epoch (the producer ``COORDINATOR_PRODUCER_ID`` at the controller epoch),
and the partition refuses it once a newer coordinator has written there."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.coordinator.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetStore
from laketail.coordinator.transactions import TransactionCoordinator
from laketail.errors import NotCoordinator


class _Zombie:
    """The fence of a controller paused while another took over: an older epoch, and the
    check after a write finds its successor."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def coordinator_epoch(self) -> int:
        return self.epoch

    async def check_coordinator_epoch(self) -> None:
        raise NotCoordinator("another broker runs the coordinators now")


def test_a_deposed_coordinators_write_is_refused_where_its_successor_wrote(tmp_path):
    clock = ManualClock()

    async def scenario() -> None:
        settings = load_settings(None, env={}, data=str(tmp_path / "data"), offsets_topic_num_partitions=1,
                                 transaction_state_log_num_partitions=1, tier_enabled=False)
        broker = Broker(settings, clock=clock)
        await broker.start()
        while not broker.coordinators_loaded:
            await asyncio.sleep(0.05)
        await broker.create_topic("t", 1)
        epoch = broker.cluster.controller.epoch
        assert epoch >= 1
        zombie = _Zombie(epoch - 1)

        await broker.offsets.commit("g", {("t", 0): CommittedOffset(10)})  # acknowledged
        stale = OffsetStore(broker, clock, num_partitions=1, replication_factor=1, fence=zombie)
        with pytest.raises(NotCoordinator):
            await stale.commit("g", {("t", 0): CommittedOffset(5)})
        await broker.offsets.load()  # what the next coordinator reads
        # Before: 5, the deposed coordinator's record, written after the acknowledged one.
        assert broker.offsets.committed("g", ("t", 0)) == CommittedOffset(10, "", clock.now_ms())

        pid, producer_epoch = await broker.transactions.init_producer_id("app")
        stale_txns = TransactionCoordinator(broker, broker, broker.groups, broker.offsets, clock,
                                            producer_ids=broker, fence=zombie, num_partitions=1,
                                            replication_factor=1)
        with pytest.raises(NotCoordinator):
            await stale_txns.init_producer_id("app")  # it never loaded 'app': a new producer id
        await broker.transactions.load()
        meta = broker.transactions.describe("app")
        assert (meta.producer_id, meta.producer_epoch) == (pid, producer_epoch)

        # The coordinator itself goes on writing, and a newer one would fence it in turn.
        await broker.offsets.commit("g", {("t", 0): CommittedOffset(11)})
        newer = OffsetStore(broker, clock, num_partitions=1, replication_factor=1, fence=_Newer(epoch + 1))
        await newer.commit("g", {("t", 0): CommittedOffset(12)})
        with pytest.raises(NotCoordinator):
            await broker.offsets.commit("g", {("t", 0): CommittedOffset(13)})
        await broker.close()

    asyncio.run(scenario())


class _Newer:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def coordinator_epoch(self) -> int:
        return self.epoch

    async def check_coordinator_epoch(self) -> None:
        return None


def test_the_fence_outlives_a_hot_log_restarted_above_the_table(tmp_path):
    """The coordinators' epoch is in their records' producer columns: a partition whose hot
    log restarted empty at the table's end learns it from the table with the producers'
    sequences, so a deposed coordinator is still refused there."""
    clock = ManualClock()
    data = tmp_path / "data"

    def settings():
        return load_settings(None, env={}, data=str(data), offsets_topic_num_partitions=1,
                             transaction_state_log_num_partitions=1, tier_enabled=False)

    async def first() -> int:
        broker = Broker(settings(), clock=clock)
        await broker.start()
        while not broker.coordinators_loaded:
            await asyncio.sleep(0.05)
        await broker.create_topic("t", 1)
        await broker.offsets.commit("g", {("t", 0): CommittedOffset(10)})
        await broker.tierer.tier_now(OFFSETS_TOPIC)
        epoch = broker.cluster.controller.epoch
        await broker.close()
        shutil.rmtree(Path(broker.settings.hot_log_dir) / f"{OFFSETS_TOPIC}-0")  # restarts at the table's end
        return epoch

    epoch = asyncio.run(first())

    async def restarted() -> None:
        broker = Broker(settings(), clock=clock)
        await broker.start()
        while not broker.coordinators_loaded:
            await asyncio.sleep(0.05)
        stale = OffsetStore(broker, clock, num_partitions=1, replication_factor=1, fence=_Zombie(epoch - 1))
        with pytest.raises(NotCoordinator):
            await stale.commit("g", {("t", 0): CommittedOffset(5)})
        await broker.offsets.load()
        assert broker.offsets.committed("g", ("t", 0)).offset == 10
        await broker.close()

    asyncio.run(restarted())
