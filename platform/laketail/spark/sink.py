"""The ``laketail`` sink: exactly-once writes from Spark through batch transactions.

Columns, as Spark's Kafka sink: ``value`` (required, binary or string), ``key``,
``headers`` (array<struct<key string, value binary>>), ``topic`` (unless the ``topic``
option names one; the option wins) and ``partition``; a ``timestamp`` column, when
present, becomes the records' create time. For a topic with typed columns, a
``value_struct`` column may stand in for ``value``: each row's value is then encoded
with the latest schema of the topic's ``<topic>-value`` subject, in Confluent's wire
format (:mod:`laketail.spark.typed`); one that does not fit the schema fails the task,
so the batch's transaction aborts.

Protocol (docs/architecture.md §9.5 and §10.2), per batch id of a sink id:

1. Each task attempt that has rows *enlists*: ``POST /v1/sinks/{sink}/batches/{batch}/enlist``
   hands it a fresh transactional session (producer id and epoch).
2. It produces its rows transactionally, per partition, through the ``/v1`` Arrow
   per-partition endpoint with producer id, epoch and sequence (so a retried request
   is deduplicated), and returns its transactional id in its commit message.
3. The driver's commit sends exactly the ids it received to
   ``POST /v1/sinks/{sink}/batches/{batch}/commit``: those sessions commit together
   (read_committed readers see all of the batch or none of it); every other session
   of the batch -- failed or speculative attempts -- aborts. A batch id committed
   before makes this a no-op (``committed: false``), so a batch Spark replays after a
   crash is not written twice. A failed job calls ``/abort``; so does a batch no task
   wrote to (the broker refuses to commit a batch nobody enlisted in).

Ids: a streaming query's batch id is Spark's micro-batch id (executors read it from
the task's local property ``streaming.sql.batchId``); its sink id is the ``sinkId``
option, else one derived from the ``checkpointLocation`` option, else the query id --
all stable across restarts of the query. A batch write commits as batch ``batchId``
(default: now in microseconds) of sink ``sinkId`` (default: a fresh id).

Keyed records without a partition go where Kafka's default partitioner puts them
(murmur2 of the key); records with neither go to one partition per task (sticky).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from laketail.errors import LaketailError
from laketail.partitioner import partition_for_key
from laketail.records import TYPED_COLUMNS
from laketail.spark.columns import sink_table
from laketail.spark.gateway import SparkGateway
from laketail.spark.options import SinkOptions
from laketail.spark.typed import encode_values
from laketail.spark.worker import settle_worker

log = logging.getLogger(__name__)

#: Bounds on one produce request of a writer task.
CHUNK_ROWS = 20_000
CHUNK_BYTES = 4 * 1024 * 1024
_PRODUCE_COLUMNS = ("key", "value", "headers", "timestamp")


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task attempt wrote: its session (``None`` when it had no rows)."""

    sink_id: str
    batch_id: int
    transactional_id: str | None
    records: int


@dataclass
class _Session:
    transactional_id: str
    producer_id: int
    producer_epoch: int


class TaskWrite:
    """One task attempt's writes into its own transactional session."""

    def __init__(self, options: SinkOptions, sink_id: str, batch_id: int, task_partition: int) -> None:
        self.options = options
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.task_partition = task_partition
        self.gateway = SparkGateway(options.servers, security=options.security, api_timeout_ms=options.api_timeout_ms)
        self.session: _Session | None = None
        self.sequences: dict[tuple[str, int], int] = {}
        self.partition_counts: dict[str, int] = {}
        self.records = 0
        #: subject -> (schema id, codec), for value_struct and key_struct
        self.value_schemas: dict[str, tuple[int, Any]] = {}

    def run(self, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
        try:
            for batch in batches:
                if batch.num_rows:
                    self._write(sink_table(batch, self.options.topic))
        finally:
            self.gateway.close()
        tid = self.session.transactional_id if self.session else None
        return SinkCommit(self.sink_id, self.batch_id, tid, self.records)

    def _write(self, table: pa.Table) -> None:
        for column in TYPED_COLUMNS:  # value_struct, key_struct: encoded into value, key
            if column in table.column_names:
                table = encode_values(table, self.gateway, self.value_schemas, column)
        for (topic, partition), rows in self._by_partition(table):
            if self.session is None:
                self.session = _Session(*self.gateway.enlist(
                    self.sink_id, self.batch_id, self.options.transaction_timeout_ms
                ))
            body = rows.select([c for c in _PRODUCE_COLUMNS if c in rows.column_names])
            for chunk in _chunks(body):
                sequence = self.sequences.get((topic, partition), 0)
                self.gateway.produce_transactional(
                    topic, partition, chunk, self.session.producer_id, self.session.producer_epoch, sequence
                )
                self.sequences[(topic, partition)] = sequence + chunk.num_rows
                self.records += chunk.num_rows

    def _count(self, topic: str) -> int:
        if topic not in self.partition_counts:
            self.partition_counts[topic] = self.gateway.partition_count(topic, auto_create=True)
        return self.partition_counts[topic]

    def _by_partition(self, table: pa.Table) -> Iterator[tuple[tuple[str, int], pa.Table]]:
        """Rows grouped by (topic, partition), in their order within each group."""
        topics = table.column("topic").to_pylist()
        explicit = table.column("partition").to_pylist() if "partition" in table.column_names else None
        keys = table.column("key").to_pylist() if "key" in table.column_names else None
        groups: dict[tuple[str, int], list[int]] = {}
        for i, topic in enumerate(topics):
            partition = explicit[i] if explicit is not None else None
            if partition is None:
                key = keys[i] if keys is not None else None
                count = self._count(topic)
                partition = partition_for_key(key, count) if key is not None else self.task_partition % count
            groups.setdefault((topic, partition), []).append(i)
        for tp, rows in groups.items():
            yield tp, table if len(groups) == 1 else table.take(pa.array(rows, pa.int64()))


def _chunks(table: pa.Table) -> Iterator[pa.Table]:
    """``table`` cut into produce requests of at most CHUNK_ROWS rows and about CHUNK_BYTES."""
    n = table.num_rows
    if n == 0:
        return
    per_row = max(1, table.nbytes // n)
    step = max(1, min(CHUNK_ROWS, CHUNK_BYTES // per_row))
    for offset in range(0, n, step):
        yield table.slice(offset, step)


def _task_partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("laketail")``: the whole write is one batch of one sink."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.sink_id = options.sink_id or f"spark-write-{uuid.uuid4().hex}"
        self.batch_id = options.batch_id if options.batch_id is not None else time.time_ns() // 1000

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        settle_worker()
        return TaskWrite(self.options, self.sink_id, self.batch_id, _task_partition()).run(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        ids = [m.transactional_id for m in messages if isinstance(m, SinkCommit) and m.transactional_id]
        with self._gateway() as gateway:
            if not ids:  # no task wrote: only sessions of failed attempts may be left to abort
                gateway.abort_batch(self.sink_id, self.batch_id)
            elif not gateway.commit_batch(self.sink_id, self.batch_id, ids):
                log.info("batch %s of sink %s was committed before: nothing written twice", self.batch_id, self.sink_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_batch(self.options, self.sink_id, self.batch_id, messages)

    def _gateway(self) -> SparkGateway:
        return driver_gateway(self.options)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("laketail")``: micro-batch N is batch N of the sink."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        settle_worker()
        context = TaskContext.get()
        batch = None if context is None else context.getLocalProperty("streaming.sql.batchId")
        assert context is not None and batch is not None, "Spark runs a streaming write in a task of a batch"
        batch_id = int(batch)
        sink_id = self.options.sink_id or f"spark-query-{context.getLocalProperty('sql.streaming.queryId')}"
        return TaskWrite(self.options, sink_id, batch_id, context.partitionId()).run(iterator)

    def _sink_id(self, messages: list[WriterCommitMessage | None]) -> str | None:
        if self.options.sink_id:
            return self.options.sink_id
        return next((m.sink_id for m in messages if isinstance(m, SinkCommit)), None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sink_id = self._sink_id(messages)
        if sink_id is None:
            return  # no task reported: nothing was enlisted under a sink id we know
        ids = [m.transactional_id for m in messages if isinstance(m, SinkCommit) and m.transactional_id]
        with self._gateway() as gateway:
            if not ids:  # no task wrote: only sessions of failed attempts may be left to abort
                gateway.abort_batch(sink_id, batchId)
            elif not gateway.commit_batch(sink_id, batchId, ids):
                log.info("batch %s of sink %s was committed before: a replay, nothing written twice", batchId, sink_id)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sink_id = self._sink_id(messages)
        if sink_id is not None:
            abort_batch(self.options, sink_id, batchId, messages)

    def _gateway(self) -> SparkGateway:
        return driver_gateway(self.options)


def driver_gateway(options: SinkOptions) -> SparkGateway:
    return SparkGateway(options.servers, security=options.security, api_timeout_ms=options.api_timeout_ms)


def abort_batch(options: SinkOptions, sink_id: str, batch_id: int, messages: list[WriterCommitMessage | None]) -> None:
    """Abort a failed batch's sessions. When the cluster cannot be reached (the outage
    that failed the batch, often), the sessions end anyway: the batch's next attempt
    aborts every session of the batch it did not enlist, and the broker aborts any
    other after ``transaction.timeout.ms``. So a failed abort is a warning when a task
    reported a session (its records stay undecided until then), and only informative
    when none did (nothing leaked: read_committed readers wait on nothing)."""
    sessions = [m.transactional_id for m in messages if isinstance(m, SinkCommit) and m.transactional_id]
    try:
        with driver_gateway(options) as gateway:
            gateway.abort_batch(sink_id, batch_id)
    except LaketailError as exc:
        level = logging.WARNING if sessions else logging.INFO
        log.log(level, "abort of batch %s of sink %s did not reach the cluster (%s); %s", batch_id, sink_id, exc,
                f"sessions {sessions} end with the batch's next attempt or after transaction.timeout.ms="
                f"{options.transaction_timeout_ms}" if sessions else "no task reported a session: nothing leaked")

