"""What the coordinators need from the rest of the broker, and nothing more.

Role: the group, offset and transaction coordinators keep their state in internal
topics (``__consumer_offsets``, ``__transaction_state``) and check the partitions their
requests name. They reach the log only through these ports, as Kafka's coordinators
reach it through ``PartitionWriter``/``CoordinatorLoader`` and never see the
``ReplicaManager``. The :class:`~laketail.broker.Broker` (the composition root) is
passed wherever a port is asked for; :mod:`laketail.coordinator.fakes` holds an
in-memory implementation for unit tests.

Every method here is called from the event loop thread; none blocks it (disk and Delta
work happens behind them in worker threads). Errors are :class:`LaketailError`
subclasses with Kafka's names, raised as they are to the coordinator's caller.
"""

from __future__ import annotations

from typing import AsyncIterator, Protocol

import pyarrow as pa

from laketail.catalog import TopicInfo
from laketail.records import COORDINATOR_PRODUCER_ID, NO_SEQUENCE, Acks, IsolationLevel
from laketail.storage.partition_log import ProducerBatch

INT16_MAX = 2**15 - 1


class TopicDirectory(Protocol):
    """The topics the broker knows (its cluster image), as the coordinators see them."""

    def list_topics(self, include_internal: bool = True) -> list[str]:
        """Every topic name, sorted (internal ``__`` topics unless ``include_internal`` is false)."""
        ...

    def topic(self, name: str) -> TopicInfo:
        """The topic's description. Raises UNKNOWN_TOPIC_OR_PARTITION when it does not exist."""
        ...

    def check_partition(self, topic: str, partition: int) -> TopicInfo:
        """The topic of an existing partition. Raises UNKNOWN_TOPIC_OR_PARTITION when the
        topic does not exist or has no such partition (a pure check: nothing is read)."""
        ...


class CoordinatorLog(TopicDirectory, Protocol):
    """An internal topic as a coordinator's log: create it, append to it, load it back.

    Appends go through the produce path with ``internal_topics_allowed`` (clients are
    refused the internal topics there) and ``acks=all``: a coordinator changes its
    in-memory state only after the record is on every in-sync replica."""

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
        *,
        internal_topics_allowed: bool = False,
    ) -> TopicInfo:
        """Create the internal topic (on the controller; the replication factor is capped
        at the live brokers there). Raises TOPIC_ALREADY_EXISTS when it exists."""
        ...

    async def produce(
        self,
        topic: str,
        batch: pa.RecordBatch | pa.Table,
        acks: Acks = "all",
        producer: ProducerBatch | None = None,
        *,
        internal_topics_allowed: bool = False,
    ) -> object:
        """Append ``batch`` (columns ``key``, ``value``, ``partition``) and return once
        ``acks`` is satisfied. Raises NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT,
        NOT_LEADER_OR_FOLLOWER (forwarded to a leader that moved), ..."""
        ...

    def read_to_log_end(self, topic: str, partition: int) -> AsyncIterator[pa.Table]:
        """Every record of the partition (``RECORD_SCHEMA``, read_uncommitted, control
        rows dropped) up to the log end its leader had when the read began. Raises
        REQUEST_TIMED_OUT when the high watermark does not reach that end within
        ``request.timeout.ms`` (a new leader; callers retry)."""
        ...


class MarkerWriter(TopicDirectory, Protocol):
    """Where the transaction coordinator writes COMMIT/ABORT markers: one frame batch
    appended to a user partition on its leader (here, or forwarded)."""

    async def append(
        self,
        topic: str,
        partition: int,
        frame: pa.RecordBatch,
        acks: Acks = "all",
        max_timestamp_us: int | None = None,
        producer: ProducerBatch | None = None,
    ) -> int:
        """Append ``frame`` (built by :func:`laketail.records.build_frame_batch`) and
        return its base offset once ``acks`` is satisfied. Raises what a produce raises."""
        ...


class CoordinatorFence(Protocol):
    """Whether this broker still runs the coordinators (Kafka fences a coordinator's
    writes with its partition's leader epoch; here the coordinators run on the
    controller, so its epoch in ``_system/controller``), in two parts:

    * the write itself is conditional: it goes as a batch of the producer
      :data:`~laketail.records.COORDINATOR_PRODUCER_ID` with :meth:`coordinator_epoch` as
      its epoch (:func:`coordinator_batch`), and the partition's leader refuses it
      (INVALID_PRODUCER_EPOCH, answered NOT_COORDINATOR) once a newer coordinator has
      written to that partition, so a deposed coordinator's write never lands after its
      successor's;
    * :meth:`check_coordinator_epoch`, after a write and before it is acknowledged:
      a partition the successor has not written to yet takes the old coordinator's write,
      which its successor may not have loaded; it is not acknowledged (the client retries
      at the new coordinator), and it can only be followed, never preceded, by the
      successor's writes of the same keys."""

    def coordinator_epoch(self) -> int:
        """The controller epoch this broker took the coordinators over at."""
        ...

    async def check_coordinator_epoch(self) -> None:
        """Raise NOT_COORDINATOR when another broker has become the controller since this
        one took the coordinators over (a paused controller waking up): its write may be
        missing from the new coordinators' state, so the client must retry there."""
        ...


def coordinator_batch(fence: "CoordinatorFence | None") -> ProducerBatch | None:
    """The producer identity of a coordinator's write (see :class:`CoordinatorFence`):
    no sequence (nothing to deduplicate: a coordinator's record is the state itself),
    the epoch capped at int16, the width of a batch's producer epoch (from 32767 on, all
    coordinators share it and the check after the write fences alone)."""
    if fence is None:
        return None
    return ProducerBatch(COORDINATOR_PRODUCER_ID, min(fence.coordinator_epoch(), INT16_MAX), NO_SEQUENCE)


class ProducerIdBlocks(Protocol):
    """Where producer ids come from: durable blocks, each handed to one taker only
    (Kafka's controller-allocated producer id blocks, KIP-730; here a conflict-checked
    row of ``_system/producer_ids``, :meth:`laketail.cluster.store.ClusterStore.allocate_producer_ids`)."""

    async def allocate_producer_ids(self, size: int, at_least: int = 0) -> tuple[int, int]:
        """A new block ``(first, end)`` of ``size`` ids, none below ``at_least``, none
        ever handed out before. Raises when the block cannot be written (the caller's
        request fails; no id is handed out)."""
        ...


class PartitionOffsets(Protocol):
    """A partition's offsets, as the Broker's ``PartitionState`` (``laketail.broker``) carries them."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...


class FetchedRecords(Protocol):
    """What a fetch returns, as far as a reader of one record needs it."""

    @property
    def records(self) -> pa.Table: ...


class PartitionReader(Protocol):
    """Reads of user partitions for the lag report (any broker answers: a partition led
    elsewhere is asked of its leader over HTTP)."""

    async def partition_state_async(self, topic: str, partition: int) -> PartitionOffsets:
        """The partition's offsets as its leader knows them. Raises
        UNKNOWN_TOPIC_OR_PARTITION, or NOT_LEADER_OR_FOLLOWER/LEADER_NOT_AVAILABLE when
        the leader cannot be asked."""
        ...

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        timeout_ms: int = 0,
        isolation: IsolationLevel = "read_committed",
    ) -> FetchedRecords:
        """Records from ``offset`` on. Raises OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, ..."""
        ...
