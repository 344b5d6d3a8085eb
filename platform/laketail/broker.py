"""The broker: the one object the gateway talks to.

It owns the catalog (topics and their configs), the log manager (every partition's
hot log), the tierers (hot log -> Delta table) and the table readers, and offers what
the HTTP routes need as a small set of methods. Routes never touch storage directly.

It is the composition root: it builds the parts and passes itself wherever a part asks
for a port (``coordinator/ports.py``, ``storage/ports.py``, ``cluster/ports.py``); no
module of those packages imports this one (``tests/test_architecture.py``). Produce and
fetch live in :mod:`laketail.produce_path` and :mod:`laketail.fetch_path`; the methods
here delegate to them.

Offsets, everywhere (one vocabulary):

* ``log_start_offset`` -- the first offset not deleted by retention;
* ``log_end_offset`` (LEO) -- the offset the next appended record gets;
* ``high_watermark`` (HW) -- records below it are on every in-sync replica; with one
  replica HW == LEO; consumers see only offsets below it;
* ``last_stable_offset`` (LSO) -- the first offset of the oldest open transaction (HW
  when none); read_committed readers stop there;
* ``tiered_offset`` -- records below it are in the topic's Delta table;
* a *committed* consumer offset is the next offset the group will read.

Thread-safety: all public methods are called from the event loop thread; blocking
disk and Delta work runs in worker threads inside the partition logs and tierers.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Coroutine

import httpx
import pyarrow as pa

from laketail import request_processes
from laketail.bounds import INT16_MAX, INT32_MAX
from laketail.catalog import Catalog, TopicInfo, check_not_internal, check_partition_increase, validate_topic_name
from laketail.clock import Clock, SystemClock
from laketail.cluster.metadata import NO_LEADER, ClusterImage
from laketail.cluster.node import INTERNAL, ClusterNode
from laketail.cluster.transport import PeerTransport
from laketail.config import TOPIC_CONFIGS, BrokerSettings, TopicConfig
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import OFFSETS_TOPIC, OffsetStore
from laketail.coordinator.transactions import TXN_TOPIC, TransactionCoordinator
from laketail.errors import (
    CoordinatorLoadInProgress,
    CorruptMessage,
    InvalidPartitions,
    InvalidReplicationFactor,
    LeaderNotAvailable,
    NotCoordinator,
    RequestTimedOut,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from laketail.fetch_path import FetchPath, FetchResult
from laketail.handoff import HandoffClient, HandoffServer, socket_path
from laketail.maintenance.compaction import (
    CompactionAbandoned,
    commit_internal,
    plan_key_compaction,
    plan_overlap_repair,
    removal_actions,
    rewrite_actions,
)
from laketail.maintenance.scheduler import MaintenanceScheduler
from laketail.produce_path import PRODUCE_SCHEMA as PRODUCE_SCHEMA  # re-exported: routes build requests with it
from laketail.produce_path import ProducePath, ProduceResult, TopicRuntime
from laketail.records import (
    Acks,
    IsolationLevel,
)
from laketail.schemas import SCHEMAS_TOPIC, SchemaRegistry
from laketail.schemas.validation import SchemaValidation
from laketail.security.listeners import advertised_endpoints, parse_entries
from laketail.storage import object_store
from laketail.storage.block_cache import BLOCKS
from laketail.storage.log_manager import LogManager
from laketail.storage.partition_log import PartitionLog, ProducerBatch
from laketail.storage.producer_state import ProducerEntry
from laketail.storage.sibling_log import SiblingLog, SiblingLogs
from laketail.storage.table_reader import TableReader
from laketail.storage.tierer import Tierer
from laketail.storage.topic_check import check_partition

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    tiered_offset: int


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool
    source: str  # DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG
    doc: str
    read_only: bool = False
    sensitive: bool = False


def check_partition_limits(name: str, partitions: int, existing: int, settings: BrokerSettings) -> None:
    """INVALID_PARTITIONS when a new topic of ``partitions`` would pass
    ``laketail.topic.max.partitions`` or bring the ``existing`` partitions of client
    topics past ``laketail.max.partitions``. Pure: the caller counts ``existing``."""
    if partitions > settings.max_partitions_per_topic:
        raise InvalidPartitions(
            f"topic '{name}' asks for {partitions} partitions, above "
            f"laketail.topic.max.partitions={settings.max_partitions_per_topic}"
        )
    if existing + partitions > settings.max_partitions:
        raise InvalidPartitions(
            f"topic '{name}' with {partitions} partitions would bring the broker's topics to "
            f"{existing + partitions} partitions, above laketail.max.partitions={settings.max_partitions}"
        )


def _endpoints(text: str) -> dict[str, tuple[str, int]]:
    return {name: (host, port) for name, host, port in parse_entries(text, "endpoints")}


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    url: str
    host: str
    port: int
    #: Its other advertised listeners (the Kafka-protocol ones): name -> (host, port)
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)


class Broker:
    """One laketail broker: alone (it is its own controller), or one of several sharing
    a data root (docs/architecture.md §8; :mod:`laketail.cluster`). It hosts the replicas the
    controller gave it; produce and fetch for a partition it does not lead are forwarded
    to the leader, so any broker answers any request."""

    def __init__(self, settings: BrokerSettings, clock: Clock | None = None,
                 peer_transport: PeerTransport | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.broker_id = settings.broker_id
        self.catalog = Catalog(settings.data)
        self.logs = LogManager(settings.hot_log_dir, clock=self.clock,
                               share_offsets=bool(settings.request_process_log_dirs))
        #: request-process mode: partitions a sibling process leads, read from its files
        self.sibling_logs = SiblingLogs(
            {broker: Path(d) for broker, d in settings.request_process_log_dirs.items() if broker != self.broker_id}
        ) if settings.request_process_log_dirs else None
        self.logs.siblings = self.sibling_logs
        BLOCKS.resize(settings.fetch_cache_bytes)  # decoded blocks of both tiers, kept for fetches
        self.tables = TableReader(settings.data)
        self.tables.gaps_allowed = self._gaps_allowed
        # The parts get the broker itself wherever they ask for a port (coordinator/ports.py,
        # storage/ports.py, cluster/ports.py): it is their composition root.
        self.tierer = Tierer(self, self.logs, self.tables, self, clock=self.clock, process=settings.tier_process)
        self._topics: dict[str, TopicRuntime] = {}
        self.cluster_id = ""
        self.cluster = ClusterNode(self, clock=self.clock, transport=peer_transport)  # default: the network
        self._remote_states: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
        #: whether the coordinators here hold state loaded to their partitions' high
        #: watermark and may answer (on the controller only; see take_over_coordinators)
        self.coordinators_loaded = False
        self._coordinator_generation = 0
        self._coordinator_load: asyncio.Task | None = None
        self._first_load_attempt = asyncio.Event()
        self.offsets = OffsetStore(
            self, self.clock, settings.offsets_topic_num_partitions, settings.offsets_topic_replication_factor,
            fence=self,
        )
        self.groups = GroupCoordinator(
            self,
            self.offsets,
            self.clock,
            min_session_timeout_ms=settings.group_min_session_timeout_ms,
            max_session_timeout_ms=settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        )
        self.transactions = TransactionCoordinator(
            self,
            self,
            self.groups,
            self.offsets,
            self.clock,
            producer_ids=self,
            fence=self,
            num_partitions=settings.transaction_state_log_num_partitions,
            replication_factor=settings.transaction_state_log_replication_factor,
            max_timeout_ms=settings.transaction_max_timeout_ms,
        )
        # Confluent Schema Registry, its state in __schemas; beside the coordinators
        self.schemas = SchemaRegistry(self, settings.transaction_state_log_replication_factor)
        self.produce_path = ProducePath(
            settings, self.clock, self.cluster, self.tierer, self.transactions, self._runtime, self.check_partition,
            # the registry runs beside the coordinators; other brokers follow __schemas
            schema_validation=SchemaValidation(self.schemas, lambda: self.coordinators_loaded, self, self.clock),
        )
        #: request-process mode: the socket on which siblings hand this process appends (laketail.handoff)
        self.handoff_server: HandoffServer | None = None
        #: Kafka requests passed to the sibling running the coordinators (laketail.kafka.siblings; metrics)
        self.kafka_requests_passed = 0
        if len(settings.request_process_log_dirs) > 1:
            local = request_processes.local_dir(settings)
            self.handoff_server = HandoffServer(socket_path(local, self.broker_id), self.wait_leads, self.append)
            self.produce_path.handoff = HandoffClient(local, settings.request_timeout_ms / 1000 + 5)
        # typed columns (laketail.table.mode, .key.mode): the tier pass decodes by the subjects' versions
        self.tierer.subject_schemas = self.produce_path.schema_validation.subject_versions  # type: ignore[union-attr]
        self.fetch_path = FetchPath(settings, self.logs, self.tables, self.cluster, self.leads, self.check_partition,
                                    self._sibling_log)
        self._background: list[asyncio.Task] = []
        self.maintenance: MaintenanceScheduler | None = None  # set by start() when maintenance is enabled
        self._admin_lock = asyncio.Lock()
        self._isolated_reported: set[tuple[str, int]] = set()  # internal partitions whose damage was reported

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Open the catalog and every partition log (recovering torn tails), then start
        tiering. Records an unclean shutdown left untiered are tiered on the first pass."""
        self.cluster_id = await asyncio.to_thread(self.catalog.open)
        known = {info.name for info in self.catalog.topics()}
        await asyncio.to_thread(self.logs.remove_orphans, None, known)
        if self.handoff_server is not None:  # before the image makes this process a leader
            await self.handoff_server.start()
        await self.cluster.start()  # the cluster image opens this broker's replicas
        if self._coordinator_load is not None:  # the controller: give its first load a chance before serving
            try:
                await asyncio.wait_for(self._first_load_attempt.wait(), self.settings.broker_session_timeout_ms / 1000)
            except TimeoutError:
                log.warning("the coordinators are still loading; they answer COORDINATOR_LOAD_IN_PROGRESS until done")
        if self.settings.tier_enabled:
            self.tierer.start()
        self._background.append(asyncio.create_task(self._group_housekeeping(), name="laketail-groups"))
        self._background.append(asyncio.create_task(self._internal_cleaner(), name="laketail-cleaner"))
        self._background.append(asyncio.create_task(self._transaction_timeouts(), name="laketail-txn-timeouts"))
        if self.settings.maintenance_enabled:  # retention and compaction of user topics: one spark-submit child
            self.maintenance = MaintenanceScheduler(self.settings, is_due=lambda: self.cluster.is_controller)
            self._background.append(asyncio.create_task(self.maintenance.run(), name="laketail-maintenance"))

    # -- the coordinators: they run on the controller (docs/architecture.md §9.1) ------------------

    def take_over_coordinators(self) -> None:
        """This broker became the controller: its coordinators answer
        COORDINATOR_LOAD_IN_PROGRESS until they have loaded their internal partitions to
        the high watermark, which is tried until it succeeds or the broker is deposed.
        They never serve what they had before."""
        self._coordinator_generation += 1
        self.coordinators_loaded = False
        if self._coordinator_load is not None:
            self._coordinator_load.cancel()
        self._first_load_attempt.clear()
        self._coordinator_load = asyncio.create_task(
            self._load_until_loaded(self._coordinator_generation), name="laketail-coordinators"
        )

    def give_up_coordinators(self) -> None:
        """This broker is no longer the controller: its coordinators stop answering
        (NOT_COORDINATOR) and pending joins are told so; the next controller loads."""
        self._coordinator_generation += 1
        self.coordinators_loaded = False
        if self._coordinator_load is not None:
            self._coordinator_load.cancel()
            self._coordinator_load = None
        self._first_load_attempt.set()
        self.groups.resign()
        for partition in range(self.offsets.num_partitions):  # their state is the next coordinator's
            self.groups.unload_partition(partition)
        self.offsets.unload()
        self.transactions.unload()

    def check_coordinating(self) -> None:
        """Raise unless the coordinators here may answer: COORDINATOR_LOAD_IN_PROGRESS
        while they load, NOT_COORDINATOR when this broker does not run them."""
        if self.coordinators_loaded:
            return
        if self._coordinator_load is not None:
            raise CoordinatorLoadInProgress(
                "the coordinators are loading __consumer_offsets and __transaction_state; retry"
            )
        raise NotCoordinator(f"broker {self.broker_id} does not run the coordinators now")

    def coordinator_epoch(self) -> int:
        """The controller epoch this broker runs the coordinators at (0 when it is not
        the controller: a write stamped so is refused wherever a coordinator wrote)."""
        controller = self.cluster.controller
        return controller.epoch if controller is not None else 0

    async def check_coordinator_epoch(self) -> None:
        """NOT_COORDINATOR unless this broker still runs the coordinators: loaded here and,
        in a cluster, still the controller ``_system/controller`` names (a paused
        controller that woke up learns of its successor only from its next write there).
        A lone broker has no successor and reads nothing. (Loading counts: a load
        finishes prepared transactions, whose offsets it commits.)"""
        if not self.coordinators_loaded and self._coordinator_load is None:
            raise NotCoordinator(f"broker {self.broker_id} does not run the coordinators now")
        if len(self.cluster.image.brokers) <= 1:
            return
        controller = self.cluster.active_controller
        current = await asyncio.to_thread(self.cluster.store.controller)
        if controller is None or current != (self.broker_id, controller.epoch):
            raise NotCoordinator(
                f"broker {current[0]} (controller epoch {current[1]}) runs the coordinators now, not broker "
                f"{self.broker_id}: retry there"
            )

    async def _load_until_loaded(self, generation: int) -> None:
        backoff = min(1.0, self.settings.broker_session_timeout_ms / 3000)
        failures = 0
        while generation == self._coordinator_generation:
            try:
                await self.load_coordinators()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                # Loud at first and then now and then; the coordinators keep refusing meanwhile.
                level = logging.WARNING if failures <= 3 or failures % 30 == 0 else logging.INFO
                log.log(level, "loading the coordinators' state failed (attempt %d): %s; they answer "
                        "COORDINATOR_LOAD_IN_PROGRESS until it succeeds", failures, exc)
                self._first_load_attempt.set()
                await asyncio.sleep(backoff)
                continue
            if generation == self._coordinator_generation:
                self.coordinators_loaded = True
                log.info("the coordinators loaded their state (attempt %d)", failures + 1)
            self._first_load_attempt.set()
            break
        # Damaged partitions of __consumer_offsets and __transaction_state were isolated
        # (what hashes to them refused): load each once its leader has repaired it.
        stores = (self.offsets, self.transactions)
        while generation == self._coordinator_generation and any(s.unavailable for s in stores):
            await asyncio.sleep(max(backoff, self.settings.log_cleaner_backoff_ms / 1000 / 3))
            for store in stores:
                try:
                    await store.load_unavailable()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.info("isolated partitions of %s still unreadable: %s", store.isolated.topic, exc)

    async def load_coordinators(self) -> None:
        """Rebuild the group and transaction coordinators from their internal topics, each
        partition to the high watermark its leader reached (``read_to_log_end``). Raises
        what a read raises; the caller (:meth:`take_over_coordinators`) retries."""
        epoch = self.coordinator_epoch()  # every shard is elected at it (docs/architecture.md §9.1)
        await self.offsets.load(epoch)
        await self.transactions.load(epoch)
        await self.transactions.recover()
        await self.schemas.load()

    async def allocate_producer_ids(self, size: int, at_least: int = 0) -> tuple[int, int]:
        """A durable block of producer ids for this broker (``_system/producer_ids``)."""
        return await asyncio.to_thread(self.cluster.store.allocate_producer_ids, self.broker_id, size, at_least)

    def internal_records_skipped(self) -> dict[str, int]:
        """Per internal topic, the records its coordinator's last load could not decode."""
        return {
            OFFSETS_TOPIC: self.offsets.skipped_records,
            TXN_TOPIC: self.transactions.skipped_records,
            SCHEMAS_TOPIC: self.schemas.skipped_records,
        }

    def table_values_undecoded(self) -> dict[str, int]:
        """Per topic with typed columns, the values (and keys) tiered with a null
        ``value_struct`` (``key_struct``)."""
        return dict(self.tierer.undecoded_values)

    async def close(self) -> None:
        if self._coordinator_load is not None:
            self._coordinator_load.cancel()
            await asyncio.gather(self._coordinator_load, return_exceptions=True)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.handoff_server is not None:
            await self.handoff_server.close()
        if self.produce_path.handoff is not None:
            await self.produce_path.handoff.close()
        await self.tierer.stop()
        await self.cluster.close()
        await self.logs.close()
        if self.sibling_logs is not None:
            self.sibling_logs.close()

    async def _transaction_timeouts(self) -> None:
        """Abort transactions open past transaction.timeout.ms; forget idle producers."""
        interval = self.settings.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                if self.coordinators_loaded:  # another broker's coordinator owns the transactions
                    await self.transactions.expire()
                now = self.clock.now_ms()
                for plog in self.logs.all():
                    plog.producer_state.expire(now, self.settings.producer_id_expiration_ms)
            except Exception:
                log.exception("transaction timeout check failed")

    async def _internal_cleaner(self) -> None:
        """Key-compact the internal topics every ``log.cleaner.backoff.ms`` (the broker
        keeps ``__consumer_offsets`` small itself; user topics are Spark's job): each
        partition by its leader only (see :meth:`compact_topic`)."""
        while True:
            await asyncio.sleep(self.settings.log_cleaner_backoff_ms / 1000)
            for topic in self.list_topics():
                if self.topic(topic).internal and "compact" in self.topic_config(topic).cleanup_policy:
                    try:
                        await self.compact_topic(topic)
                    except Exception:
                        log.exception("compacting %s failed; will retry", topic)

    def _gaps_allowed(self, topic: str) -> bool:
        """Key compaction leaves gaps in offsets; other topics' tables must be dense."""
        try:
            return "compact" in self.topic_config(topic).cleanup_policy
        except UnknownTopicOrPartition:
            return True  # unknown (being created or deleted): do not call gaps damage

    async def table_damage(self, topic: str) -> dict[int, list[dict]]:
        """Damaged offset ranges of the topic's table per partition (only damaged ones),
        as the last validation of the table found them (see ``storage.table_check``)."""
        self.topic(topic)
        damage = await asyncio.to_thread(self.tables.damage, topic)
        return {p: [d.to_json() for d in ranges] for p, ranges in damage.items()}

    async def check_topic(self, topic: str) -> dict:
        """``laketail check``: read the whole table and this broker's hot logs of the
        topic and report what is wrong, per partition (``storage.topic_check``)."""
        info = self.topic(topic)
        gaps_allowed = self._gaps_allowed(topic)

        def run() -> list[dict]:
            reports = []
            for p in range(info.partitions):
                plog = self.logs.get(topic, p) if self.leads(topic, p) else None
                reports.append(check_partition(self.tables, topic, p, plog, gaps_allowed=gaps_allowed).to_json())
            return reports

        partitions = await asyncio.to_thread(run)
        return {"topic": topic, "ok": not any(r["problems"] for r in partitions), "partitions": partitions}

    async def compact_topic(self, topic: str, min_files: int = 2) -> int:
        """Key-compact the partitions of the topic's table this broker leads, and repair
        the ones a stale compaction left overlapping (``maintenance/compaction.py``);
        returns how many partitions were changed. One commit against the snapshot the
        plans were made from, fenced by the leader epochs: when the table moved meanwhile
        nothing is committed and 0 is returned (the next pass plans again)."""
        config = self.topic_config(topic)
        epochs = {}
        for p in range(self.topic(topic).partitions):
            epoch = self.cluster.replicas.leader_epoch(topic, p)
            if epoch is not None and self.leads(topic, p):
                epochs[p] = epoch
        if not epochs:
            return 0
        return await asyncio.to_thread(self._compact_topic, topic, config, min_files, epochs)

    def _compact_topic(self, topic: str, config: TopicConfig, min_files: int, epochs: dict[int, int]) -> int:
        now_ms = self.clock.now_ms()
        uri = self.tables.table_uri(topic)

        def compact(dt, version: int, files: dict, damage: dict) -> int:
            actions: list = []
            written: list[str] = []
            changed: set[int] = set()
            for p in sorted(set(damage) & set(epochs)):  # repair what a stale compaction overlapped
                removed = plan_overlap_repair(files.get(p, []))
                if removed:
                    log.warning("%s-%d: removing %d file(s) a stale compaction left overlapping newer ones: %s",
                                topic, p, len(removed), [f.path for f in removed])
                    actions += removal_actions(p, removed, now_ms)
                    changed.add(p)
                elif removed is None and (topic, p) not in self._isolated_reported:
                    self._isolated_reported.add((topic, p))
                    log.error("%s-%d: damaged (%s); left as it is and reported: reads of the range fail",
                              topic, p, "; ".join(d.reason for d in damage[p])[:500])
            plans = plan_key_compaction(
                {p: f for p, f in files.items() if p in epochs and p not in damage},  # damage: never fold it
                now_ms=now_ms, min_compaction_lag_ms=config.min_compaction_lag_ms,
                delete_retention_ms=config.delete_retention_ms, min_files=min_files,
            )
            try:
                for plan in plans:
                    plan_actions, path = rewrite_actions(uri, plan, now_ms)
                    actions += plan_actions
                    written += [path] if path else []
                    changed.add(plan.partition)
                if not actions:
                    return 0
                commit_internal(dt, version, actions, {p: epochs[p] for p in changed}, now_ms)
            except BaseException as exc:
                for path in written:
                    object_store.remove_file(path)
                if isinstance(exc, CompactionAbandoned):
                    log.info("compacting %s: %s; planning again next pass", topic, exc)
                    return 0
                raise
            # Files compacted away more than an hour ago are no longer read by anyone.
            dt.vacuum(retention_hours=1, enforce_retention_duration=False, dry_run=False)
            return len(changed)

        return self.tables.under_snapshot(topic, compact)

    async def _group_housekeeping(self) -> None:
        """Session timeouts and rebalance deadlines (often), offset expiry (rarely)."""
        last_expiry = self.clock.monotonic()
        while True:
            await asyncio.sleep(0.1)
            try:
                self.groups.tick()
                now = self.clock.monotonic()
                if (self.coordinators_loaded
                        and (now - last_expiry) * 1000 >= self.settings.offsets_retention_check_interval_ms):
                    last_expiry = now
                    await self.offsets.expire(
                        self.clock.now_ms(),
                        self.settings.offsets_retention_minutes * 60_000,
                        self.groups.active_groups(),
                    )
            except Exception:
                log.exception("group housekeeping failed")

    async def open_partition(self, topic: str, partition: int, replicated: bool) -> PartitionLog:
        """This broker's replica of a partition, opened (recovered) on first use. A
        replicated log reopens with HW at what the table holds: the rest becomes
        visible once the ISR has it again."""
        try:
            return self.logs.get(topic, partition)
        except UnknownTopicOrPartition:
            pass
        config = self._runtime(topic).config
        tiered = await asyncio.to_thread(self.tables.tiered_offset, topic, partition)
        start = await asyncio.to_thread(self.tables.log_start_offset, topic, partition)
        try:
            return self.logs.get(topic, partition)  # opened while we read the table
        except UnknownTopicOrPartition:
            pass
        plog = await asyncio.to_thread(self.logs.open_partition, topic, partition, config, tiered, start)
        if replicated:
            plog.start_replication(max(tiered, plog.log_start_offset))
        return plog

    async def apply_topics(self, image: ClusterImage) -> None:
        """Topics as the controller published them: new ones known, configs current,
        deleted ones (and their local replicas) gone (the cluster node calls it)."""
        for name, doc in image.topics.items():
            info = TopicInfo(
                name=doc["name"], topic_id=doc["topic_id"], partitions=doc["partitions"],
                replication_factor=doc["replication_factor"], configs=dict(doc["configs"]),
                created_ms=doc["created_ms"], internal=doc["internal"],
            )
            runtime = self._topics.get(name)
            if runtime is None or runtime.info.topic_id != info.topic_id:
                if runtime is not None:
                    await self._forget_topic(name, runtime.info)
                self._topics[name] = TopicRuntime(info, self.settings.topic_config(info.configs))
            elif runtime.info != info:
                runtime.info = info
                runtime.config = self.settings.topic_config(info.configs)
                for plog in self.logs.partitions(name):
                    plog.config = runtime.config
                self.tierer.reschedule(name)
        for name in [n for n in self._topics if n not in image.topics]:
            await self._forget_topic(name, self._topics[name].info)
        await asyncio.to_thread(self.catalog.reload)

    def has_topic(self, name: str) -> bool:
        """Whether the last cluster image applied has the topic (cluster port)."""
        return name in self._topics

    def schedule_tiering(self, topic: str) -> None:
        """Tier the topic at the tierer's next pass (cluster port: a new leader)."""
        self.tierer.schedule(topic)

    def leader_epoch(self, plog: PartitionLog) -> int | None:
        """The tierer's leadership view: see :class:`laketail.storage.ports.LeadershipView`."""
        epoch = self.cluster.replicas.leader_epoch(plog.topic, plog.partition, plog)
        if epoch is None or not self.leads(plog.topic, plog.partition):
            return None
        return epoch

    async def _forget_topic(self, name: str, info: TopicInfo) -> None:
        self._topics.pop(name, None)
        self.cluster.replicas.forget_topic(name)
        await self.tierer.forget(name)
        for p in range(info.partitions):
            await self.logs.delete_partition(name, p)

    # -- metadata -----------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        """The live brokers of the cluster (this one included), by id."""
        out = []
        for b in sorted(self.cluster.image.brokers.values(), key=lambda b: b.broker_id):
            if not b.alive:
                continue
            url = httpx.URL(b.url)
            out.append(BrokerInfo(b.broker_id, b.url, url.host, url.port or (443 if url.scheme == "https" else 80),
                                  _endpoints(b.endpoints)))
        if not out:
            out = [BrokerInfo(self.broker_id, self.settings.url, self.settings.host, self.settings.port,
                              _endpoints(advertised_endpoints(self.settings)))]
        return out

    @property
    def controller_id(self) -> int:
        return self.cluster.image.controller_id

    def list_topics(self, include_internal: bool = True) -> list[str]:
        names = sorted(self._topics)
        if not include_internal:
            names = [n for n in names if not self._topics[n].info.internal]
        return names

    def topic(self, name: str) -> TopicInfo:
        runtime = self._topics.get(name)
        if runtime is None:
            raise UnknownTopicOrPartition.topic(name)
        return runtime.info

    def would_auto_create(self, name: str) -> bool:
        """Whether :meth:`topic_for_produce` would create ``name`` now (it does not exist,
        auto-creation is on and the name is not internal); authorization asks this first."""
        return (name not in self._topics and self.settings.auto_create_topics_enable
                and not str(name).startswith("__"))

    async def topic_for_produce(self, name: str) -> TopicInfo:
        """The topic a produce (or a subscription by name) names; when it does not exist
        and ``auto.create.topics.enable`` is set, it is created first with
        ``num.partitions`` and ``default.replication.factor``, as Kafka's broker does for
        a metadata request that allows auto-creation.

        Never created: an internal (``__``) name (UNKNOWN_TOPIC_OR_PARTITION) and an
        invalid one (INVALID_TOPIC_EXCEPTION, Kafka's answer too). Two requests racing
        to create it both get the topic; LEADER_NOT_AVAILABLE (retriable, Kafka's answer
        while a topic is being created) if another broker created it and this one has
        not seen it yet."""
        runtime = self._topics.get(name)
        if runtime is not None:
            return runtime.info
        if not self.would_auto_create(name):
            raise UnknownTopicOrPartition.topic(name)
        validate_topic_name(name)
        try:
            info = await self.create_topic(name)
        except TopicAlreadyExists:
            runtime = self._topics.get(name)
            if runtime is None:
                raise LeaderNotAvailable(f"topic '{name}' is being created") from None
            return runtime.info
        log.info("auto-created topic %s (%d partitions)", name, info.partitions)
        return info

    def _runtime(self, name: str) -> TopicRuntime:
        runtime = self._topics.get(name)
        if runtime is None:
            raise UnknownTopicOrPartition.topic(name)
        return runtime

    def topic_config(self, name: str) -> TopicConfig:
        """The topic's effective configuration (defaults filled in)."""
        return self._runtime(name).config

    def describe_configs(self, name: str) -> list[ConfigEntry]:
        info = self.topic(name)
        effective = self.settings.topic_config(info.configs).to_kafka()
        entries = []
        for key, spec in TOPIC_CONFIGS.items():
            if key in info.configs:
                source, is_default = "DYNAMIC_TOPIC_CONFIG", False
            elif key in self.settings.topic_defaults or key == "max.message.bytes" and (
                self.settings.message_max_bytes != spec.default
            ):
                source, is_default = "STATIC_BROKER_CONFIG", False
            else:
                source, is_default = "DEFAULT_CONFIG", True
            entries.append(ConfigEntry(key, effective[key], is_default, source, spec.doc))
        return entries

    def check_partition(self, topic: str, partition: int) -> TopicInfo:
        """The topic of an existing partition; UNKNOWN_TOPIC_OR_PARTITION otherwise."""
        info = self.topic(topic)
        if not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition.partition(topic, partition)
        return info

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """Leadership from the cluster image; offsets from this broker's replica (exact on
        the leader, up to one fetch behind on a follower) or, without one, from the
        last :meth:`partition_state_async` that asked the leader (zeros before any)."""
        self.check_partition(topic, partition)
        reg = self.cluster.image.partitions.get((topic, partition))
        leader = reg.leader if reg is not None else NO_LEADER
        replicas = list(reg.replicas) if reg is not None else []
        isr = list(reg.isr) if reg is not None else []
        epoch = reg.leader_epoch if reg is not None else 0
        try:
            plog = self.logs.get(topic, partition)
        except UnknownTopicOrPartition:
            remote = self._remote_states.get((topic, partition))
            offsets = remote if remote is not None else (0, 0, 0, 0, 0)
            return PartitionState(topic, partition, leader, replicas, isr, epoch, *offsets)
        return PartitionState(
            topic=topic,
            partition=partition,
            leader=leader,
            replicas=replicas,
            isr=isr,
            leader_epoch=epoch,
            log_start_offset=plog.log_start_offset,
            log_end_offset=plog.log_end_offset,
            high_watermark=plog.high_watermark,
            last_stable_offset=plog.last_stable_offset,
            tiered_offset=plog.tiered_offset,
        )

    def epoch_history(self, topic: str, partition: int) -> tuple[list[tuple[int, int]], int]:
        """This broker's replica's leader epochs, as ``(epoch, start offset)`` oldest
        first, and its log end offset (Kafka's OffsetForLeaderEpoch answers from them);
        UNKNOWN_TOPIC_OR_PARTITION when this broker holds no replica of the partition."""
        self.check_partition(topic, partition)
        plog = self.logs.get(topic, partition)
        return list(plog.epochs), plog.log_end_offset

    def producers(self, topic: str, partition: int) -> dict[int, ProducerEntry]:
        """This broker's replica's idempotent and transactional producers by producer id
        (a copy: epoch, the batches it remembers, the open transaction's first offset);
        UNKNOWN_TOPIC_OR_PARTITION when this broker holds no replica of the partition."""
        self.check_partition(topic, partition)
        return dict(self.logs.get(topic, partition).producer_state.producers)

    def append_routes(self) -> tuple[int, int | None, int | None]:
        """How appends this process did not lead travelled (metrics): forwarded over the
        inter-broker listener, and, with request processes, local hand-offs sent and
        received (None otherwise)."""
        client, server = self.produce_path.handoff, self.handoff_server
        if client is None or server is None:
            return self.produce_path.http_forwards, None, None
        return self.produce_path.http_forwards, client.sent, server.received

    def leads(self, topic: str, partition: int) -> bool:
        return self.cluster.replicas.leads(topic, partition) and not self.cluster.fenced

    def _sibling_log(self, topic: str, partition: int) -> SiblingLog | None:
        """The partition's log as another request process of this broker leads it, when
        this process may read it from disk: a single replica (no leader elections,
        nothing below the high watermark ever truncated)."""
        if self.sibling_logs is None:
            return None
        reg = self.cluster.image.partitions.get((topic, partition))
        if reg is None or len(reg.replicas) != 1 or not reg.online:
            return None
        return self.sibling_logs.get(reg.leader, topic, partition)

    async def wait_leads(self, topic: str, partition: int) -> None:
        """Return when this broker leads the partition, after waiting for a leadership
        the cluster image already gives it (:meth:`ReplicaManager.wait_leading`); else
        raise Kafka's answer: a partition this broker's cluster image does not have is
        UNKNOWN_TOPIC_OR_PARTITION, a known one NOT_LEADER_OR_FOLLOWER or
        LEADER_NOT_AVAILABLE."""
        if not self.leads(topic, partition):
            await self.cluster.replicas.wait_leading(topic, partition)
        if self.leads(topic, partition):
            return
        if (topic, partition) not in self.cluster.image.partitions:
            raise UnknownTopicOrPartition.partition(topic, partition)
        self.cluster.replicas.leader_state(topic, partition)

    def table_uri(self, topic: str) -> str:
        """Where the topic's Delta table lives (docs/architecture.md §4.1); no I/O."""
        return self.tables.table_uri(topic)

    async def table_version(self, topic: str) -> tuple[str, int]:
        """The topic's Delta table: its URI and current version (read under its lock,
        in a worker thread). UNKNOWN_TOPIC_OR_PARTITION for an unknown topic."""
        self.topic(topic)
        delta, lock = self.tables.delta_table(topic)

        def version() -> int:
            with lock:  # the tier child commits through its own handle: at least the version it told us
                delta.update_incremental()
                return delta.version()

        return self.table_uri(topic), await asyncio.to_thread(version)

    async def read_to_log_end(self, topic: str, partition: int):
        """Yield every record of ``topic``-``partition`` (read_uncommitted) up to the log
        end its leader had when the read began: how a coordinator loads its internal
        topic when it takes over (Kafka reads to the log end, too).

        A leader elected moments ago may not have its high watermark up to its log end
        yet (it learns the followers' positions from their next fetches), and fetches
        stop at HW; what it holds above HW was acknowledged by the old leader, so this
        waits for HW to get there rather than load a state missing the last writes.
        Raises :class:`RequestTimedOut` after ``request.timeout.ms`` (callers retry)."""
        state = await self.partition_state_async(topic, partition)
        target = state.log_end_offset
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_ms / 1000
        offset = state.log_start_offset
        while offset < target:
            if state.high_watermark <= offset:
                if asyncio.get_running_loop().time() > deadline:
                    raise RequestTimedOut(
                        f"{topic}-{partition}: high watermark {state.high_watermark} did not reach "
                        f"the log end {target} within request.timeout.ms"
                    )
                await asyncio.sleep(0.1)
                state = await self.partition_state_async(topic, partition)
                continue
            result = await self.fetch(topic, partition, offset, max_records=100_000, max_bytes=64 << 20,
                                      isolation="read_uncommitted")
            if result.next_offset <= offset:
                await self._check_readable(topic, partition, offset, target)
                break  # nothing readable there (a gap at the end): done
            if result.records.num_rows:
                yield result.records
            offset = result.next_offset

    async def _check_readable(self, topic: str, partition: int, offset: int, end: int) -> None:
        """Raise CORRUPT_MESSAGE when a read stopped at ``offset`` below ``end`` because
        the table is damaged there (a read ends where damage begins): a coordinator must
        not take the records before it for the whole partition."""
        damage = await asyncio.to_thread(self.tables.damage, topic)
        for d in damage.get(partition, []):
            if d.refuses_reads and d.last_offset >= offset and d.first_offset < end:
                raise CorruptMessage(
                    f"{topic}-{partition}: offsets {d.first_offset}-{d.last_offset} of the table are damaged "
                    f"({d.reason}); the partition's leader repairs what it can"
                )

    async def partition_state_async(self, topic: str, partition: int) -> PartitionState:
        """The partition's offsets as its leader knows them (asked over HTTP when the
        leader is another broker)."""
        self.check_partition(topic, partition)
        if self.leads(topic, partition) or len(self.cluster.image.brokers) <= 1:
            return self.partition_state(topic, partition)
        resp = await self.cluster.call_leader(
            topic, partition, "GET", f"{INTERNAL}/partitions/{topic}/{partition}/state"
        )
        doc = resp.json()
        offsets = (doc["log_start_offset"], doc["log_end_offset"], doc["high_watermark"],
                   doc["last_stable_offset"], doc["tiered_offset"])
        self._remote_states[(topic, partition)] = offsets
        return PartitionState(
            topic, partition, doc["leader"], doc["replicas"], doc["isr"], doc["leader_epoch"], *offsets
        )

    def partition_states(self, topic: str) -> list[PartitionState]:
        return [self.partition_state(topic, p) for p in range(self.topic(topic).partitions)]

    # -- admin ----------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
        internal_topics_allowed: bool = False,
    ) -> TopicInfo:
        """Create a topic (on the controller). Only the coordinators create the internal
        topics (``internal_topics_allowed``); a client gets INVALID_TOPIC_EXCEPTION."""
        validate_topic_name(name)
        if not internal_topics_allowed:
            check_not_internal(name, "create")
        partitions = self.settings.num_partitions if partitions in (None, -1) else partitions
        rf = (
            self.settings.default_replication_factor
            if replication_factor in (None, -1)
            else replication_factor
        )
        if type(partitions) is not int or not 1 <= partitions <= INT32_MAX:
            raise InvalidPartitions(f"partitions must be an int32 of at least 1, got {partitions}")
        if not name.startswith("__"):  # the internal topics are sized by their own settings
            check_partition_limits(name, partitions, self._client_partitions(), self.settings)
        if type(rf) is not int or not 1 <= rf <= INT16_MAX:
            raise InvalidReplicationFactor(f"replication factor must be an int16 of at least 1, got {rf}")
        # brokers, not cluster members: the request processes of one broker are one broker
        # (two copies on one machine are not replication)
        available = len({request_processes.broker_id_of(b.broker_id) for b in self.brokers()})
        if rf > available and not name.startswith("__"):
            raise InvalidReplicationFactor(
                f"replication factor {rf} is larger than the {available} available broker(s)"
            )
        overrides = self.catalog.normalise_configs(configs or {})
        self.settings.topic_config(overrides)  # validates values against each other
        if validate_only:
            self.catalog.check_can_create(name)
            return TopicInfo(name, "", partitions, rf, overrides, internal=name.startswith("__"))
        # The controller creates it (leftovers of a delete cut short by a crash are
        # cleared before the catalog commit that makes the topic exist).
        async with self._admin_lock:
            self.catalog.check_can_create(name)
            controller = self.cluster.active_controller
            if controller is not None:
                info = await controller.create_topic(name, partitions, rf, overrides)
            else:
                body = {"name": name, "partitions": partitions, "replication_factor": rf, "configs": overrides}
                await self._ask_controller("POST", f"{INTERNAL}/topics", json=body)
                info = self.topic(name)
        return info

    async def create_partitions(
        self, name: str, partitions: int, *, validate_only: bool = False, internal_topics_allowed: bool = False
    ) -> TopicInfo:
        """Kafka's CreatePartitions: topic ``name`` grows to ``partitions`` (on the
        controller). INVALID_PARTITIONS when that is not more than it has or passes the
        partition limits; the internal topics are refused (INVALID_TOPIC_EXCEPTION)."""
        if not internal_topics_allowed:
            check_not_internal(name, "add partitions to")
        info = self.topic(name)
        check_partition_increase(name, info.partitions, partitions)
        if not name.startswith("__"):
            check_partition_limits(name, partitions, self._client_partitions() - info.partitions, self.settings)
        if validate_only:
            return replace(info, partitions=partitions)
        async with self._admin_lock:
            controller = self.cluster.active_controller
            if controller is not None:
                return await controller.create_partitions(name, partitions)
            await self._ask_controller("POST", f"{INTERNAL}/topics/{name}/partitions", json={"partitions": partitions})
            return self.topic(name)

    def _client_partitions(self) -> int:
        """Partitions of every topic clients created (what ``laketail.max.partitions`` bounds)."""
        return sum(self.topic(t).partitions for t in self.list_topics(include_internal=False))

    async def _ask_controller(self, method: str, path: str, **kwargs):
        """An admin change made by the controller; its answer is the new image."""
        resp = await self.cluster.call_controller(method, path, **kwargs)
        await self.cluster.apply_image(ClusterImage.from_json(resp.json()))
        return resp

    async def delete_topic(self, name: str, *, internal_topics_allowed: bool = False) -> None:
        """The catalog commit is the point of no return; the table and hot logs go after
        it (a crash in between leaves leftovers that the next create of the name clears).
        The internal topics are refused (INVALID_TOPIC_EXCEPTION) unless
        ``internal_topics_allowed`` (a request another broker already checked)."""
        if not internal_topics_allowed:
            check_not_internal(name, "delete")
        async with self._admin_lock:
            self.topic(name)
            controller = self.cluster.active_controller
            if controller is not None:
                await controller.delete_topic(name)  # the image drops the replicas
                await asyncio.to_thread(self.tables.delete_table, name)
            else:
                await self._ask_controller("DELETE", f"{INTERNAL}/topics/{name}")

    def remove_leftovers(self, name: str) -> None:
        self.tables.delete_table(name)
        self.logs.remove_orphans({name})

    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str] | None = None, delete: list[str] | None = None
    ) -> TopicInfo:
        """A client's config change; the internal topics are refused (INVALID_TOPIC_EXCEPTION)."""
        check_not_internal(name, "alter the configs of")
        info = self.topic(name)
        merged = dict(info.configs)
        merged.update(self.catalog.normalise_configs(set_configs or {}))
        for key in delete or []:
            if key not in TOPIC_CONFIGS:
                from laketail.errors import InvalidConfig

                raise InvalidConfig(f"unknown topic config '{key}'")
            merged.pop(key, None)
        self.settings.topic_config(merged)  # validates values against each other
        controller = self.cluster.active_controller
        if controller is not None:
            await controller.alter_topic(name, merged)
        else:
            await self._ask_controller("PUT", f"{INTERNAL}/topics/{name}/configs", json=merged)
        return self.topic(name)

    # -- produce and fetch (laketail.produce_path, laketail.fetch_path) ---------------------------
    # Plain methods returning the path's coroutine: no extra await per request.

    def produce(
        self,
        topic: str,
        batch: pa.RecordBatch | pa.Table,
        acks: Acks = "all",
        producer: ProducerBatch | None = None,
        *,
        internal_topics_allowed: bool = False,
        per_record_errors: bool = False,
    ) -> Coroutine[Any, Any, ProduceResult]:
        """See :meth:`laketail.produce_path.ProducePath.produce`."""
        return self.produce_path.produce(topic, batch, acks, producer, internal_topics_allowed=internal_topics_allowed,
                                         per_record_errors=per_record_errors)

    def produce_batch(
        self,
        topic: str,
        partition: int,
        keys: pa.Array,
        values: pa.Array,
        headers: pa.Array,
        timestamps_ms: list[int],
        acks: Acks = "all",
        producer: ProducerBatch | None = None,
    ) -> Coroutine[Any, Any, int]:
        """See :meth:`laketail.produce_path.ProducePath.produce_batch`."""
        return self.produce_path.produce_batch(topic, partition, keys, values, headers, timestamps_ms, acks, producer)

    def produce_nowait(self, topic: str, batch: pa.RecordBatch | pa.Table) -> "asyncio.Task[ProduceResult]":
        """See :meth:`laketail.produce_path.ProducePath.produce_nowait`."""
        return self.produce_path.produce_nowait(topic, batch)

    def append(
        self,
        topic: str,
        partition: int,
        frame: pa.RecordBatch,
        acks: Acks = "all",
        max_timestamp_us: int | None = None,
        producer: ProducerBatch | None = None,
    ) -> Coroutine[Any, Any, int]:
        """See :meth:`laketail.produce_path.ProducePath.append`."""
        return self.produce_path.append(topic, partition, frame, acks, max_timestamp_us, producer)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        timeout_ms: int = 0,
        isolation: IsolationLevel = "read_committed",
    ) -> Coroutine[Any, Any, FetchResult]:
        """See :meth:`laketail.fetch_path.FetchPath.fetch`."""
        return self.fetch_path.fetch(
            topic, partition, offset, max_records=max_records, max_bytes=max_bytes, timeout_ms=timeout_ms,
            isolation=isolation,
        )

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp_ms: int
    ) -> Coroutine[Any, Any, tuple[int, int] | None]:
        """See :meth:`laketail.fetch_path.FetchPath.offset_for_timestamp`."""
        return self.fetch_path.offset_for_timestamp(topic, partition, timestamp_ms)

