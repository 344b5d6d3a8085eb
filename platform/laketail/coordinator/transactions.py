"""The transaction coordinator: producer ids, transactional ids, two-phase commit.

Role: Kafka's transaction protocol on laketail's logs.

* ``init_producer_id`` -- a producer id (and epoch 0) for an idempotent producer; for a
  ``transactional.id``, the same producer id with the epoch bumped, which fences the
  previous session (its requests now get PRODUCER_FENCED) and aborts its open
  transaction.
* ``add_partitions`` / transactional produce -- the transaction becomes Ongoing and
  remembers every partition it touched (a transactional produce adds its partition
  itself, as the broker-side defence of KIP-890 does).
* ``add_offsets`` -- consumer offsets sent to the transaction; they are committed to
  the group only if the transaction commits.
* ``end(commit)`` -- PrepareCommit/PrepareAbort is written to ``__transaction_state``
  (the point of no return), then a COMMIT/ABORT control row to every touched
  partition, then (on commit) the offsets to ``__consumer_offsets``, then
  CompleteCommit/CompleteAbort. A broker that crashes after the prepare finishes the
  transaction when it starts again (:meth:`recover`).
* ``transaction.timeout.ms`` -- each open transaction has a deadline on the
  coordinator's :class:`~laketail.coordinator.timer.CoordinatorTimer` (set when its
  Ongoing state is replayed, at load or after a write; cancelled by any other state);
  :meth:`TransactionCoordinator.expire` aborts those past it, with an epoch bump so the
  late producer is fenced.

Batch transactions (Spark's exactly-once sink): many sessions enlist under one batch
id of one sink; :meth:`commit_batch` commits exactly the sessions it is given, together,
and remembers the batch id; committing a batch id already committed is a no-op that
aborts the sessions enlisted since (a replayed batch writes nothing twice).

Fault injection (tests only): ``LAKETAIL_FAULT_PAUSE_AFTER_PREPARE_MS``, read once when
the coordinator is built, makes every commit or abort wait that long right after its
PrepareCommit/PrepareAbort is in ``__transaction_state`` and before any marker is
written, so a test can kill the broker at exactly that point. Unset (the default), it
costs nothing.

State lives in the internal compacted topic ``__transaction_state``, JSON values, and
in memory, where it changes only through :meth:`TransactionCoordinator.replay` of one
record: at load, each key's latest record; after a write, the record written (Kafka's
``CoordinatorShard.replay``), so a restart reads back exactly what the writes made. Its keys are typed JSON objects, so
no client-chosen name can ever be read back as another kind of record:

* ``{"txn": "<transactional id>"}`` -- a :class:`TxnMetadata`;
* ``{"sink": "<sink id>"}`` -- a :class:`SinkState`;
* ``{"producer_id_block": 1}`` -- ``{"end": n}``, the producer ids handed out so far
  (written by laketail before producer id blocks lived in ``_system/producer_ids``;
  still read, as the floor of the first block taken there).

Producer ids come from durable blocks (Kafka's KIP-730): the coordinator takes
``PID_BLOCK_SIZE`` ids at a time through its ``producer_ids`` port (a conflict-checked
row of ``_system/producer_ids``), so an id is never handed out twice, even by a
coordinator whose load of ``__transaction_state`` was incomplete.

A record goes to the partition ``partition_for_group`` gives for its *legacy name* (the
transactional id, ``__sink:<id>``, ``__producer_id_block``): the bare-string keys written
before typed keys existed, which :func:`decode_key` still reads, so an old record and a
new one of the same state share a partition and the later one wins at load.

Transactional ids starting with ``__`` are reserved (the sink's sessions are named
``__sink:<sink>:<batch>:<hex>``): a client asking for one gets INVALID_REQUEST.

Loading is forgiving: a record whose key or value cannot be decoded is skipped, logged
and counted (:attr:`TransactionCoordinator.skipped_records`); it never stops a start. A
partition whose table is damaged (CORRUPT_MESSAGE) is isolated, as ``__consumer_offsets``'
are (:mod:`laketail.coordinator.isolation`): the transactional ids and sinks that hash to
it are answered COORDINATOR_LOAD_IN_PROGRESS until :meth:`TransactionCoordinator.load_unavailable`
reads it whole (then what it left prepared is finished); every other one is served.

Thread-safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import uuid
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Iterable, Literal

import orjson
import pyarrow as pa

from laketail.bounds import INT64_MAX, bounded_int
from laketail.coordinator.isolation import IsolatedPartitions
from laketail.coordinator.offsets import (
    UNDECODABLE,
    CommittedOffset,
    TopicPartition,
    check_commit,
    partition_for_group,
)
from laketail.coordinator.ports import coordinator_batch
from laketail.coordinator.shards import ShardOwnership
from laketail.coordinator.timer import CoordinatorTimer
from laketail.errors import (
    ConcurrentTransactions,
    CoordinatorLoadInProgress,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTxnState,
    LaketailError,
    NotCoordinator,
    ProducerFenced,
    TransactionalIdNotFound,
    UnknownTopicOrPartition,
)
from laketail.records import build_frame_batch, data_records
from laketail.storage.partition_log import ProducerBatch

if TYPE_CHECKING:
    from laketail.clock import Clock
    from laketail.coordinator.groups import GroupCoordinator
    from laketail.coordinator.offsets import OffsetStore
    from laketail.coordinator.ports import CoordinatorFence, CoordinatorLog, MarkerWriter, ProducerIdBlocks

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
PID_BLOCK_KEY = "__producer_id_block"  # the legacy (bare string) key of the producer-id block
PID_BLOCK_SIZE = 1000
SINK_PREFIX = "__sink:"  # sink sessions' transactional ids; the legacy key prefix of sink state
#: Transactional ids a client may not choose: laketail's own sessions live there.
RESERVED_TRANSACTIONAL_ID_PREFIX = "__"
_LEGACY_SESSION = re.compile(r"__sink:.*:\d+:[0-9a-f]{12}", re.DOTALL)
#: See the module docstring: a test-only pause between PREPARE and the markers.
FAULT_PAUSE_AFTER_PREPARE_ENV = "LAKETAIL_FAULT_PAUSE_AFTER_PREPARE_MS"

TxnState = Literal["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"]
_TXN_STATES = frozenset(TxnState.__args__)  # type: ignore[attr-defined]

#: What a record of ``__transaction_state`` is about: ("txn", transactional id),
#: ("sink", sink id) or ("producer_id_block", "").
StateKey = tuple[Literal["txn", "sink", "producer_id_block"], str]


def encode_key(kind: str, name: str = "") -> bytes:
    """The typed key of one piece of coordinator state (see the module docstring)."""
    if kind == "producer_id_block":
        return orjson.dumps({"producer_id_block": 1})
    if kind not in ("txn", "sink"):
        raise ValueError(f"unknown state kind {kind!r}")
    return orjson.dumps({kind: name})


def legacy_name(key: StateKey) -> str:
    """The bare-string key the same state had before typed keys (it picks the partition)."""
    kind, name = key
    if kind == "producer_id_block":
        return PID_BLOCK_KEY
    return SINK_PREFIX + name if kind == "sink" else name


def decode_key(raw: bytes) -> StateKey:
    """What a ``__transaction_state`` key is about; ValueError when it is no key at all.

    Typed keys are JSON objects with exactly one known field. Anything else is read as
    a legacy bare-string key: ``__producer_id_block``, ``__sink:<sink>:<batch>:<hex>`` (a
    sink session's transaction), ``__sink:<sink>`` (sink state), else a transactional id."""
    if not isinstance(raw, bytes) or not raw:
        raise ValueError("empty key")
    if raw[:1] == b"{":
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and len(doc) == 1:
            (kind, name), = doc.items()
            if kind in ("txn", "sink") and isinstance(name, str) and name:
                return kind, name
            if kind == "producer_id_block":
                return "producer_id_block", ""
    text = raw.decode()  # UnicodeDecodeError is a ValueError
    if text == PID_BLOCK_KEY:
        return "producer_id_block", ""
    if text.startswith(SINK_PREFIX) and not _LEGACY_SESSION.fullmatch(text):
        return "sink", text[len(SINK_PREFIX):]
    return "txn", text


def _int(doc: dict, name: str) -> int:
    value = doc[name]
    if type(value) is not int:
        raise TypeError(f"{name} is {type(value).__name__}, not int")
    return value


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = "Empty"
    partitions: set[TopicPartition] = field(default_factory=set)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    start_ms: int = -1

    def to_json(self) -> bytes:
        return orjson.dumps({
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state,
            "partitions": sorted([t, p] for t, p in self.partitions),
            "offsets": {
                g: [[t, p, c.offset, c.metadata] for (t, p), c in sorted(offs.items())]
                for g, offs in self.offsets.items()
            },
            "start_ms": self.start_ms,
        })

    @classmethod
    def from_json(cls, transactional_id: str, raw: bytes) -> "TxnMetadata":
        """The metadata ``to_json`` wrote; one of :data:`UNDECODABLE` for anything else."""
        doc = orjson.loads(raw)
        if doc["state"] not in _TXN_STATES:
            raise ValueError(f"unknown transaction state {doc['state']!r}")
        partitions = {(str(t), int(p)) for t, p in doc["partitions"]}
        offsets = {
            str(g): {(str(t), int(p)): CommittedOffset(int(o), str(m)) for t, p, o, m in offs}
            for g, offs in doc["offsets"].items()
        }
        return cls(
            transactional_id, _int(doc, "producer_id"), _int(doc, "producer_epoch"), _int(doc, "timeout_ms"),
            doc["state"], partitions, offsets, _int(doc, "start_ms"),
        )


@dataclass
class SinkState:
    sink_id: str
    committed_batch: int = -1
    enlisted: dict[int, list[str]] = field(default_factory=dict)  # batch id -> transactional ids
    committing: tuple[int, list[str]] | None = None

    def to_json(self) -> bytes:
        return orjson.dumps({
            "committed_batch": self.committed_batch,
            "enlisted": {str(b): ids for b, ids in self.enlisted.items()},
            "committing": list(self.committing) if self.committing else None,
        })

    @classmethod
    def from_json(cls, sink_id: str, raw: bytes) -> "SinkState":
        """The state ``to_json`` wrote; one of :data:`UNDECODABLE` for anything else."""
        doc = orjson.loads(raw)
        committing = doc.get("committing")
        enlisted = {int(b): [str(t) for t in ids] for b, ids in doc["enlisted"].items()}
        return cls(
            sink_id,
            _int(doc, "committed_batch"),
            enlisted,
            (int(committing[0]), [str(t) for t in committing[1]]) if committing else None,
        )


class TransactionCoordinator:
    """Kafka's transaction coordinator (see the module docstring).

    Parts (passed in by the broker): ``internal_log`` -- ``__transaction_state``
    (:class:`~laketail.coordinator.ports.CoordinatorLog`); ``markers`` -- where
    COMMIT/ABORT markers are appended (:class:`~laketail.coordinator.ports.MarkerWriter`);
    the sibling ``groups`` (member checks of transactional offset commits) and
    ``offsets`` (where those offsets go at commit); ``clock``; ``producer_ids`` -- durable
    producer id blocks; ``fence`` -- asked after each write to ``__transaction_state``
    whether this broker still runs the coordinators. Event loop thread only;
    one asyncio lock orders the state changes."""

    def __init__(
        self,
        internal_log: "CoordinatorLog",
        markers: "MarkerWriter",
        groups: "GroupCoordinator",
        offsets: "OffsetStore",
        clock: "Clock",
        *,
        producer_ids: "ProducerIdBlocks",
        fence: "CoordinatorFence | None" = None,
        num_partitions: int = 50,
        replication_factor: int = 3,
        max_timeout_ms: int = 900_000,
    ) -> None:
        self.internal_log = internal_log
        self.markers = markers
        self.groups = groups
        self.offsets = offsets
        self.clock = clock
        self.producer_ids = producer_ids
        self.fence = fence
        self.replication_factor = replication_factor
        self.num_partitions = num_partitions
        self.max_timeout_ms = max_timeout_ms
        self._txns: dict[str, TxnMetadata] = {}
        self._by_pid: dict[int, str] = {}
        self._pid_of: dict[str, int] = {}  # transactional id -> the producer id last replayed for it
        self._sinks: dict[str, SinkState] = {}
        self._next_pid = 0  # the next id of the block this coordinator holds
        self._pid_block_end = 0  # the end of that block (excluded)
        self._pid_floor = 0  # ids at or above it may be taken: above what the loaded state names
        self._lock = asyncio.Lock()
        self._topic_ready = False
        #: transaction timeouts (see :meth:`_schedule_timeout`)
        self.timer = CoordinatorTimer(clock)
        self._timed_out: set[str] = set()  # past transaction.timeout.ms, not aborted yet
        #: Partitions whose table is damaged (CORRUPT_MESSAGE): isolated, what hashes to
        #: them refused, reloaded by :meth:`load_unavailable` once repaired.
        self.isolated = IsolatedPartitions(TXN_TOPIC)
        #: Which partitions run here and are loaded (one shard each: the transactional
        #: ids and sinks hashing to it; elected by :meth:`load` or :meth:`load_partition`,
        #: resigned by :meth:`unload_partition`)
        self.ownership = ShardOwnership(TXN_TOPIC)
        #: the epoch of the last :meth:`load` (the coordinators' take-over)
        self.epoch = 0
        #: Records of ``__transaction_state`` the last :meth:`load` could not decode.
        self.skipped_records = 0
        self._pause_after_prepare_s = int(os.environ.get(FAULT_PAUSE_AFTER_PREPARE_ENV) or 0) / 1000

    # -- the log -----------------------------------------------------------------------------

    async def _ensure_topic(self) -> None:
        if self._topic_ready:
            return
        if TXN_TOPIC not in self.internal_log.list_topics():
            await self.internal_log.create_topic(
                TXN_TOPIC, self.num_partitions, self.replication_factor,
                {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
                internal_topics_allowed=True,
            )
        self.num_partitions = self.internal_log.topic(TXN_TOPIC).partitions
        self._topic_ready = True

    async def _write(self, key: StateKey, value: bytes | None) -> None:
        self._check_available(key)  # never over a partition not loaded (isolated): its later load would lose it
        await self._ensure_topic()
        partition = self.partition_of(key)
        generation = self.ownership.generation(partition)
        batch = pa.RecordBatch.from_pydict({
            "key": pa.array([encode_key(*key)], pa.binary()),
            "value": pa.array([value], pa.binary()),
            "partition": pa.array([partition], pa.int32()),
        })
        try:  # conditional on this coordinator's epoch (see CoordinatorFence)
            await self.internal_log.produce(TXN_TOPIC, batch, acks="all", producer=coordinator_batch(self.fence),
                                            internal_topics_allowed=True)
        except InvalidProducerEpoch as exc:
            raise NotCoordinator(f"a newer coordinator has written to {TXN_TOPIC}: {exc}") from exc
        if self.fence is not None:  # a deposed coordinator goes no further (the client retries at the new one)
            await self.fence.check_coordinator_epoch()
        if self.ownership.generation(partition) != generation:
            # unloaded (maybe loaded again) meanwhile: its load read the record from the log
            raise NotCoordinator(f"{TXN_TOPIC}-{partition} was unloaded while the write of {key[0]} "
                                 f"'{key[1]}' was in flight; retry at its coordinator")
        self.replay(key, value)

    def _skip(self, partition: int, offset: int, why: object) -> None:
        self.skipped_records += 1
        log.warning("%s-%d offset %d: skipping a record that cannot be decoded (%r)",
                    TXN_TOPIC, partition, offset, str(why)[:200])

    @property
    def unavailable(self) -> dict[int, str]:
        """Isolated (damaged) partitions -> why; see :mod:`laketail.coordinator.isolation`."""
        return self.isolated.unavailable

    async def _read_partition(self, partition: int) -> dict[StateKey, tuple[bytes | None, int]]:
        """The latest record (value, offset) of each state key in one partition: what
        compaction would keep, and all :meth:`replay` needs (a key's latest record is its
        whole state)."""
        latest: dict[StateKey, tuple[bytes | None, int]] = {}
        async for records in self.internal_log.read_to_log_end(TXN_TOPIC, partition):
            for key, value, offset in data_records(records):
                try:
                    state_key = decode_key(key)
                except UNDECODABLE as exc:
                    self._skip(partition, offset, exc)
                    continue
                latest.pop(state_key, None)  # kept in log order
                latest[state_key] = (value, offset)
        return latest

    def _replay_loaded(self, partition: int, latest: dict[StateKey, tuple[bytes | None, int]]) -> None:
        """Replay what :meth:`_read_partition` read (no await: nothing is served half-loaded)."""
        for state_key, (value, offset) in latest.items():
            try:
                self.replay(state_key, value)
            except UNDECODABLE as exc:
                self._skip(partition, offset, exc)

    def replay(self, key: StateKey, value: bytes | None) -> None:
        """The one way this coordinator's state changes: apply a record of
        ``__transaction_state`` -- at load, each key's latest record; after a write, the
        record written, once it is acknowledged (Kafka's ``CoordinatorShard.replay``). A
        restart so reads back exactly the state the writes made.

        A record is the whole state of its key: a transaction's metadata, a sink's state,
        the legacy producer id block (which only raises the floor of the first block
        taken); a tombstone forgets the key. A value that cannot be decoded forgets the key
        too (its state is unknown) and raises one of :data:`UNDECODABLE`, which a load
        counts as skipped. A transaction's metadata is updated in place, so the live path,
        which holds it across its writes, keeps seeing the current state."""
        kind, name = key
        if kind == "producer_id_block":
            if value is not None:
                self._pid_floor = max(self._pid_floor, _int(orjson.loads(value), "end"))
        elif kind == "sink":
            try:
                sink = SinkState.from_json(name, value) if value is not None else None
            except UNDECODABLE:
                self._sinks.pop(name, None)
                raise
            if sink is None:
                self._sinks.pop(name, None)
            elif (held_sink := self._sinks.get(name)) is not None:
                _assign(held_sink, sink)
            else:
                self._sinks[name] = sink
        else:
            try:
                meta = TxnMetadata.from_json(name, value) if value is not None else None
            except UNDECODABLE:
                self._forget_txn(name)
                raise
            if meta is None:
                self._forget_txn(name)
                return
            replayed_pid = self._pid_of.get(name)  # the held metadata may be changed already
            if replayed_pid is not None and replayed_pid != meta.producer_id:
                self._unmap_pid(replayed_pid, name)
            held = self._txns.get(name)
            if held is not None:
                _assign(held, meta)
            else:
                self._txns[name] = meta
            self._by_pid[meta.producer_id] = name
            self._pid_of[name] = meta.producer_id
            self._schedule_timeout(name, meta)

    def _schedule_timeout(self, transactional_id: str, meta: TxnMetadata) -> None:
        """An Ongoing transaction times out ``transaction.timeout.ms`` after it began
        (``start_ms``, wall clock, so a loaded one keeps its deadline); any other state
        has no deadline."""
        key = ("txn-timeout", transactional_id)
        self._timed_out.discard(transactional_id)
        if meta.state != "Ongoing":
            self.timer.cancel(key)
            return
        due_in_s = (meta.start_ms + meta.timeout_ms - self.clock.now_ms()) / 1000
        self.timer.schedule(key, self.clock.monotonic() + due_in_s, lambda: self._timeout_due(transactional_id))

    def _timeout_due(self, transactional_id: str) -> None:
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state != "Ongoing":
            return
        if self.clock.now_ms() - meta.start_ms > meta.timeout_ms:
            self._timed_out.add(transactional_id)  # :meth:`expire` aborts it
        else:  # not longer than the timeout yet (the wall clock moved back?): again later
            self._schedule_timeout(transactional_id, meta)

    def _forget_txn(self, transactional_id: str) -> None:
        self._txns.pop(transactional_id, None)
        self.timer.cancel(("txn-timeout", transactional_id))
        self._timed_out.discard(transactional_id)
        producer_id = self._pid_of.pop(transactional_id, None)
        if producer_id is not None:
            self._unmap_pid(producer_id, transactional_id)

    def _unmap_pid(self, producer_id: int, transactional_id: str) -> None:
        if self._by_pid.get(producer_id) == transactional_id:
            del self._by_pid[producer_id]

    def _raise_pid_floor(self) -> None:
        """The first block taken is above every id the loaded state names (blocks handed
        out before ``_system/producer_ids`` existed, a transaction whose block record was
        the one skipped)."""
        if self._by_pid:
            self._pid_floor = max(self._pid_floor, max(self._by_pid) + 1)

    async def load(self, epoch: int | None = None) -> None:
        """Run every partition here, elected at ``epoch``, rebuilt from
        ``__transaction_state``: each key's latest record, replayed.

        Forgiving: a record that cannot be decoded is skipped, logged and counted in
        :attr:`skipped_records`, and the rest is loaded. A damaged partition is isolated
        (:attr:`isolated`): its transactional ids and sinks are answered
        COORDINATOR_LOAD_IN_PROGRESS until :meth:`load_unavailable` reads it whole."""
        if TXN_TOPIC in self.internal_log.list_topics():
            self._topic_ready = True
            self.num_partitions = self.internal_log.topic(TXN_TOPIC).partitions
        self.skipped_records = 0
        epoch = self.epoch if epoch is None else epoch
        self.epoch = epoch
        self.ownership.pin(range(0), epoch)
        elected = [p for p in range(self.num_partitions) if self.ownership.elect(p, epoch)]
        loaded: dict[int, dict[StateKey, tuple[bytes | None, int]]] = {}

        async def load_partition(partition: int) -> None:
            loaded[partition] = await self._read_partition(partition)

        if self._topic_ready:
            await self.isolated.load(elected, load_partition)
        else:  # nothing written yet: every shard is empty
            loaded = dict.fromkeys(elected, {})
        # What was loaded replaces what this coordinator had (a reload on becoming the
        # controller again must not keep state another coordinator has since changed).
        for partition in elected:
            self._forget_partition(partition)
        for partition, latest in loaded.items():
            if self.ownership.activate(partition, epoch):
                self._replay_loaded(partition, latest)
        for partition, why in self.isolated.unavailable.items():
            self.ownership.stall(partition, epoch, f"damaged, waiting for its repair: {why}")
        self._raise_pid_floor()

    async def load_unavailable(self) -> None:
        """Load the partitions the last :meth:`load` isolated, each once it reads whole
        (its leader repaired it), and finish what a crash left prepared there. Raises
        what a read raises; the caller retries."""
        loaded_txns: list[TxnMetadata] = []
        loaded_sinks: list[SinkState] = []

        async def load_partition(partition: int) -> None:
            txns, sinks = await self._load_partition(partition, self.epoch)
            loaded_txns.extend(txns)
            loaded_sinks.extend(sinks)

        try:
            await self.isolated.load_unavailable(load_partition)
        finally:  # what the partitions loaded so far left prepared
            await self.recover(loaded_txns, loaded_sinks)

    async def load_partition(self, partition: int, epoch: int | None = None) -> None:
        """Kafka's ``onElection``: run ``partition`` here from ``epoch`` on (default: the
        epoch of the last :meth:`load`): its transactional ids and sinks are answered
        COORDINATOR_LOAD_IN_PROGRESS until its records are read to the high watermark
        and replayed, then what it left prepared is finished. Raises what a read raises,
        and the partition stays loading (the caller loads it again or unloads it); a load
        that finishes after the partition was unloaded or elected again is dropped."""
        txns, sinks = await self._load_partition(partition, self.epoch if epoch is None else epoch)
        await self.recover(txns, sinks)

    async def _load_partition(self, partition: int, epoch: int) -> tuple[list[TxnMetadata], list[SinkState]]:
        """Elect, read and replay one partition; the transactions and sinks it loaded."""
        if not self.ownership.elect(partition, epoch):
            return [], []  # elected at a newer epoch already
        try:
            latest = await self._read_partition(partition)
        except Exception as exc:
            self.ownership.stall(partition, epoch, f"its load failed: {exc}")
            raise
        async with self._lock:  # no key of this partition is served while it loads: no overlap
            if self.ownership.epoch(partition) != epoch:
                return [], []  # unloaded or elected again meanwhile
            self._forget_partition(partition)
            self._replay_loaded(partition, latest)
            self._raise_pid_floor()
            self.ownership.activate(partition, epoch)
        txns = [self._txns[n] for k, n in latest if k == "txn" and n in self._txns]
        sinks = [self._sinks[n] for k, n in latest if k == "sink" and n in self._sinks]
        return txns, sinks

    def unload_partition(self, partition: int, epoch: int | None = None) -> None:
        """Kafka's ``onResignation``: stop running ``partition`` here (its transactional
        ids and sinks are answered NOT_COORDINATOR) and forget their state and deadlines,
        unless it was elected at a newer epoch than ``epoch`` (None: whatever is held)."""
        self.ownership.pin(range(self.num_partitions), self.epoch)
        if self.ownership.resign(partition, epoch) or self.ownership.epoch(partition) is None:
            self._forget_partition(partition)

    def unload(self) -> None:
        """Stop running every partition here (the coordinators moved away)."""
        self.ownership.pin(range(0), self.epoch)
        for partition in self.ownership.owned():
            self.ownership.resign(partition)
        self._txns, self._by_pid, self._pid_of, self._sinks = {}, {}, {}, {}
        self.timer, self._timed_out = CoordinatorTimer(self.clock), set()

    def _forget_partition(self, partition: int) -> None:
        """Drop the state of every transactional id and sink that hashes to ``partition``."""
        for name in [n for n in self._txns if self.partition_of(("txn", n)) == partition]:
            self._forget_txn(name)
        for name in [n for n in self._sinks if self.partition_of(("sink", n)) == partition]:
            del self._sinks[name]

    def partition_of(self, key: StateKey) -> int:
        """The partition of ``__transaction_state`` that keeps ``key``'s state."""
        return partition_for_group(legacy_name(key), self.num_partitions)

    def _check_available(self, key: StateKey) -> None:
        """NOT_COORDINATOR when ``key``'s partition does not run here,
        COORDINATOR_LOAD_IN_PROGRESS while it loads or is isolated."""
        kind, name = key
        whose = f"sink '{name}'" if kind == "sink" else f"transactional id '{name}'"
        partition = self.partition_of(key)
        if self.isolated:
            self.isolated.check(partition, whose)
        self.ownership.check(partition, whose)

    async def recover(self, txns: Iterable[TxnMetadata] | None = None,
                      sinks: Iterable[SinkState] | None = None) -> None:
        """Finish what a crash interrupted: prepared transactions and batch commits
        (of ``txns`` and ``sinks``; default: all this coordinator loaded).

        One that cannot be finished now is logged and left prepared (the next
        ``init_producer_id`` of its transactional id finishes it): never a reason not to
        start."""
        for meta in list(self._txns.values() if txns is None else txns):
            if meta.state in ("PrepareCommit", "PrepareAbort"):
                log.info("completing transaction %r (%s) after restart", meta.transactional_id, meta.state)
                try:
                    await self._complete(meta, meta.state == "PrepareCommit")
                except LaketailError:
                    log.exception("completing transaction %r failed; left %s", meta.transactional_id, meta.state)
        for sink in list(self._sinks.values() if sinks is None else sinks):
            if sink.committing is not None:
                batch_id, ids = sink.committing
                try:
                    await self._finish_batch(sink, batch_id, ids)
                except LaketailError:
                    log.exception("finishing batch %d of sink %r failed", batch_id, sink.sink_id)

    # -- producer ids --------------------------------------------------------------------------------

    async def _new_producer_id(self) -> int:
        if self._next_pid >= self._pid_block_end:
            self._next_pid, self._pid_block_end = await self.producer_ids.allocate_producer_ids(
                PID_BLOCK_SIZE, at_least=self._pid_floor
            )
        pid = self._next_pid
        self._next_pid += 1
        return pid

    async def init_producer_id(
        self,
        transactional_id: str | None = None,
        timeout_ms: int = 60_000,
        expected: tuple[int, int] | None = None,
    ) -> tuple[int, int]:
        """(producer id, epoch) for a new producer session.

        ``expected`` is the (producer id, epoch) a live producer holds when it asks for a
        bump after an abort (Kafka's KIP-360): the bump happens only if that session is
        still the current one, else PRODUCER_FENCED, so a late caller never fences the
        session that replaced it.

        Transactional ids starting with ``__`` are laketail's own (INVALID_REQUEST)."""
        if transactional_id and transactional_id.startswith(RESERVED_TRANSACTIONAL_ID_PREFIX):
            raise InvalidRequest(
                f"transactional id {transactional_id!r} is reserved: ids starting with "
                f"'{RESERVED_TRANSACTIONAL_ID_PREFIX}' belong to laketail's internal sessions"
            )
        return await self._init_producer_id(transactional_id, timeout_ms, expected)

    async def _init_producer_id(
        self, transactional_id: str | None, timeout_ms: int, expected: tuple[int, int] | None,
    ) -> tuple[int, int]:
        if transactional_id:
            self._check_available(("txn", transactional_id))
        async with self._lock:
            if expected is not None and transactional_id:
                meta = self._txns.get(transactional_id)
                if meta is not None and (meta.producer_id, meta.producer_epoch) != tuple(expected):
                    raise ProducerFenced(
                        f"'{transactional_id}' is at producer {meta.producer_id} epoch {meta.producer_epoch}, "
                        f"not {expected[0]} epoch {expected[1]}"
                    )
            if not transactional_id:
                return await self._new_producer_id(), 0
            if not 1 <= timeout_ms <= self.max_timeout_ms:
                raise InvalidRequest(
                    f"transaction.timeout.ms={timeout_ms} is outside [1, {self.max_timeout_ms}]"
                )
            meta = self._txns.get(transactional_id)
            if meta is None:
                meta = TxnMetadata(transactional_id, await self._new_producer_id(), 0, timeout_ms)
            else:
                if meta.state == "Ongoing":
                    await self._prepare_and_complete(meta, commit=False)  # the old session's
                elif meta.state in ("PrepareCommit", "PrepareAbort"):
                    await self._complete(meta, meta.state == "PrepareCommit")
                if meta.producer_epoch >= 32766:  # Kafka moves to a new producer id at Short.MAX
                    meta.producer_id = await self._new_producer_id()
                    meta.producer_epoch = 0
                else:
                    meta.producer_epoch += 1
                meta.timeout_ms = timeout_ms
                meta.state = "Empty"
            await self._write(("txn", transactional_id), meta.to_json())
            meta = self._txns[transactional_id]  # what the write's replay installed
            return meta.producer_id, meta.producer_epoch

    def _check(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        self._check_available(("txn", transactional_id))
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise TransactionalIdNotFound(f"transactional id '{transactional_id}' is unknown; init it first")
        if meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"producer id {producer_id} is not the one of '{transactional_id}'"
            )
        if producer_epoch < meta.producer_epoch:
            raise ProducerFenced(
                f"'{transactional_id}' epoch {producer_epoch} was fenced by epoch {meta.producer_epoch}"
            )
        if producer_epoch > meta.producer_epoch:
            raise InvalidProducerIdMapping(f"epoch {producer_epoch} of '{transactional_id}' was never issued")
        if meta.state in ("PrepareCommit", "PrepareAbort"):
            raise ConcurrentTransactions(f"'{transactional_id}' is completing its transaction")
        return meta

    # -- a transaction's life -------------------------------------------------------------------------

    def _begin(self, meta: TxnMetadata) -> None:
        if meta.state != "Ongoing":
            meta.state = "Ongoing"
            meta.start_ms = self.clock.now_ms()
            meta.partitions = set()
            meta.offsets = {}

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> None:
        async with self._lock:
            meta = self._check(transactional_id, producer_id, producer_epoch)
            for topic, partition in partitions:
                self.markers.check_partition(topic, partition)  # UNKNOWN_TOPIC_OR_PARTITION
            begins = meta.state != "Ongoing"
            self._begin(meta)
            if begins or not set(partitions) <= meta.partitions:  # a change the log must hold too
                meta.partitions |= set(partitions)
                await self._write(("txn", transactional_id), meta.to_json())

    async def check_transactional_produce(self, producer_id: int, producer_epoch: int,
                                          topic: str, partition: int) -> None:
        """Before a transactional append: the producer is current and its transaction
        includes the partition (added here if it was not)."""
        transactional_id = self._by_pid.get(producer_id)
        loading = self.ownership.loading()
        if transactional_id is None and loading:  # maybe the id of a transactional id not loaded
            raise CoordinatorLoadInProgress(
                f"producer id {producer_id} is not among the transactional ids loaded, and "
                f"{TXN_TOPIC} partitions {sorted(loading)} are still loading: {sorted(set(loading.values()))[:3]}"
            )
        if transactional_id is None:
            raise InvalidProducerIdMapping(f"producer id {producer_id} has no transactional id")
        await self.add_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)])

    def transactional_id_of(self, producer_id: int) -> str | None:
        """The transactional id ``producer_id`` was issued for; None when this coordinator
        does not know it (an idempotent producer, or the coordinator runs elsewhere)."""
        return self._by_pid.get(producer_id)

    def check_idempotent_produce(self, producer_id: int, producer_epoch: int) -> None:
        """A non-transactional batch from a transactional producer must still be current."""
        transactional_id = self._by_pid.get(producer_id)
        if transactional_id is not None:
            self._check(transactional_id, producer_id, producer_epoch)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                          generation_id: int = -1, member_id: str = "") -> None:
        """Offsets to commit for ``group_id`` if, and only if, the transaction commits."""
        async with self._lock:
            meta = self._check(transactional_id, producer_id, producer_epoch)
            if generation_id >= 0 or member_id:
                self.groups.check_member(group_id, generation_id, member_id)
            # Checked now, not at commit: after PREPARE the commit cannot fail any more,
            # and a refused request must leave the transaction as it was.
            check_commit(self.markers.topic, offsets)
            self._begin(meta)
            meta.offsets.setdefault(group_id, {}).update(offsets)
            await self._write(("txn", transactional_id), meta.to_json())

    async def end(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnState:
        async with self._lock:
            meta = self._check(transactional_id, producer_id, producer_epoch)
            if meta.state != "Ongoing":
                if meta.state in ("Empty", "CompleteCommit", "CompleteAbort"):
                    return meta.state  # nothing open: committing or aborting nothing is fine
                raise InvalidTxnState(f"'{transactional_id}' is {meta.state}")
            await self._prepare_and_complete(meta, commit)
            return meta.state

    async def _prepare_and_complete(self, meta: TxnMetadata, commit: bool) -> None:
        meta.state = "PrepareCommit" if commit else "PrepareAbort"
        await self._write(("txn", meta.transactional_id), meta.to_json())
        if self._pause_after_prepare_s > 0:
            log.warning("fault injection: %s is %s; pausing %.1fs before its markers",
                        meta.transactional_id, meta.state, self._pause_after_prepare_s)
            await asyncio.sleep(self._pause_after_prepare_s)
        await self._complete(meta, commit)

    async def _complete(self, meta: TxnMetadata, commit: bool) -> None:
        kind = "COMMIT" if commit else "ABORT"
        await asyncio.gather(*(
            self.write_marker(topic, partition, meta.producer_id, meta.producer_epoch, kind)
            for topic, partition in sorted(meta.partitions)
        ))
        if commit:
            for group_id, offsets in meta.offsets.items():
                # A topic deleted since add_offsets must not leave the transaction
                # prepared forever (recover() would fail every start): skip it.
                live = {tp: c for tp, c in offsets.items() if self._partition_exists(*tp)}
                for topic, partition in offsets.keys() - live.keys():
                    log.warning("%s: %s-%d is gone; its offset for group %s is dropped",
                                meta.transactional_id, topic, partition, group_id)
                await self.offsets.commit(group_id, live)
        meta.state = "CompleteCommit" if commit else "CompleteAbort"
        meta.partitions = set()
        meta.offsets = {}
        await self._write(("txn", meta.transactional_id), meta.to_json())

    def _partition_exists(self, topic: str, partition: int) -> bool:
        try:
            self.markers.check_partition(topic, partition)
        except UnknownTopicOrPartition:
            return False
        return True

    async def write_marker(self, topic: str, partition: int, producer_id: int, epoch: int, kind: str) -> None:
        if not self._partition_exists(topic, partition):
            return  # the topic was deleted meanwhile
        marker = build_frame_batch(
            timestamps_us=[self.clock.now_ms() * 1000], keys=[None], values=[None],
            producer_id=producer_id, producer_epoch=epoch, transactional=True, control=kind,
        )
        # acks=all: a marker is only written once every in-sync replica has it.
        await self.markers.append(topic, partition, marker, "all",
                                 producer=ProducerBatch(producer_id, epoch, -1, True, kind))

    def tick(self) -> list[str]:
        """Transactions open past ``transaction.timeout.ms`` (their deadlines on
        :attr:`timer` came due); :meth:`expire` aborts them."""
        self.timer.poll()
        return sorted(t for t in self._timed_out if (m := self._txns.get(t)) is not None and m.state == "Ongoing")

    async def expire(self) -> int:
        """Abort timed-out transactions and bump their epoch (fencing the late producer)."""
        expired = self.tick()
        async with self._lock:
            for transactional_id in expired:
                meta = self._txns.get(transactional_id)
                if meta is None or meta.state != "Ongoing":
                    continue
                log.info("aborting %s: open longer than transaction.timeout.ms", transactional_id)
                await self._prepare_and_complete(meta, commit=False)
                meta.producer_epoch += 1
                await self._write(("txn", transactional_id), meta.to_json())
        return len(expired)

    def describe(self, transactional_id: str) -> TxnMetadata:
        self._check_available(("txn", transactional_id))
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise TransactionalIdNotFound(f"transactional id '{transactional_id}' is unknown")
        return meta

    def list_transactions(self) -> list[TxnMetadata]:
        """Every transactional id this coordinator knows, by id (Kafka's ListTransactions)."""
        return [self._txns[t] for t in sorted(self._txns)]

    # -- batch transactions (Spark's sink) -------------------------------------------------------------

    async def enlist(self, sink_id: str, batch_id: int, timeout_ms: int = 60_000) -> tuple[str, int, int]:
        """A fresh transactional session for one writer attempt of ``batch_id``."""
        _check_batch_id(batch_id)
        self._check_available(("sink", sink_id))
        while True:  # a fresh session lives in a partition served here (the sink's is): else draw again
            transactional_id = f"{SINK_PREFIX}{sink_id}:{batch_id}:{uuid.uuid4().hex[:12]}"
            partition = partition_for_group(transactional_id, self.num_partitions)
            if partition not in self.unavailable and self.ownership.serves(partition):
                break
        producer_id, epoch = await self._init_producer_id(transactional_id, timeout_ms, None)
        async with self._lock:
            sink = self._sinks.get(sink_id) or SinkState(sink_id)  # installed by its first write's replay
            sink.enlisted.setdefault(batch_id, []).append(transactional_id)
            await self._write(("sink", sink_id), sink.to_json())
        return transactional_id, producer_id, epoch

    async def commit_batch(self, sink_id: str, batch_id: int, transactional_ids: list[str]) -> bool:
        """Commit exactly ``transactional_ids`` as batch ``batch_id`` (abort the batch's
        other sessions). False, with every session of the batch aborted, when the batch
        id was committed before. A batch nobody enlisted is INVALID_TXN_STATE: committing
        it would only move the sink's committed batch id past batches still to come."""
        _check_batch_id(batch_id)
        self._check_available(("sink", sink_id))
        async with self._lock:
            sink = self._sinks.get(sink_id) or SinkState(sink_id)  # installed by its first write's replay
            self._check_sessions_available(sink.enlisted.get(batch_id, []) + transactional_ids)
            if batch_id <= sink.committed_batch:
                await self._abort_sessions(sink.enlisted.pop(batch_id, []))
                await self._write(("sink", sink_id), sink.to_json())
                return False
            if batch_id not in sink.enlisted:
                raise InvalidTxnState(
                    f"nobody enlisted in batch {batch_id} of '{sink_id}': enlist a session first, "
                    "or abort the batch when it wrote nothing"
                )
            unknown = [t for t in transactional_ids if t not in sink.enlisted.get(batch_id, [])]
            if unknown:
                raise InvalidTxnState(f"sessions {unknown} were not enlisted in batch {batch_id} of '{sink_id}'")
            # A session aborted meanwhile (transaction.timeout.ms) lost its records:
            # the batch must not be reported committed without them.
            lost = [
                t for t in transactional_ids
                if (meta := self._txns.get(t)) is None or meta.state in ("PrepareAbort", "CompleteAbort")
            ]
            if lost:
                raise InvalidTxnState(
                    f"sessions {lost} of batch {batch_id} of '{sink_id}' were aborted "
                    "(transaction.timeout.ms?); abort the batch and write it again"
                )
            sink.committing = (batch_id, list(transactional_ids))
            await self._write(("sink", sink_id), sink.to_json())  # the batch's point of no return
            sink = self._sinks[sink_id]  # what the write's replay installed
            await self._finish_batch(sink, batch_id, transactional_ids)
            return True

    async def _finish_batch(self, sink: SinkState, batch_id: int, transactional_ids: list[str]) -> None:
        for transactional_id in transactional_ids:
            meta = self._txns.get(transactional_id)
            if meta is None:
                continue
            if meta.state == "Ongoing":
                await self._prepare_and_complete(meta, commit=True)
            elif meta.state in ("PrepareCommit", "PrepareAbort"):
                await self._complete(meta, True)
        others = [t for t in sink.enlisted.get(batch_id, []) if t not in transactional_ids]
        await self._abort_sessions(others)
        sink.committed_batch = max(sink.committed_batch, batch_id)
        sink.committing = None
        for b in [b for b in sink.enlisted if b <= batch_id]:
            del sink.enlisted[b]
        await self._write(("sink", sink.sink_id), sink.to_json())
        for transactional_id in transactional_ids + others:  # sessions are single-use
            await self._forget(transactional_id)

    async def abort_batch(self, sink_id: str, batch_id: int) -> None:
        _check_batch_id(batch_id)
        self._check_available(("sink", sink_id))
        async with self._lock:
            sink = self._sinks.get(sink_id) or SinkState(sink_id)  # installed by its first write's replay
            self._check_sessions_available(sink.enlisted.get(batch_id, []))
            ids = sink.enlisted.pop(batch_id, [])
            await self._abort_sessions(ids)
            await self._write(("sink", sink_id), sink.to_json())
            for transactional_id in ids:
                await self._forget(transactional_id)

    async def _abort_sessions(self, transactional_ids: list[str]) -> None:
        for transactional_id in transactional_ids:
            meta = self._txns.get(transactional_id)
            if meta is not None and meta.state == "Ongoing":
                await self._prepare_and_complete(meta, commit=False)

    async def _forget(self, transactional_id: str) -> None:
        meta = self._txns.get(transactional_id)
        if meta is not None and meta.state in ("Empty", "CompleteCommit", "CompleteAbort"):
            # A tombstone keeps __transaction_state small; nobody is ever handed this
            # transactional id again, so its producer id stays unusable.
            await self._write(("txn", transactional_id), None)

    def _check_sessions_available(self, transactional_ids: list[str]) -> None:
        for transactional_id in transactional_ids:
            self._check_available(("txn", transactional_id))

    def sink(self, sink_id: str) -> SinkState:
        self._check_available(("sink", sink_id))
        return self._sinks.get(sink_id) or SinkState(sink_id)


def _assign(held: "TxnMetadata | SinkState", new: "TxnMetadata | SinkState") -> None:
    """Give ``held`` the fields of ``new`` (same type), keeping the object callers hold."""
    for f in fields(new):
        setattr(held, f.name, getattr(new, f.name))


def _check_batch_id(batch_id: int) -> None:
    """A sink's batch id is Spark's ``batchId``, a non-negative int64 (INVALID_REQUEST)."""
    bounded_int(batch_id, "batch id", 0, INT64_MAX)
