"""Planning a scan on Spark's driver: which partitions, which offsets, which files.

Role: turn the source's options into per-partition offset ranges ``[start, end)`` and
those into :class:`OffsetRange` input partitions, one Spark task each. The driver asks
a gateway for the topics, their partitions and offsets (``GET /v1/topics/{t}/table``)
and reads each table's Delta log itself (:mod:`laketail.spark.snapshot`), so every
range carries the files its task opens -- pruned by their offset statistics -- and
the ``tiered_offset`` above which the task reads through the gateway instead.

Offsets follow docs/architecture.md §2.2: ``end`` is the last stable offset under
read_committed and the high watermark under read_uncommitted; a committed offset is
the next offset to read. A streaming offset is ``{"topic": {"partition": offset}}``.

Pure parts (rate limiting, splitting, data-loss checks) are plain functions; the
:class:`Planner` holds the gateway and the snapshot cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from laketail.errors import InvalidConfig, OffsetOutOfRange, UnknownTopicOrPartition
from laketail.spark.gateway import SparkGateway, TopicTable
from laketail.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, TopicPartition
from laketail.spark.snapshot import SnapshotCache, TableFile, TableSnapshot, shared_snapshots

#: At most this many later files with control rows ride along for read_committed
#: lookups past a range's end; a task needing more reads through the gateway.
MAX_MARKER_FILES = 64


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task's work: offsets ``[start, end)`` of one topic partition.

    ``late`` ranges (a batch read of whole partitions, earliest to latest) are planned
    again by the task when the partition moved since planning (:func:`replan`): Spark
    keeps a Python data source's plan with the relation, so a view ``USING laketail``
    would otherwise answer the same rows at every query.

    Rows below ``tiered_offset`` come from ``files``; ``marker_files`` are the
    partition's next files holding control rows (read_committed looks there for the
    end of a transaction that outlives the range). ``commit_offset`` is set on the last
    range of a partition of a batch query with ``groupId``.
    """

    topic: str
    partition: int
    start: int
    end: int
    tiered_offset: int
    files: tuple[TableFile, ...] = ()
    marker_files: tuple[TableFile, ...] = ()
    commit_offset: int | None = None
    late: bool = False  # a whole-partition read: the task reads [log start, end) as of when it runs

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class TopicState:
    """What the driver knows about one topic at planning time."""

    table: TopicTable
    snapshot: TableSnapshot
    partitions: tuple[int, ...]


# -- pure parts ---------------------------------------------------------------------------------


def rate_limit(
    starts: dict[TopicPartition, int], ends: dict[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """Ends moved back so that at most about ``limit`` offsets are read in total, each
    partition getting its share of what is available (as Spark's Kafka source does)."""
    sizes = {tp: max(0, ends[tp] - starts.get(tp, ends[tp])) for tp in ends}
    total = sum(sizes.values())
    if total <= limit:
        return dict(ends)
    out = {}
    for tp, end in ends.items():
        begin = starts.get(tp, end)
        share = limit * (sizes[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + step)
    return out


def split_points(start: int, end: int, pieces: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into ``pieces`` nearly equal, non-empty ranges."""
    pieces = max(1, min(pieces, end - start))
    step, extra = divmod(end - start, pieces)
    out, pos = [], start
    for i in range(pieces):
        nxt = pos + step + (1 if i < extra else 0)
        out.append((pos, nxt))
        pos = nxt
    return out


def data_loss(lost: dict[TopicPartition, tuple[int, int]]) -> OffsetOutOfRange:
    """The failOnDataLoss error: every partition and offset range no longer there."""
    ranges = ", ".join(f"{t}-{p} offsets [{a}, {b})" for (t, p), (a, b) in sorted(lost.items()))
    return OffsetOutOfRange(
        f"data lost: {ranges} were deleted (retention) before they were read. Set failOnDataLoss=false "
        "to continue from the log start offset instead"
    )


def offset_changed(changed: dict[TopicPartition, tuple[int, int]]) -> OffsetOutOfRange:
    """The failOnDataLoss error for positions past the log's end (the topic was deleted
    and created again, or its log truncated): Spark's Kafka source's words."""
    moves = "; ".join(
        f"Partition {t}-{p}'s offset was changed from {a} to {b}, some data may have been missed"
        for (t, p), (a, b) in sorted(changed.items())
    )
    return OffsetOutOfRange(
        f"{moves}. Some data may have been lost because they are not available any more; the topic may have "
        "been deleted and created again before all its data was processed. Set failOnDataLoss=false to go on "
        "from what the partition holds now"
    )


def offsets_json(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_of(doc: dict) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in (doc or {}).items() for p, o in parts.items()}


def _names_every_partition(spec: OffsetSpec, assigned: set[TopicPartition], which: str) -> None:
    if spec.timestamps:
        named, option, what = set(spec.timestamps), f"{which}OffsetsByTimestamp", "specific timestamps"
    elif spec.timestamp is None and spec.offsets:
        named, option, what = set(spec.offsets), f"{which}Offsets", "specific offsets"
    else:
        return
    if named != assigned:
        def show(tps: set[TopicPartition]) -> str:
            return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"

        raise InvalidConfig(
            f"If {option} contains {what}, you must specify all TopicPartitions."
            + (" Use -1 for latest, -2 for earliest." if what == "specific offsets" else "")
            + f" Specified: {show(named)} Assigned: {show(assigned)}"
        )


def replan(options: SourceOptions, work: OffsetRange) -> OffsetRange:
    """``work`` (a ``late`` range) as of now: ``[log start, end)`` of its partition with
    the files of the table's latest snapshot; ``work`` itself when nothing moved. The
    snapshot comes from the worker's cache: loaded once, then caught up."""
    planner = Planner(options, shared_snapshots())
    try:
        table = planner.gateway.table(work.topic)
        offsets = table.partitions.get(work.partition)
        if offsets is None:
            return work
        start, end = offsets.log_start_offset, offsets.end(options.isolation)
        if (start, end) == (work.start, work.end) or start >= end and work.start >= work.end:
            return work
        snapshot = planner.snapshots.latest(table.uri, max(table.partitions) + 1)
        start = max(start, snapshot.log_start_offset(work.partition))
        return planner.offset_range((work.topic, work.partition), start, max(start, end), snapshot, None)
    finally:
        planner.close()


# -- the planner ----------------------------------------------------------------------------------


class Planner:
    """Driver-side view of the subscribed topics (one per source; not thread-safe).
    ``snapshots``: a cache to plan from (by default its own)."""

    def __init__(self, options: SourceOptions, snapshots: SnapshotCache | None = None) -> None:
        self.options = options
        self.gateway = SparkGateway(options.servers, security=options.security, api_timeout_ms=options.api_timeout_ms)
        self.snapshots = snapshots if snapshots is not None else SnapshotCache()

    def close(self) -> None:
        self.gateway.close()

    def topics(self) -> list[str]:
        sub = self.options.subscription
        if sub.assignment is not None:
            return sorted(sub.assignment)
        if sub.pattern is not None:
            return [t for t in self.gateway.topics() if sub.matches(t)]
        return list(sub.topics)

    def state(self) -> dict[str, TopicState]:
        """Each subscribed topic's offsets and table snapshot, now."""
        return {topic: self.state_of(topic) for topic in self.topics()}

    def state_of(self, topic: str) -> TopicState:
        """One subscribed topic's offsets and table snapshot, now."""
        assignment = self.options.subscription.assignment
        table = self.gateway.table(topic)
        if assignment is not None:
            missing = [p for p in assignment[topic] if p not in table.partitions]
            if missing:
                raise UnknownTopicOrPartition.partition(topic, missing[0])
            partitions = tuple(assignment[topic])
        else:
            partitions = tuple(sorted(table.partitions))
        snapshot = self.snapshots.latest(table.uri, max(table.partitions) + 1 if table.partitions else 0)
        return TopicState(table, snapshot, partitions)

    def end_offsets(self, state: dict[str, TopicState]) -> dict[TopicPartition, int]:
        """The latest offsets a reader may read to (LSO or HW by isolation level)."""
        iso = self.options.isolation
        return {(t, p): s.table.partitions[p].end(iso) for t, s in state.items() for p in s.partitions}

    def log_start(self, state: dict[str, TopicState], tp: TopicPartition) -> int:
        s = state[tp[0]]
        return max(s.table.partitions[tp[1]].log_start_offset, s.snapshot.log_start_offset(tp[1]))

    def resolve(self, spec: OffsetSpec, state: dict[str, TopicState], *, ending: bool) -> dict[TopicPartition, int]:
        """``spec`` as an offset for every subscribed partition. A JSON spec must name
        every subscribed partition, exactly (Spark's Kafka source's rule)."""
        latest = self.end_offsets(state)
        _names_every_partition(spec, set(latest), "ending" if ending else "starting")
        out = {}
        for tp in latest:
            kind, value = spec.for_partition(tp)
            if kind == "timestamp":
                found = self.gateway.offset_for_timestamp(tp[0], tp[1], value)
                if found < 0:
                    if not ending and self.options.timestamp_strategy == "error":
                        raise OffsetOutOfRange(
                            f"no record of {tp[0]}-{tp[1]} has a timestamp at or after {value} ms "
                            "(startingOffsetsByTimestampStrategy=latest starts at the end instead)"
                        )
                    found = latest[tp]
                out[tp] = min(found, latest[tp])
            elif value == EARLIEST:
                out[tp] = self.log_start(state, tp)
            elif value == LATEST:
                out[tp] = latest[tp]
            else:
                out[tp] = value
        return out

    def check_loss(
        self, starts: dict[TopicPartition, int], state: dict[str, TopicState]
    ) -> dict[TopicPartition, int]:
        """Starts below the log start offset: an error (failOnDataLoss) or moved up."""
        lost = {}
        out = dict(starts)
        for tp, start in starts.items():
            if tp[0] not in state or tp[1] not in state[tp[0]].table.partitions:
                continue
            first = self.log_start(state, tp)
            if start < first:
                lost[tp] = (start, first)
                out[tp] = first
        if lost and self.options.fail_on_data_loss:
            raise data_loss(lost)
        return out

    def past_the_end(
        self, starts: dict[TopicPartition, int], state: dict[str, TopicState]
    ) -> dict[TopicPartition, int]:
        """Starts beyond a partition's log end offset (the topic was deleted and created
        again since they were read): an error with failOnDataLoss, else each such
        partition goes on from its log start offset. Partitions of ``starts`` that
        are gone count the same way (their log end is 0)."""
        changed = {}
        out = dict(starts)
        for tp, start in starts.items():
            topic_state = state.get(tp[0])
            if topic_state is None:
                continue  # not subscribed any more (a pattern that no longer matches)
            offsets = topic_state.table.partitions.get(tp[1])
            end = offsets.high_watermark if offsets is not None else 0
            if start > end:
                changed[tp] = (start, end)
                if offsets is not None:
                    out[tp] = self.log_start(state, tp)
                else:
                    del out[tp]
        if changed and self.options.fail_on_data_loss:
            raise offset_changed(changed)
        return out

    def ranges(
        self,
        starts: dict[TopicPartition, int],
        ends: dict[TopicPartition, int],
        state: dict[str, TopicState],
        *,
        commit: bool = False,
    ) -> list[OffsetRange]:
        """Input partitions for reading ``[starts, ends)`` (``commit``: batch + groupId)."""
        starts = self.check_loss(starts, state)
        wanted = [(tp, starts[tp], ends[tp]) for tp in sorted(ends) if tp in starts and ends[tp] > starts[tp]]
        total = sum(end - start for _, start, end in wanted)
        min_parts = self.options.min_partitions or 0
        out: list[OffsetRange] = []
        for tp, start, end in wanted:
            pieces = 1
            if min_parts > len(wanted) and total:
                pieces = max(1, round(min_parts * (end - start) / total))
            cuts = split_points(start, end, pieces)
            for i, (lo, hi) in enumerate(cuts):
                last = i == len(cuts) - 1
                out.append(self.offset_range(tp, lo, hi, state[tp[0]].snapshot, end if commit and last else None))
        return out

    def offset_range(
        self, tp: TopicPartition, start: int, end: int, snapshot: TableSnapshot, commit_offset: int | None
    ) -> OffsetRange:
        topic, partition = tp
        tiered = snapshot.tiered_offset(partition)
        table_end = min(end, tiered)
        files = tuple(snapshot.overlapping(partition, start, table_end)) if start < table_end else ()
        markers: tuple[TableFile, ...] = ()
        if self.options.isolation == "read_committed" and files and table_end < tiered:
            later = [f for f in snapshot.overlapping(partition, table_end, tiered) if f.has_control and f not in files]
            markers = tuple(later[:MAX_MARKER_FILES])
        return OffsetRange(topic, partition, start, end, tiered, files, markers, commit_offset)
