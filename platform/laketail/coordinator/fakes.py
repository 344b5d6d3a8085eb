"""In-memory implementations of the coordinator ports, for unit tests.

:class:`InMemoryLog` is a :class:`~laketail.coordinator.ports.CoordinatorLog` and a
:class:`~laketail.coordinator.ports.MarkerWriter` at once: topics are a dict, each
partition a list of rows, appends take effect at once (``acks`` is accepted and
ignored) and :meth:`InMemoryLog.read_to_log_end` returns what was appended, in
``RECORD_SCHEMA``. With it and a :class:`~laketail.clock.ManualClock` the group, offset
and transaction coordinators run in milliseconds, without a broker or a Delta table.

What it keeps of the real contract: UNKNOWN_TOPIC_OR_PARTITION for unknown topics and
partitions, TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION for a client append to an
internal topic, and control rows (markers) skipped by readers as the real log's are.
What it leaves out: replication, the produce path's validation, timestamps' types.
:attr:`InMemoryLog.fail_appends` makes appends raise, to test what a coordinator does
when its log write fails. Event loop thread only, like the real ports.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, AsyncIterator

import pyarrow as pa

from laketail.catalog import TopicInfo, check_not_internal
from laketail.errors import LaketailError, TopicAlreadyExists, UnknownTopicOrPartition
from laketail.records import RECORD_SCHEMA, Acks
from laketail.storage.partition_log import ProducerBatch

if TYPE_CHECKING:
    from laketail.coordinator.ports import CoordinatorLog, MarkerWriter, ProducerIdBlocks


class InMemoryLog:
    """Topics and their records in memory (see the module docstring)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.rows: dict[tuple[str, int], list[dict]] = {}
        #: ``(topic, partition, producer_id, producer_epoch, kind)`` of each marker written
        self.markers: list[tuple[str, int, int, int, str]] = []
        #: when set, every append (produce or marker) raises it, writing nothing
        self.fail_appends: LaketailError | None = None

    # -- topics (TopicDirectory) -----------------------------------------------------------------

    def add_topic(self, name: str, partitions: int = 1) -> TopicInfo:
        """A topic as a test wants it (any name; replaces one of the same name)."""
        info = TopicInfo(name, uuid.uuid4().hex, partitions, 1, {}, internal=name.startswith("__"))
        self.topics[name] = info
        for p in range(partitions):
            self.rows.setdefault((name, p), [])
        return info

    def delete_topic(self, name: str) -> None:
        info = self.topics.pop(name)
        for p in range(info.partitions):
            self.rows.pop((name, p), None)

    def list_topics(self, include_internal: bool = True) -> list[str]:
        return sorted(n for n, info in self.topics.items() if include_internal or not info.internal)

    def topic(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartition.topic(name)
        return info

    def check_partition(self, topic: str, partition: int) -> TopicInfo:
        info = self.topic(topic)
        if not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition.partition(topic, partition)
        return info

    # -- the coordinator log (CoordinatorLog) -------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
        *,
        internal_topics_allowed: bool = False,
    ) -> TopicInfo:
        if not internal_topics_allowed:
            check_not_internal(name, "create")
        if name in self.topics:
            raise TopicAlreadyExists(f"topic '{name}' already exists")
        return self.add_topic(name, partitions or 1)

    async def produce(
        self,
        topic: str,
        batch: pa.RecordBatch | pa.Table,
        acks: Acks = "all",
        producer: ProducerBatch | None = None,
        *,
        internal_topics_allowed: bool = False,
    ) -> list[int]:
        """Append each row (``key``, ``value``, ``partition``) to its partition; returns
        the offsets, in row order."""
        if not internal_topics_allowed:
            check_not_internal(topic, "append to")
        columns = batch.to_pydict()
        n = batch.num_rows
        partitions = columns.get("partition", [0] * n)
        for p in partitions:
            self.check_partition(topic, p)
        if self.fail_appends is not None:
            raise self.fail_appends
        offsets = []
        for i in range(n):
            offsets.append(self._append_row(topic, partitions[i], columns.get("key", [None] * n)[i],
                                            columns.get("value", [None] * n)[i], None, producer))
        return offsets

    async def read_to_log_end(self, topic: str, partition: int) -> AsyncIterator[pa.Table]:
        self.check_partition(topic, partition)
        rows = [row for row in self.rows[(topic, partition)] if row["control"] is None]
        if rows:
            yield pa.Table.from_pylist(rows, RECORD_SCHEMA)

    # -- markers (MarkerWriter) -----------------------------------------------------------------------

    async def append(
        self,
        topic: str,
        partition: int,
        frame: pa.RecordBatch,
        acks: Acks = "all",
        max_timestamp_us: int | None = None,
        producer: ProducerBatch | None = None,
    ) -> int:
        self.check_partition(topic, partition)
        if self.fail_appends is not None:
            raise self.fail_appends
        base = len(self.rows[(topic, partition)])
        columns = frame.to_pydict()
        for i in range(frame.num_rows):
            self._append_row(topic, partition, columns["key"][i], columns["value"][i], columns["control"][i], producer)
        if producer is not None and producer.control is not None:
            self.markers.append((topic, partition, producer.producer_id, producer.producer_epoch, producer.control))
        return base

    def _append_row(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                    control: str | None, producer: ProducerBatch | None) -> int:
        rows = self.rows[(topic, partition)]
        offset = len(rows)
        rows.append({
            "partition": partition, "offset": offset, "timestamp": 0, "timestamp_type": 0,
            "key": key, "value": value, "headers": None,
            "producer_id": producer.producer_id if producer is not None else -1,
            "producer_epoch": producer.producer_epoch if producer is not None else -1,
            "sequence": -1, "transactional": bool(producer is not None and producer.transactional),
            "control": control, "leader_epoch": 0,
        })
        return offset


class InMemoryProducerIdBlocks:
    """A :class:`~laketail.coordinator.ports.ProducerIdBlocks` in memory: share one
    between coordinators to stand for the cluster's ``_system/producer_ids``."""

    def __init__(self) -> None:
        self.next_producer_id = 0
        #: every block handed out, in order
        self.blocks: list[tuple[int, int]] = []

    async def allocate_producer_ids(self, size: int, at_least: int = 0) -> tuple[int, int]:
        first = max(self.next_producer_id, at_least)
        self.next_producer_id = first + size
        self.blocks.append((first, first + size))
        return first, first + size


if TYPE_CHECKING:  # mypy checks the fake against the ports it stands in for
    _AS_LOG: CoordinatorLog = InMemoryLog()
    _AS_MARKERS: MarkerWriter = InMemoryLog()
    _AS_BLOCKS: ProducerIdBlocks = InMemoryProducerIdBlocks()
