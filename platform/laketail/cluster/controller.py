"""The controller: the one broker that decides who leads (docs/architecture.md §8.3).

Role: count brokers alive from their heartbeats (``broker.session.timeout.ms``), assign
replicas to new topics, accept or refuse the leaders' ISR changes, and elect leaders
when a broker dies or comes back. Every decision is written to ``_system/replicas``
before anyone hears of it, so a controller elected later starts from it.

Elections (Kafka's rules):

* a dead broker leaves every ISR it was in (never emptying one: the last member stays,
  so it can lead again when it returns);
* a partition whose leader died gets the first live ISR member in replica order; with
  none, it goes offline (leader -1) -- unless ``unclean.leader.election.enable`` lets
  any live replica lead, which may lose acknowledged records (logged as such);
* every election bumps the leader epoch; every change bumps the partition epoch, and an
  ISR change a leader sends from an older partition epoch is refused;
* a broker that comes back with a new incarnation (a restart the controller may not
  even have noticed) gets a new leader epoch for what it leads, so its followers can
  tell its new appends from whatever the old process wrote and never acknowledged.

Staying the controller: a write of a controller that another broker superseded is
fenced (:class:`ControllerDeposed`), but a controller with nothing to write would never
learn of it. So the tick reads the controller's epoch in the store every heartbeat
interval and steps down when it moved on.

Time: liveness, session deadlines and registration times read the node's injected
clock (:attr:`ClusterNode.clock`), so a test moves them by hand.

ISR changes are group-committed: each is decided under the lock at once, and every
change decided while a write is under way goes into the next write together
(:meth:`_write_soon`). When a broker returns, each partition it follows sends its own
AlterPartition; written one by one, a hundred internal partitions held the lock for
seconds, a heartbeat of a returning broker waited behind them past its timeout, and the
brokers took turns claiming the controller.

Thread-safety: event loop only; one lock serialises changes; table writes run in
worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from laketail.catalog import TopicInfo, check_partition_increase
from laketail.cluster.metadata import (
    NO_LEADER,
    BrokerRegistration,
    ClusterImage,
    PartitionRegistration,
    assign_replicas,
)
from laketail.cluster.store import Conflict
from laketail.errors import (
    FencedLeaderEpoch,
    InvalidReplicationFactor,
    InvalidRequest,
    KafkaStorageError,
    LaketailError,
    NotController,
    UnknownTopicOrPartition,
)

if TYPE_CHECKING:
    from laketail.cluster.node import ClusterNode

log = logging.getLogger(__name__)

class ControllerDeposed(NotController, Conflict):
    """A decision this controller could not write: a newer controller epoch holds the
    store. To a client (a topic created, an ISR altered through this broker) it is
    NOT_CONTROLLER, retriable, not a server error; to the election code a Conflict."""


#: How often ``_system/replicas`` is rewritten just to refresh log end offsets.
LEO_WRITE_INTERVAL_S = 10.0


class Controller:
    """The controller's state and decisions, alive while this broker holds the controller epoch.

    Holds the brokers' registrations and last heartbeats, every partition's registration
    (replicas, ISR, leader, leader and partition epochs) and the replicas' last known log
    end offsets. :meth:`heartbeat` and :meth:`tick` track liveness and elect leaders;
    :meth:`alter_partition` accepts or refuses a leader's ISR change by partition epoch;
    :meth:`create_topic`, :meth:`create_partitions`, :meth:`delete_topic` and
    :meth:`alter_topic` change the catalog. Each decision is written to ``_system/replicas``
    (:meth:`_persist`) before a new :class:`ClusterImage` carries it to the brokers.

    Thread-safety: event loop only; ``_lock`` serialises the changes, table writes run in
    worker threads.
    """

    def __init__(self, node: "ClusterNode", epoch: int) -> None:
        self.node = node
        self.host = node.host
        self.store = node.store
        self.clock = node.clock
        self.settings = node.host.settings
        self.epoch = epoch
        self.brokers: dict[int, BrokerRegistration] = {}
        self.last_seen: dict[int, float] = {}
        self.partitions: dict[tuple[str, int], PartitionRegistration] = {}
        self.leos: dict[tuple[str, int, int], int] = {}
        # Versions only grow, across controllers too (a broker keeps the newest image).
        self.version = epoch << 32
        self._lock = asyncio.Lock()
        self._leos_dirty = False
        self._last_leo_write = self.clock.monotonic()
        self._verified_at = self.clock.monotonic()
        self._alone_since: float | None = None  # since when no broker is heard from (:meth:`_cut_off`)
        self._unwritten = False  # decisions taken but not yet in the store (:meth:`_write_soon`)
        self._next_write: asyncio.Future | None = None
        self._writer: asyncio.Task | None = None
        self.active = False

    # -- activation ------------------------------------------------------------------------

    async def activate(self, presumed_dead: set[int]) -> None:
        """Load the last decisions and take over. ``presumed_dead``: brokers the new
        controller already saw unreachable for a session (the old controller)."""
        brokers = await asyncio.to_thread(self.store.brokers)
        partitions = await asyncio.to_thread(self.store.partitions)
        await asyncio.to_thread(self.host.catalog.reload)
        now = self.clock.monotonic()
        self._verified_at = now
        me = self.node.registration
        brokers[me.broker_id] = me
        for b in brokers.values():
            b.alive = b.alive and b.broker_id not in presumed_dead or b.broker_id == me.broker_id
            self.last_seen[b.broker_id] = now
        self.brokers = brokers
        self.partitions = partitions
        async with self._lock:
            self._reconcile_topics()
            for dead in presumed_dead - {me.broker_id}:
                self._broker_died(dead)
            self._broker_rejoined(me.broker_id)  # this process is a new incarnation
            self._elect_offline()
            await self._persist(brokers_changed=True)
        self.active = True
        log.info("broker %d is the controller (epoch %d)", me.broker_id, self.epoch)

    def _reconcile_topics(self) -> None:
        """Registrations for every catalog topic (a topic created before replication
        existed, or whose registration a crash lost, is given the controller); none for
        topics that are gone."""
        names = {info.name: info for info in self.host.catalog.topics()}
        for key in [k for k in self.partitions if k[0] not in names]:
            del self.partitions[key]
        me = self.node.broker_id
        for info in names.values():
            for p in range(info.partitions):
                if (info.name, p) not in self.partitions:
                    self.partitions[(info.name, p)] = PartitionRegistration(info.name, p, [me], me, 0, [me])

    # -- the image ----------------------------------------------------------------------------

    def image(self) -> ClusterImage:
        topics = {}
        for info in self.host.catalog.topics():
            topics[info.name] = {
                "name": info.name, "topic_id": info.topic_id, "partitions": info.partitions,
                "replication_factor": info.replication_factor, "configs": info.configs,
                "created_ms": info.created_ms, "internal": info.internal,
            }
        return ClusterImage(
            version=self.version,
            controller_id=self.node.broker_id,
            controller_epoch=self.epoch,
            brokers={k: BrokerRegistration(**vars(v)) for k, v in self.brokers.items()},
            topics=topics,
            partitions={k: PartitionRegistration(**vars(v)) for k, v in self.partitions.items()},
        )

    async def _persist(self, brokers_changed: bool = False, publish: bool = True) -> None:
        """Write the decisions, then publish them (a new image version, applied here and
        pushed to the other brokers); ``publish=False`` only refreshes the table's log
        end offsets."""
        try:
            if brokers_changed:
                alive = {b.broker_id: b.alive for b in self.brokers.values()}
                await asyncio.to_thread(self.store.set_alive, alive)
            await asyncio.to_thread(self.store.write_partitions, self.partitions, dict(self.leos), self.epoch)
        except Conflict as exc:
            log.warning("controller epoch %d was superseded; stepping down", self.epoch)
            self.active = False
            self.node.controller_deposed(self)
            raise ControllerDeposed(f"broker {self.node.broker_id} is no longer the controller: {exc}") from exc
        self._leos_dirty = False
        self._last_leo_write = self.clock.monotonic()
        if publish:
            self._unwritten = False
            self.version += 1
            await self.node.apply_image(self.image())

    # -- heartbeats and liveness ------------------------------------------------------------------

    async def heartbeat(self, broker_id: int, url: str, incarnation: str, leos: dict[str, int], known_version: int,
                        broker_url: str = "", endpoints: str = "") -> dict:
        if not self.active:
            raise NotController(f"broker {self.node.broker_id} is no longer the controller")
        self.last_seen[broker_id] = self.clock.monotonic()
        self._record_leos(broker_id, leos)
        known = self.brokers.get(broker_id)
        if known is None or known.incarnation != incarnation or not known.alive:
            async with self._lock:
                restarted = known is not None and known.incarnation != incarnation
                self.brokers[broker_id] = BrokerRegistration(broker_id, url, incarnation, True, self.clock.now_ms(),
                                                             broker_url, endpoints)
                log.info("broker %d is alive (%s)", broker_id, "restarted" if restarted else "registered")
                if restarted:
                    self._broker_rejoined(broker_id)
                self._broker_alive(broker_id)
                await self._persist(brokers_changed=True)
        answer: dict = {"controller_id": self.node.broker_id, "controller_epoch": self.epoch, "version": self.version}
        if known_version != self.version:
            answer["image"] = self.image().to_json()
        return answer

    def _record_leos(self, broker_id: int, leos: dict[str, int]) -> None:
        for key, leo in leos.items():
            topic, _, partition = key.rpartition("/")
            if self.leos.get((topic, int(partition), broker_id)) != leo:
                self.leos[(topic, int(partition), broker_id)] = leo
                self._leos_dirty = True

    async def tick(self) -> None:
        """Declare brokers silent past the session timeout dead; elect what that needs;
        write the replicas' last known log end offsets now and then."""
        now = self.clock.monotonic()
        timeout = self.settings.broker_session_timeout_ms / 1000
        if now - self._verified_at >= self.settings.broker_heartbeat_interval_ms / 1000:
            if not await self._still_controller():
                return
        self._record_leos(self.node.broker_id, self.node.leos())
        dead = [
            b.broker_id for b in self.brokers.values()
            if b.alive and b.broker_id != self.node.broker_id and now - self.last_seen.get(b.broker_id, now) > timeout
        ]
        if not dead:
            self._alone_since = None
        elif self._cut_off(dead, now, timeout):
            return
        if dead:
            if not await self._still_controller():  # a claim may be what silenced them
                return
            async with self._lock:
                for broker_id in dead:
                    log.warning("broker %d missed heartbeats for %.1f s: it is dead", broker_id, timeout)
                    self.brokers[broker_id].alive = False
                    self._broker_died(broker_id)
                await self._persist(brokers_changed=True)
            return
        async with self._lock:
            if self._elect_offline():
                await self._persist()
            elif self._leos_dirty and now - self._last_leo_write > LEO_WRITE_INTERVAL_S:
                await self._persist(publish=False)

    def _cut_off(self, silent: list[int], now: float, timeout: float) -> bool:
        """Whether to hold off declaring ``silent`` dead: when every other live broker of
        three or more went silent at once, the likelier story is that this controller is
        the one cut off; they then claim the controller after a session of not hearing
        from it (and this one steps down at its next epoch check, having written nothing).
        Only after one more session of silence are they declared dead (every other broker
        really died). Two brokers keep the plain rule: the survivor of a pair cannot tell."""
        others = {b.broker_id for b in self.brokers.values() if b.alive and b.broker_id != self.node.broker_id}
        if len(others) < 2 or set(silent) != others:
            self._alone_since = None
            return False
        if self._alone_since is None:
            self._alone_since = now
            log.warning("no broker was heard from for %.1f s: waiting a session for a claim of the controller "
                        "before declaring brokers %s dead", timeout, sorted(others))
        return now - self._alone_since <= timeout

    async def _still_controller(self) -> bool:
        """Whether the store still names this controller; steps down when not (another
        broker claimed while this one was cut off, stalled, or wrote nothing to be fenced)."""
        controller_id, epoch = await asyncio.to_thread(self.store.controller)
        self._verified_at = self.clock.monotonic()
        if (controller_id, epoch) == (self.node.broker_id, self.epoch):
            return True
        log.warning("controller epoch %d was superseded by broker %d at epoch %d; stepping down",
                    self.epoch, controller_id, epoch)
        self.active = False
        self.node.controller_deposed(self)
        return False

    def _alive(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and b.alive

    def _unclean(self, topic: str) -> bool:
        """The topic's ``unclean.leader.election.enable`` (False for a topic the catalog
        no longer has, or whose stored configs do not load)."""
        try:
            configs = self.host.catalog.get(topic).configs
        except UnknownTopicOrPartition:
            return False
        try:
            return self.host.settings.topic_config(configs).unclean_leader_election_enable
        except LaketailError as exc:
            log.warning("topic %s: its stored configs do not load (%s); no unclean election", topic, exc)
            return False

    def _live(self) -> set[int]:
        return {b.broker_id for b in self.brokers.values() if b.alive}

    def _broker_died(self, broker_id: int) -> None:
        for reg in self.partitions.values():
            broker_died(reg, broker_id, self._live(), self._unclean(reg.topic))

    def _broker_alive(self, broker_id: int) -> None:
        for reg in self.partitions.values():
            if broker_alive(reg, broker_id, self._live()):
                log.info("%s-%d is back online, led by broker %d", reg.topic, reg.partition, broker_id)

    def _broker_rejoined(self, broker_id: int) -> None:
        """A new process of ``broker_id``: a new leader epoch for what it leads."""
        for reg in self.partitions.values():
            if reg.leader == broker_id:
                reg.leader_epoch += 1
                reg.partition_epoch += 1

    def _elect_offline(self) -> bool:
        """Elect leaders for partitions without a live one (after a config change to
        unclean election, or a leader that died while no controller was watching)."""
        live = self._live()
        changed = False
        for reg in self.partitions.values():
            if reg.leader == NO_LEADER or reg.leader not in live:
                changed |= elect_leader(reg, live, self._unclean(reg.topic), exclude=reg.leader)
        return changed

    # -- ISR changes from leaders (Kafka's AlterPartition) -------------------------------------------

    async def alter_partition(
        self, topic: str, partition: int, leader: int, leader_epoch: int, partition_epoch: int, isr: list[int]
    ) -> PartitionRegistration:
        async with self._lock:
            if not self.active:  # deposed while this waited: no write that can only conflict
                raise NotController(f"broker {self.node.broker_id} is no longer the controller")
            reg = self.partitions.get((topic, partition))
            if reg is None:
                raise UnknownTopicOrPartition.partition(topic, partition)
            if reg.leader != leader or reg.leader_epoch != leader_epoch or reg.partition_epoch != partition_epoch:
                raise FencedLeaderEpoch(
                    f"{topic}-{partition}: ISR change from broker {leader} at leader epoch {leader_epoch} "
                    f"(partition epoch {partition_epoch}) refused; the partition is at leader epoch "
                    f"{reg.leader_epoch} (partition epoch {reg.partition_epoch}) led by {reg.leader}"
                )
            wanted = [r for r in reg.replicas if r in isr]
            if leader not in wanted:
                raise InvalidRequest(f"the ISR of {topic}-{partition} must contain its leader {leader}")
            for r in wanted:
                if r not in reg.isr and not self._alive(r):
                    raise InvalidRequest(f"broker {r} is not alive: it cannot join the ISR of {topic}-{partition}")
            changed = wanted != reg.isr
            if changed:
                log.info("%s-%d ISR %s -> %s", topic, partition, reg.isr, wanted)
                reg.isr = wanted
                reg.partition_epoch += 1
                self._unwritten = True
            answer = PartitionRegistration(**vars(reg))
        if changed:
            # The waiter may be cancelled (its client gone); the write goes on for the others.
            await asyncio.shield(self._write_soon())
        return answer

    def _write_soon(self) -> asyncio.Future:
        """The write that will carry the changes decided so far: the next one to take the
        lock. Changes decided while a write is under way wait for it and share the next."""
        if self._next_write is None:
            self._next_write = asyncio.get_running_loop().create_future()
            self._writer = asyncio.create_task(self._write_queued(self._next_write), name="laketail-controller-write")
        return self._next_write

    async def _write_queued(self, done: asyncio.Future) -> None:
        async with self._lock:
            self._next_write = None  # from here on, a change waits for the write after this one
            try:
                if not self.active:
                    raise NotController(f"broker {self.node.broker_id} is no longer the controller")
                if self._unwritten:  # else another decision's write already carried them
                    await self._persist()
            except Exception as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

    # -- topics ------------------------------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        async with self._lock:
            live = [b.broker_id for b in self.brokers.values() if b.alive]
            rf = replication_factor
            if name.startswith("__"):
                rf = max(1, min(rf, len(live)))  # internal topics: as many as there are
            if rf > len(live):
                raise InvalidReplicationFactor(
                    f"replication factor {rf} is larger than the {len(live)} available broker(s)"
                )
            self.host.catalog.check_can_create(name)
            await asyncio.to_thread(self.host.remove_leftovers, name)
            info = await asyncio.to_thread(self.host.catalog.create_topic, name, partitions, rf, configs)
            try:
                await asyncio.to_thread(self.host.tables.create_table, name)
            except Exception as exc:
                # All or nothing: a topic without its table must not stay in the catalog.
                log.warning("creating the table of topic %r failed (%s); the topic is rolled back", name, exc)
                await asyncio.to_thread(self.host.catalog.delete_topic, name)
                await asyncio.to_thread(self.host.remove_leftovers, name)
                raise KafkaStorageError(f"cannot make the table of topic '{name}': {exc}") from exc
            start = sum(1 for k in self.partitions if k[1] == 0)  # spread leaders across topics
            if name.startswith("__") and self.node.broker_id in live:
                start = sorted(live).index(self.node.broker_id)  # coordinators live on the controller
                assignment = [assign_replicas(1, rf, live, start)[0] for _ in range(partitions)]
            else:
                assignment = assign_replicas(partitions, rf, live, start)
            for p, replicas in enumerate(assignment):
                self.partitions[(name, p)] = PartitionRegistration(name, p, replicas, replicas[0], 0, list(replicas))
            try:
                await self._persist()
            except ControllerDeposed:
                # A newer controller holds the store: the topic was never registered. Take
                # back its catalog row and table, as for a table that could not be made.
                for key in [k for k in self.partitions if k[0] == name]:
                    del self.partitions[key]
                await asyncio.to_thread(self.host.catalog.delete_topic, name)
                await asyncio.to_thread(self.host.remove_leftovers, name)
                raise
            return info

    async def create_partitions(self, name: str, partitions: int) -> TopicInfo:
        """Kafka's CreatePartitions: the topic grows to ``partitions``; the new ones get
        replicas as a new topic's would (leaders continuing the round-robin) and join
        the image every broker applies. INVALID_PARTITIONS unless it grows."""
        async with self._lock:
            info = self.host.catalog.get(name)
            check_partition_increase(name, info.partitions, partitions)
            live = [b.broker_id for b in self.brokers.values() if b.alive]
            rf = info.replication_factor
            if rf > len(live):
                raise InvalidReplicationFactor(
                    f"the new partitions of '{name}' need {rf} replicas; {len(live)} broker(s) are available"
                )
            updated = await asyncio.to_thread(self.host.catalog.set_partitions, name, partitions)
            start = sum(1 for k in self.partitions if k[1] == 0) + info.partitions
            for i, replicas in enumerate(assign_replicas(partitions - info.partitions, rf, live, start)):
                p = info.partitions + i
                self.partitions[(name, p)] = PartitionRegistration(name, p, replicas, replicas[0], 0, list(replicas))
            await self._persist()
            return updated

    async def delete_topic(self, name: str) -> TopicInfo:
        async with self._lock:
            info = self.host.catalog.get(name)
            await asyncio.to_thread(self.host.catalog.delete_topic, name)
            for key in [k for k in self.partitions if k[0] == name]:
                del self.partitions[key]
            await self._persist()
            return info

    async def alter_topic(self, name: str, configs: dict[str, str]) -> TopicInfo:
        async with self._lock:
            info = await asyncio.to_thread(self.host.catalog.alter_topic, name, configs)
            self._elect_offline()  # unclean.leader.election.enable may have just been set
            await self._persist()
            return info


# -- election rules (pure: the registration changes in place) ------------------------------------


def elect_leader(reg: PartitionRegistration, live: set[int], unclean: bool, exclude: int = NO_LEADER) -> bool:
    """Give ``reg`` a new leader: the first live ISR member in replica order (``exclude``,
    the dead leader, leaves the ISR unless it is its last member); with none, any live
    replica if ``unclean``, else no leader. Bumps the epochs when anything changed;
    returns whether it did."""
    before = (reg.leader, list(reg.isr))
    candidates = [r for r in reg.replicas if r in reg.isr and r != exclude and r in live]
    if candidates:
        reg.leader = candidates[0]
        reg.isr = [r for r in reg.isr if r != exclude]
    else:
        fallback = [r for r in reg.replicas if r != exclude and r in live]
        if fallback and unclean:
            log.warning(
                "%s-%d: no in-sync replica is alive; unclean.leader.election.enable lets "
                "out-of-sync broker %d lead: acknowledged records may be lost",
                reg.topic, reg.partition, fallback[0],
            )
            reg.leader = fallback[0]
            reg.isr = [fallback[0]]
        else:
            if reg.leader != NO_LEADER:
                log.warning("%s-%d is offline: no in-sync replica is alive", reg.topic, reg.partition)
            reg.leader = NO_LEADER
    if (reg.leader, reg.isr) == before:
        return False
    reg.leader_epoch += 1
    reg.partition_epoch += 1
    return True


def broker_died(reg: PartitionRegistration, broker_id: int, live: set[int], unclean: bool) -> bool:
    """``broker_id`` is dead: re-elect if it led, else drop it from the ISR (never the
    last member). Returns whether ``reg`` changed."""
    if broker_id not in reg.replicas:
        return False
    if reg.leader == broker_id:
        return elect_leader(reg, live - {broker_id}, unclean, exclude=broker_id)
    if broker_id in reg.isr and len(reg.isr) > 1:
        reg.isr = [r for r in reg.isr if r != broker_id]
        reg.partition_epoch += 1
        return True
    return False


def broker_alive(reg: PartitionRegistration, broker_id: int, live: set[int]) -> bool:
    """``broker_id`` is (back) alive: an offline partition whose ISR holds it gets it as
    leader. Returns whether ``reg`` changed."""
    if reg.leader != NO_LEADER or broker_id not in reg.isr:
        return False
    reg.leader = broker_id
    reg.isr = [r for r in reg.isr if r in live] or [broker_id]
    reg.leader_epoch += 1
    reg.partition_epoch += 1
    return True
