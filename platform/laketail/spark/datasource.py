"""The ``laketail`` Python data source: Spark's Kafka source and sink, over laketail.

``spark.read`` / ``spark.readStream`` ``.format("laketail")`` read topics with the
Kafka source's columns and options (:mod:`laketail.spark.options`); ``df.write`` /
``df.writeStream`` ``.format("laketail")`` write them exactly once
(:mod:`laketail.spark.sink`).

Where work happens: planning (topics, offsets, file lists) runs on the driver
(:mod:`laketail.spark.planning`); each offset range is one task that reads the
table's files directly and the untiered tail through a gateway
(:mod:`laketail.spark.scan`). A streaming offset is ``{"topic": {"partition":
offset}}`` -- positions in the partitions, so compaction (which rewrites files, never
offsets) replays nothing.

Micro-batches: each batch ends at the latest offset a consumer may read (the LSO under
read_committed, else the HW), bounded by ``maxOffsetsPerTrigger``; partitions that
appear later (new topics matching ``subscribePattern``, added partitions) start at
their earliest offset. With ``groupId``, the source commits each finished batch's end
offsets to that consumer group, so lag tools see the query: when Spark commits the
batch to the source, or earlier, when Spark asks for the next batch's end (Spark
commits sources only once a next batch with new data is planned; the latter keeps the
group current while the topic is idle). A batch query commits each partition's end
once its last task has read it (partitions with nothing to read at planning).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from laketail.errors import LaketailError
from laketail.records import TYPED_KEY_COLUMN, TYPED_VALUE_COLUMN
from laketail.spark.columns import source_ddl
from laketail.spark.options import SinkOptions, SourceOptions, TopicPartition
from laketail.spark.planning import (
    OffsetRange,
    Planner,
    TopicState,
    offset_changed,
    offsets_json,
    offsets_of,
    rate_limit,
    replan,
)
from laketail.spark.scan import RangeReader, ScanSettings
from laketail.spark.sink import BatchWriter, StreamWriter
from laketail.spark.snapshot import shared_snapshots
from laketail.spark.typed import value_type_of
from laketail.spark.worker import settle_worker

log = logging.getLogger(__name__)


def _settings(options: SourceOptions, typed: dict[str, pa.DataType] | None = None) -> ScanSettings:
    typed = typed or {}
    return ScanSettings(
        options.servers, options.isolation, options.include_headers, options.fail_on_data_loss, options.group_id,
        options.security, options.api_timeout_ms, typed.get(TYPED_VALUE_COLUMN), typed.get(TYPED_KEY_COLUMN),
    )


def _typed_types(raw: Mapping[str, str]) -> dict[str, pa.DataType]:
    """The ``value_struct`` and ``key_struct`` types of a read of ``raw``'s topics
    (:mod:`laketail.spark.typed`), those it has; none for options the reader will refuse
    (it says why)."""
    try:
        options = SourceOptions.parse(raw, streaming=False)
    except LaketailError:
        try:
            options = SourceOptions.parse(raw, streaming=True)
        except LaketailError:
            return {}
    if options.subscription.pattern is not None:
        return {}
    planner = Planner(options, shared_snapshots())
    try:
        snapshots = {topic: planner.state_of(topic).snapshot for topic in planner.topics()}
    except LaketailError:
        return {}  # an unknown topic: the read reports it
    finally:
        planner.close()
    out = {}
    for column in (TYPED_VALUE_COLUMN, TYPED_KEY_COLUMN):
        found = value_type_of({t: s.typed_types().get(column) for t, s in snapshots.items()}, column)
        if found is not None:
            out[column] = found
    return out


def _typed(schema: StructType) -> dict[str, pa.DataType]:
    """The Arrow types the query's typed columns have (none: the query has no such column)."""
    from pyspark.sql.pandas.types import to_arrow_type

    return {name: to_arrow_type(schema[name].dataType) for name in (TYPED_VALUE_COLUMN, TYPED_KEY_COLUMN)
            if name in schema.fieldNames()}


class LaketailDataSource(DataSource):
    """Registered as ``laketail`` by :func:`laketail.spark.register`."""

    @classmethod
    def name(cls) -> str:
        return "laketail"

    def schema(self) -> str:
        settle_worker()  # every method here runs in a Spark Python worker
        raw = str(self.options.get("includeHeaders", "false")).strip().lower()
        columns = source_ddl(raw == "true")
        typed = _typed_types(self.options)
        if not typed:
            return columns
        from pyspark.sql.pandas.types import from_arrow_type

        return ", ".join([columns] + [f"{name} {from_arrow_type(t).simpleString()}" for name, t in typed.items()])

    def reader(self, schema: StructType) -> "BatchReader":
        settle_worker()
        return BatchReader(SourceOptions.parse(self.options, streaming=False), _typed(schema))

    def streamReader(self, schema: StructType) -> "StreamReader":
        settle_worker()
        return StreamReader(SourceOptions.parse(self.options, streaming=True), _typed(schema))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        settle_worker()
        return BatchWriter(SinkOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        settle_worker()
        return StreamWriter(SinkOptions.parse(self.options))


class BatchReader(DataSourceReader):
    """``spark.read.format("laketail")``: ``[startingOffsets, endingOffsets)``, fixed
    when the query is planned -- except a read of whole partitions (earliest to
    latest, the default), whose tasks read each partition as it is when they run, so
    a view ``USING laketail`` is live at every query."""

    def __init__(self, options: SourceOptions, typed: dict[str, pa.DataType] | None = None) -> None:
        self.options = options
        self.settings = _settings(options, typed)

    def partitions(self) -> list[InputPartition]:
        planner = Planner(self.options, shared_snapshots())  # the planning worker's, query after query
        try:
            state = planner.state()
            starts = planner.resolve(self.options.starting, state, ending=False)
            ends = planner.resolve(self.options.ending, state, ending=True)
            group_id = self.options.group_id
            commit = group_id is not None
            ranges = planner.ranges(starts, ends, state, commit=commit)
            if self.options.whole_partitions:  # every partition, empty ones too, bound when read
                have = {(r.topic, r.partition) for r in ranges}
                ranges += [
                    planner.offset_range(tp, end, end, state[tp[0]].snapshot, None)
                    for tp, end in sorted(ends.items()) if tp not in have
                ]
                ranges = [dataclasses.replace(r, late=True) for r in ranges]
            if group_id is not None:  # partitions with nothing to read are done already
                read = {(r.topic, r.partition) for r in ranges}
                idle = {tp: end for tp, end in ends.items() if tp not in read and end >= starts[tp]}
                planner.gateway.commit_offsets(group_id, idle)
        finally:
            planner.close()
        return list(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        settle_worker()
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark reads one placeholder partition when planning found none
        if partition.late:
            partition = replan(self.options, partition)
        return RangeReader(self.settings, partition).batches()


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("laketail")``: micro-batches over the partitions' offsets.

    Under ``trigger(availableNow=True)`` the end offsets at the query's start are the
    target: batches (each bounded by ``maxOffsetsPerTrigger``) run up to it, never past."""

    def __init__(self, options: SourceOptions, typed: dict[str, pa.DataType] | None = None) -> None:
        self.options = options
        self.settings = _settings(options, typed)
        self._planner: Planner | None = None
        self._state: dict[str, TopicState] | None = None
        self._committed: dict | None = None
        self._target: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict:
        # Executors get the reader for read(): no sockets, no cached snapshots.
        state = dict(self.__dict__)
        state["_planner"] = None
        state["_state"] = None
        return state

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def _fresh_state(self) -> dict[str, TopicState]:
        self._state = self.planner.state()
        return self._state

    def initialOffset(self) -> dict:
        state = self._fresh_state()
        starts = self.planner.resolve(self.options.starting, state, ending=False)
        return offsets_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # ``start`` is where the last finished batch ended: Spark runs one batch at a
        # time and commits sources only when it plans the next batch with new data,
        # so committing here keeps the group current while the topic is idle.
        self._commit_group(start)
        state = self._fresh_state()
        starts = self._with_new_partitions(offsets_of(start), state)
        # Positions past a log's end (a topic deleted and created again): an error
        # under failOnDataLoss, else this batch reads the partition from its log start.
        moved = {tp for tp, o in self.planner.past_the_end(starts, state).items() if o != starts[tp]}
        ends = self.planner.end_offsets(state)
        if self._target is not None:
            ends = {tp: min(end, self._target.get(tp, starts[tp])) for tp, end in ends.items()}
        ends = {tp: end if tp in moved else max(end, starts[tp]) for tp, end in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(starts, ends, limit.max_rows)
        return offsets_json(ends)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.end_offsets(self._fresh_state())

    def _with_new_partitions(
        self, starts: dict[TopicPartition, int], state: dict[str, TopicState]
    ) -> dict[TopicPartition, int]:
        """``starts`` plus every subscribed partition it lacks, at its earliest offset."""
        out = dict(starts)
        for topic, topic_state in state.items():
            for p in topic_state.partitions:
                if (topic, p) not in out:
                    out[(topic, p)] = self.planner.log_start(state, (topic, p))
        return out

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ends = offsets_of(end)
        state = self._state
        if state is None or any(t not in state for t, _ in ends):
            state = self._fresh_state()
        ends = {tp: o for tp, o in ends.items() if tp[0] in state and tp[1] in state[tp[0]].table.partitions}
        beyond = {
            tp: (o, state[tp[0]].table.partitions[tp[1]].high_watermark)
            for tp, o in ends.items() if o > state[tp[0]].table.partitions[tp[1]].high_watermark
        }  # a batch planned before the topic was deleted and created again, run again now
        if beyond and self.options.fail_on_data_loss:
            raise offset_changed(beyond)
        ends = {tp: min(o, beyond[tp][1]) if tp in beyond else o for tp, o in ends.items()}
        starts = self.planner.past_the_end(self._with_new_partitions(offsets_of(start), state), state)
        for tp, stop in ends.items():
            if stop < starts.get(tp, stop):  # latestOffset found the log moved back under failOnDataLoss=false
                starts[tp] = self.planner.log_start(state, tp)
        return list(self.planner.ranges(starts, ends, state))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        settle_worker()
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark reads one placeholder partition when planning found none
        return RangeReader(self.settings, partition).batches()

    def commit(self, end: dict) -> None:
        self._commit_group(end)

    def _commit_group(self, offsets: dict) -> None:
        """Commit the group's offsets, which only report lag (the query's progress is in
        its checkpoint): a commit that fails never fails the query; it is logged, and
        the next batch commits again."""
        if not self.options.group_id or offsets == self._committed:
            return
        try:
            self.planner.gateway.commit_offsets(self.options.group_id, offsets_of(offsets))
        except LaketailError as exc:
            log.warning("committing group %s's offsets failed (%s); the next batch commits again",
                        self.options.group_id, exc)
            return
        self._committed = offsets

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
