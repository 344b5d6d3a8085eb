"""Coordinator shards that follow the leadership of their internal partitions.

Role: Kafka's group and transaction coordinators run each partition of
``__consumer_offsets`` / ``__transaction_state`` on that partition's leader: the
broker's metadata publisher calls ``onElection(partition, leaderEpoch)`` when it becomes
the leader, and the coordinator schedules the shard's load; ``onResignation`` when it
stops, and the shard is unloaded. :class:`ShardElections` is that listener
(:class:`laketail.cluster.ports.LeadershipListener`, registered in
``ReplicaManager.listeners``) over an :class:`~laketail.coordinator.offsets.OffsetStore`,
its :class:`~laketail.coordinator.groups.GroupCoordinator` and, optionally, a
:class:`~laketail.coordinator.transactions.TransactionCoordinator`:

* an election loads the partition's shard at the leader epoch
  (``load_partition``): COORDINATOR_LOAD_IN_PROGRESS for what hashes there until it is
  read to the high watermark, retried every ``retry_backoff_s`` while it fails and the
  partition is still elected at that epoch;
* a resignation cancels a load in flight, answers the partition's pending joins
  NOT_COORDINATOR and unloads its shard (``unload_partition``): NOT_COORDINATOR from then
  on, unless a newer election is held already.

Placement today: the Broker does not register it. Its coordinators run on the
controller, which elects every shard at its controller epoch when it takes the
coordinators over (docs/architecture.md §9.1), because the request routing (the REST
coordinator proxy, Kafka's FindCoordinator) and the transaction coordinator's offset
commits assume one coordinating broker. The in-process cluster tests register it to
prove the lifecycle over real leadership moves (tests/cluster/test_coordinator_shards.py).

Thread-safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Awaitable, Callable

from laketail.coordinator.offsets import OFFSETS_TOPIC
from laketail.coordinator.transactions import TXN_TOPIC

if TYPE_CHECKING:
    from laketail.coordinator.groups import GroupCoordinator
    from laketail.coordinator.offsets import OffsetStore
    from laketail.coordinator.shards import ShardOwnership
    from laketail.coordinator.transactions import TransactionCoordinator

log = logging.getLogger(__name__)


class ShardElections:
    """Loads and unloads coordinator shards as their partitions' leadership comes and goes
    (see the module docstring)."""

    def __init__(self, offsets: "OffsetStore", groups: "GroupCoordinator",
                 transactions: "TransactionCoordinator | None" = None, retry_backoff_s: float = 0.5) -> None:
        self.offsets = offsets
        self.groups = groups
        self.transactions = transactions
        self.retry_backoff_s = retry_backoff_s
        self._loads: dict[tuple[str, int], asyncio.Task] = {}
        offsets.unload()  # driven by elections: nothing runs here until elected
        if transactions is not None:
            transactions.unload()

    def on_election(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic == OFFSETS_TOPIC:
            self._start(topic, partition, leader_epoch, self.offsets.load_partition, self.offsets.ownership)
        elif topic == TXN_TOPIC and self.transactions is not None:
            self._start(topic, partition, leader_epoch, self.transactions.load_partition,
                        self.transactions.ownership)

    def on_resignation(self, topic: str, partition: int, leader_epoch: int | None) -> None:
        if topic == OFFSETS_TOPIC:
            self._cancel(topic, partition)
            held = self.offsets.ownership.epoch(partition)
            if leader_epoch is None or held is None or held <= leader_epoch:  # not a newer election's
                self.groups.unload_partition(partition)
            self.offsets.unload_partition(partition, leader_epoch)
        elif topic == TXN_TOPIC and self.transactions is not None:
            self._cancel(topic, partition)
            self.transactions.unload_partition(partition, leader_epoch)

    def loading(self) -> list[tuple[str, int]]:
        """The partitions whose load is in flight."""
        return sorted(key for key, task in self._loads.items() if not task.done())

    async def close(self) -> None:
        """Cancel the loads in flight."""
        tasks = list(self._loads.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loads.clear()

    def _start(self, topic: str, partition: int, epoch: int,
               load: Callable[[int, int], Awaitable[None]], ownership: "ShardOwnership") -> None:
        self._cancel(topic, partition)
        ownership.elect(partition, epoch)  # loading from now on, before the task first runs
        self._loads[(topic, partition)] = asyncio.get_running_loop().create_task(
            self._load(topic, partition, epoch, load, ownership), name=f"laketail-load-{topic}-{partition}")

    def _cancel(self, topic: str, partition: int) -> None:
        task = self._loads.pop((topic, partition), None)
        if task is not None:
            task.cancel()

    async def _load(self, topic: str, partition: int, epoch: int,
                    load: Callable[[int, int], Awaitable[None]], ownership: "ShardOwnership") -> None:
        failures = 0
        while ownership.epoch(partition) == epoch:
            try:
                await load(partition, epoch)
                log.info("%s-%d: coordinator shard loaded at leader epoch %d", topic, partition, epoch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                level = logging.WARNING if failures <= 3 or failures % 30 == 0 else logging.INFO
                log.log(level, "%s-%d: loading the coordinator shard failed (attempt %d): %s; it answers "
                        "COORDINATOR_LOAD_IN_PROGRESS until it loads", topic, partition, failures, exc)
                await asyncio.sleep(self.retry_backoff_s)
