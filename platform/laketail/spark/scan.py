"""Reading one offset range on an executor: table files first, the gateway for the rest.

Role: produce the Kafka source's rows for :class:`~laketail.spark.planning.OffsetRange`
``[start, end)`` of one partition, as Arrow batches.

* Offsets below the range's ``tiered_offset`` are in the topic's Delta table: the task
  opens only the planned files (pruned by their offset statistics) and in each only
  the row groups whose ``offset`` statistics overlap the range, reading only the
  columns it needs.
* Offsets at or above it are not in the table yet: they come from the gateway's ``/v1``
  Arrow fetch, which applies the isolation level itself. So a stream sees a record as
  soon as the gateway serves it, not a ``table.flush.interval.ms`` later.
* read_committed over files: control rows are dropped, and so are records whose
  transaction ended with ABORT (:mod:`laketail.spark.isolation`), looking for a
  transaction's end in the range's files, then in the partition's next files with
  control rows. A record whose end is in none of them (its marker is not tiered yet)
  is read again, with everything after it, through the gateway.
* A planned file that is gone (compaction or retention replaced it since planning) is
  read through the gateway too; offsets below the log start offset are lost data:
  an error with ``failOnDataLoss`` (naming the partition and range), else skipped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laketail.errors import CorruptMessage, LaketailError, OffsetOutOfRange
from laketail.records import TYPED_COLUMNS, TYPED_KEY_COLUMN, TYPED_VALUE_COLUMN, IsolationLevel
from laketail.spark.columns import scan_columns, to_source_batches
from laketail.spark.gateway import DEFAULT_API_TIMEOUT_MS, SparkGateway
from laketail.spark.isolation import TXN_COLUMNS, Markers, committed_rows
from laketail.spark.planning import OffsetRange, data_loss
from laketail.spark.snapshot import TableFile, disjoint
from laketail.spark.typed import TypedRows

#: Records per gateway fetch of an untiered tail.
FETCH_RECORDS = 50_000
#: Fetches in a row that may return no progress before a read gives up.
MAX_STALLS = 50


@dataclass(frozen=True)
class ScanSettings:
    """What every task of one scan shares (picklable)."""

    servers: tuple[str, ...]
    isolation: IsolationLevel
    include_headers: bool
    fail_on_data_loss: bool
    group_id: str | None = None
    security: tuple[tuple[str, str], ...] = ()
    api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS  # default.api.timeout.ms
    #: the query's ``value_struct`` type (typed columns, :mod:`laketail.spark.typed`); None: no column
    value_type: pa.DataType | None = None
    #: the query's ``key_struct`` type (``laketail.table.key.mode``); None: no column
    key_type: pa.DataType | None = None


def open_parquet(path: str) -> pq.ParquetFile:
    """A table file, local or on an object store (``s3://``, ``gs://``, ...). Local
    reads are not pre-buffered: coalescing reads saves round trips to an object store,
    and costs a local file ~6% more CPU per row group decoded."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    if "://" in path:
        fs, inner = pafs.FileSystem.from_uri(path)
        return pq.ParquetFile(fs.open_input_file(inner))
    return pq.ParquetFile(path, pre_buffer=False)


def _offset_column(pf: pq.ParquetFile) -> int:
    schema = pf.metadata.schema
    for i in range(len(schema)):
        if schema.column(i).path == "offset":
            return i
    raise LaketailError(f"{pf} has no offset column")


def read_rows(data_file: TableFile, start: int, end: int, columns: list[str]) -> Iterator[pa.Table]:
    """Rows of ``[start, end)`` in one file, a row group at a time (pruned by stats).
    The file is opened now (FileNotFoundError when it is gone), read as iterated.
    ``value_struct`` and ``key_struct`` are read only from a file that has them (typed columns)."""
    pf = open_parquet(data_file.path)
    names = pf.schema_arrow.names
    columns = [c for c in columns if c not in TYPED_COLUMNS or c in names]
    return _row_groups(pf, start, end, columns)


#: Row groups wholly inside a range are read this many at a time, so the Arrow batches
#: handed to Spark hold up to 64k rows, not 8k: fewer, larger batches cost less per row
#: in the worker and in the JVM.
READ_GROUPS = 8


def _row_groups(pf: pq.ParquetFile, start: int, end: int, columns: list[str]) -> Iterator[pa.Table]:
    meta = pf.metadata
    col = _offset_column(pf)
    run: list[int] = []  # consecutive row groups wholly inside [start, end), not read yet
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(col).statistics
        known = stats is not None and stats.has_min_max
        if known and (stats.max < start or stats.min >= end):
            continue
        if known and stats.min >= start and stats.max < end:
            run.append(i)
            if len(run) == READ_GROUPS:
                yield pf.read_row_groups(run, columns=columns, use_threads=False)
                run = []
            continue
        if run:
            yield pf.read_row_groups(run, columns=columns, use_threads=False)
            run = []
        # One task per core already: a thread pool per row group only costs CPU.
        rows = pf.read_row_group(i, columns=columns, use_threads=False)
        offsets = rows.column("offset")
        rows = rows.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))
        if rows.num_rows:
            yield rows
    if run:
        yield pf.read_row_groups(run, columns=columns, use_threads=False)


def read_markers(data_file: TableFile, start: int = 0) -> Markers:
    """Control rows of one file at or after ``start``."""
    markers = Markers.empty()
    for rows in read_rows(data_file, start, data_file.last_offset + 1, TXN_COLUMNS):
        markers = markers.merge(Markers.of(rows))
    return markers


class RangeReader:
    """Reads one :class:`OffsetRange` (one per task; owns its gateway client)."""

    def __init__(self, settings: ScanSettings, work: OffsetRange) -> None:
        self.settings = settings
        self.work = work
        self._gateway: SparkGateway | None = None
        pairs = ((TYPED_VALUE_COLUMN, settings.value_type), (TYPED_KEY_COLUMN, settings.key_type))
        self._typed = [TypedRows(t, work.topic, name) for name, t in pairs if t is not None]

    @property
    def gateway(self) -> SparkGateway:
        if self._gateway is None:
            self._gateway = SparkGateway(
                self.settings.servers, security=self.settings.security, api_timeout_ms=self.settings.api_timeout_ms
            )
        return self._gateway

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The range's rows in the Kafka source's columns; commits the group offset
        at the end when the plan asks for it."""
        work = self.work
        try:
            for rows, typed in self._rows():
                if rows.num_rows:
                    yield from to_source_batches(rows, work.topic, work.partition, self.settings.include_headers,
                                                 typed)
            if work.commit_offset is not None and self.settings.group_id:
                self.gateway.commit_offsets(self.settings.group_id, {(work.topic, work.partition): work.commit_offset})
        finally:
            if self._gateway is not None:
                self._gateway.close()

    def _rows(self) -> Iterator[tuple[pa.Table, dict[str, pa.Array | pa.ChunkedArray] | None]]:
        """The range's rows, each piece with its typed columns (None: the query has none):
        from the files where they were read, decoded where they were fetched."""
        for rows, fetched in self._pieces():
            if not self._typed or not rows.num_rows:
                yield rows, None
            else:
                yield rows, {t.column: t.from_fetch(rows, self.gateway) if fetched else t.from_table(rows)
                             for t in self._typed}

    def _pieces(self) -> Iterator[tuple[pa.Table, bool]]:
        """(rows, whether they were fetched through the gateway)."""
        work = self.work
        stop = min(work.end, work.tiered_offset)
        position = work.start
        if position < stop:
            position = yield from self._table_rows(position, stop)
        if position < work.end:
            yield from self._fetched(position, work.end)

    def _fetched(self, start: int, end: int) -> Iterator[tuple[pa.Table, bool]]:
        for rows in self._fetched_rows(start, end):
            yield rows, True

    def _table_rows(self, start: int, stop: int):
        """Rows of ``[start, stop)`` from files; returns where it stopped (``stop``
        unless it handed the rest to the gateway)."""
        committed = self.settings.isolation == "read_committed"
        typed = [t.column for t in self._typed]
        columns = scan_columns(self.settings.include_headers) + typed
        plain_columns = scan_columns(self.settings.include_headers, plain=True) + typed
        markers = Markers.empty()
        if committed:
            for data_file in self.work.files:
                if data_file.has_control:
                    markers = markers.merge(self._markers(data_file, start))
        lookahead = list(self.work.marker_files)
        position = start
        # Files an outside writer left overlapping: each is read for all of its share of
        # the range (Spark needs no row order; the offset filter keeps the range exact).
        overlapping = not disjoint(self.work.files)
        if overlapping:
            self._refuse_duplicates(start, stop)
        for data_file in self.work.files:
            begin = max(start if overlapping else position, data_file.first_offset)
            finish = min(stop, data_file.last_offset + 1)
            if begin >= finish:
                continue
            # Statistics prove a plain file has no control and no transactional rows:
            # every row is a committed data record, and the transaction columns stay unread.
            plain = not data_file.has_control and data_file.transactional is False
            try:
                pieces = read_rows(data_file, begin, finish, plain_columns if plain else columns)
            except FileNotFoundError:
                yield from self._fetched(position, finish)  # replaced since planning
                position = finish
                continue
            for rows in pieces:
                if plain:
                    yield rows, False
                    continue
                if not committed:
                    control = rows.column("control")
                    yield (rows.filter(pc.is_null(control)) if control.null_count < len(control) else rows), False
                    continue
                out, undecided = committed_rows(rows, markers)
                while undecided and lookahead:
                    markers = markers.merge(self._markers(lookahead.pop(0)))
                    out, undecided = committed_rows(rows, markers)
                if undecided:  # the transaction's end is not in the table yet
                    first = rows.column("offset")[0].as_py()
                    yield from self._fetched(first, stop)
                    return stop
                yield out, False
            position = finish
        return stop

    def _refuse_duplicates(self, start: int, stop: int) -> None:
        """Overlapping files (an outside writer's): fail the task before it yields
        anything when two rows of ``[start, stop)`` share an offset, rather than hand
        Spark both (the broker refuses such reads with CORRUPT_MESSAGE too)."""
        pieces: list[pa.ChunkedArray] = []
        for data_file in self.work.files:
            try:
                pieces.extend(t.column("offset") for t in read_rows(data_file, start, stop, ["offset"]))
            except FileNotFoundError:
                continue  # replaced since planning: read through the gateway below
        if not pieces:
            return
        offsets = pa.chunked_array(pieces).to_numpy()
        offsets.sort()
        twice = offsets[1:][offsets[1:] == offsets[:-1]]
        if len(twice):
            work = self.work
            raise CorruptMessage(
                f"{work.topic}-{work.partition}: the table holds offset {int(twice[0])} more than once; "
                f"see `laketail check {work.topic}`"
            )

    def _markers(self, data_file: TableFile, start: int = 0) -> Markers:
        try:
            return read_markers(data_file, start)
        except FileNotFoundError:
            return Markers.empty()  # its records are read through the gateway if needed

    def _fetched_rows(self, start: int, end: int) -> Iterator[pa.Table]:
        """Rows of ``[start, end)`` through the gateway's Arrow fetch."""
        work = self.work
        position = start
        stalls = 0
        while position < end:
            try:
                got = self.gateway.fetch(work.topic, work.partition, position, self.settings.isolation, FETCH_RECORDS)
            except OffsetOutOfRange:
                first = self.gateway.table(work.topic).partitions[work.partition].log_start_offset
                if position >= first:
                    raise
                if self.settings.fail_on_data_loss:
                    raise data_loss({(work.topic, work.partition): (position, min(first, end))}) from None
                position = first
                continue
            rows = got.records
            if rows.num_rows and rows.column("offset")[-1].as_py() >= end:
                rows = rows.filter(pc.less(rows.column("offset"), end))
            if rows.num_rows:
                yield rows
            if got.next_offset <= position:
                stalls += 1
                if stalls > MAX_STALLS:
                    raise LaketailError(
                        f"{work.topic}-{work.partition} serves nothing at offset {position} below the "
                        f"planned end {end}"
                    )
                time.sleep(min(0.05 * stalls, 1.0))
                continue
            stalls = 0
            position = got.next_offset
