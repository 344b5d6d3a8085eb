"""The table tier: topics' Delta tables, their offset index, and reads from them.

Role: create and delete topic tables, answer a partition's ``tiered_offset`` (from the
Delta transaction action ``laketail.tier.<partition>``, whose version is the next
offset to tier), and serve reads of offsets below the hot tier.

The offset index maps each partition to its data files sorted by first offset, built
from the Delta log's add actions and their ``offset`` statistics, extended in place by
the tierer after each of its commits, and reloaded when a read finds a hole (another
writer, such as compaction, changed the table). A read opens only the files that
overlap the wanted range, and in each only the row groups whose ``offset``
statistics overlap it.

Thread-safety: one lock per topic guards that topic's ``DeltaTable`` object and index.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from laketail.catalog import remove_tree
from laketail.records import RECORD_SCHEMA

log = logging.getLogger(__name__)

TIER_APP_PREFIX = "laketail.tier."
_PARQUET_CACHE = 256


def tier_app_id(partition: int) -> str:
    return f"{TIER_APP_PREFIX}{partition}"


def log_start_app_id(partition: int) -> str:
    return f"laketail.logstart.{partition}"


@dataclass(frozen=True, order=True)
class DataFile:
    first_offset: int
    last_offset: int
    path: str  # relative to the table root
    num_records: int = 0
    min_timestamp_us: int = 0
    max_timestamp_us: int = 0
    size_bytes: int = 0


@dataclass
class _TopicTable:
    uri: str
    table: DeltaTable | None
    version: int = -1
    files: dict[int, list[DataFile]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class TableReader:
    def __init__(self, root: str | Path) -> None:
        self.root = str(root)
        self._topics: dict[str, _TopicTable] = {}
        self._topics_lock = threading.Lock()
        self._parquet: OrderedDict[str, pq.ParquetFile] = OrderedDict()
        self._parquet_lock = threading.Lock()

    def table_uri(self, topic: str) -> str:
        return f"{self.root}/topics/{topic}"

    # -- lifecycle ----------------------------------------------------------------------------

    def create_table(self, topic: str) -> None:
        uri = self.table_uri(topic)
        dt = DeltaTable.create(uri, RECORD_SCHEMA, mode="ignore", partition_by=["partition"], name=topic)
        with self._topics_lock:
            self._topics[topic] = _TopicTable(uri, dt, dt.version())

    def delete_table(self, topic: str) -> None:
        with self._topics_lock:
            self._topics.pop(topic, None)
        remove_tree(self.table_uri(topic))

    def _get(self, topic: str) -> _TopicTable:
        with self._topics_lock:
            entry = self._topics.get(topic)
            if entry is None:
                uri = self.table_uri(topic)
                try:
                    dt = DeltaTable(uri)
                except TableNotFoundError:
                    dt = DeltaTable.create(uri, RECORD_SCHEMA, mode="ignore", partition_by=["partition"], name=topic)
                entry = _TopicTable(uri, dt)
                self._topics[topic] = entry
        return entry

    def delta_table(self, topic: str) -> tuple[DeltaTable, threading.Lock]:
        """The topic's DeltaTable and the lock to hold while using it (tierer commits)."""
        entry = self._get(topic)
        return entry.table, entry.lock

    # -- offsets --------------------------------------------------------------------------------

    def tiered_offset(self, topic: str, partition: int) -> int:
        entry = self._get(topic)
        with entry.lock:
            entry.table.update_incremental()
            return entry.table.transaction_version(tier_app_id(partition)) or 0

    def refresh(self, topic: str) -> bool:
        """Catch up with commits made by other writers (Spark's compaction and retention
        jobs); True when the table moved on without the tierer."""
        entry = self._get(topic)
        with entry.lock:
            before = entry.table.version()
            entry.table.update_incremental()
            if entry.table.version() == before and entry.version >= 0:
                return False
            if entry.version != entry.table.version():
                self._reload_locked(entry)
                return True
            return False

    def log_start_offset(self, topic: str, partition: int) -> int:
        """The partition's log start offset: the version of the Delta transaction
        ``laketail.logstart.<p>`` that retention writes when it deletes, else 0. Key
        compaction never moves it (it leaves gaps, as Kafka's cleaner does)."""
        entry = self._get(topic)
        with entry.lock:
            return entry.table.transaction_version(log_start_app_id(partition)) or 0

    def _files(self, topic: str, partition: int) -> list[DataFile]:
        entry = self._get(topic)
        with entry.lock:
            if entry.version < 0:
                self._reload_locked(entry)
            return entry.files.get(partition, [])

    def _reload_locked(self, entry: _TopicTable) -> None:
        entry.table.update_incremental()
        actions = pa.table(entry.table.get_add_actions(flatten=True))
        names = set(actions.column_names)
        files: dict[int, list[DataFile]] = {}
        for row in actions.to_pylist():
            partition = int(row["partition.partition"])
            first = row.get("min.offset")
            last = row.get("max.offset")
            if first is None or last is None:  # a file without statistics: read them
                stats = self._file_offsets(f"{entry.uri}/{row['path']}")
                if stats is None:
                    continue
                first, last = stats
            files.setdefault(partition, []).append(
                DataFile(
                    int(first),
                    int(last),
                    row["path"],
                    int(row.get("num_records") or 0),
                    _ts_us(row.get("min.timestamp")) if "min.timestamp" in names else 0,
                    _ts_us(row.get("max.timestamp")) if "max.timestamp" in names else 0,
                    int(row.get("size_bytes") or 0),
                )
            )
        for lst in files.values():
            lst.sort()
        entry.files = files
        entry.version = entry.table.version()

    def files_by_partition(self, topic: str) -> dict[int, list[DataFile]]:
        """Every data file of the topic's table, per partition, in offset order."""
        entry = self._get(topic)
        with entry.lock:
            if entry.version < 0:
                self._reload_locked(entry)
            return {p: list(files) for p, files in entry.files.items()}

    def reload(self, topic: str) -> None:
        entry = self._get(topic)
        with entry.lock:
            self._reload_locked(entry)

    def add_files(self, topic: str, version: int, added: dict[int, DataFile]) -> None:
        """Record files the tierer just committed as ``version`` (no log re-read)."""
        entry = self._get(topic)
        with entry.lock:
            if entry.version < 0 or version != entry.version + 1:
                self._reload_locked(entry)
                return
            for partition, data_file in added.items():
                bisect.insort(entry.files.setdefault(partition, []), data_file)
            entry.version = version

    @staticmethod
    def _file_offsets(path: str) -> tuple[int, int] | None:
        column = pq.read_table(path, columns=["offset"]).column("offset")
        if len(column) == 0:
            return None
        bounds = pc.min_max(column)
        return bounds["min"].as_py(), bounds["max"].as_py()

    # -- reads ------------------------------------------------------------------------------------

    def read(
        self, topic: str, partition: int, start: int, end: int, max_records: int, max_bytes: int
    ) -> pa.Table:
        """Rows of ``[start, end)`` in offset order (gaps allowed), at most ``max_records``
        and about ``max_bytes`` (at least one row)."""
        if end - start > max_records:
            # Offsets are dense outside compacted stretches: bound the read so row-group
            # pruning skips what cannot be returned; a stretch of gaps reads on unbounded.
            rows = self.read(topic, partition, start, start + max_records, max_records, max_bytes)
            if rows.num_rows:
                return rows
        files = self._overlapping(topic, partition, start, end)
        if not files or files[0].first_offset > start:
            self.reload(topic)  # compaction or retention may have replaced files
            files = self._overlapping(topic, partition, start, end)
        uri = self.table_uri(topic)
        pieces: list[pa.Table] = []
        taken = 0
        nbytes = 0
        for data_file in files:
            if taken >= max_records or nbytes >= max_bytes:
                break
            table = self._read_file(f"{uri}/{data_file.path}", start, end)
            if table.num_rows == 0:
                continue
            table = table.slice(0, max_records - taken)
            sizes = pc.add(
                pc.fill_null(pc.binary_length(table.column("value")), 0),
                pc.fill_null(pc.binary_length(table.column("key")), 0),
            )
            running = pc.cumulative_sum(sizes)
            fits = pc.sum(pc.less_equal(running, max_bytes - nbytes)).as_py() or 0
            table = table.slice(0, max(fits, 1 if taken == 0 else 0))
            if table.num_rows == 0:
                break
            pieces.append(table)
            taken += table.num_rows
            nbytes += pc.sum(sizes.slice(0, table.num_rows)).as_py() or 0
        if not pieces:
            return pa.Table.from_batches([], RECORD_SCHEMA)
        out = pa.concat_tables(pieces)
        out = out.append_column("partition", pa.repeat(pa.scalar(partition, pa.int32()), out.num_rows))
        return out.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)

    def _overlapping(self, topic: str, partition: int, start: int, end: int) -> list[DataFile]:
        files = self._files(topic, partition)
        lasts = [f.last_offset for f in files]
        i = bisect.bisect_left(lasts, start)
        out = []
        for data_file in files[i:]:
            if data_file.first_offset >= end:
                break
            out.append(data_file)
        return out

    def _parquet_file(self, path: str) -> pq.ParquetFile:
        with self._parquet_lock:
            pf = self._parquet.get(path)
            if pf is not None:
                self._parquet.move_to_end(path)
                return pf
        pf = pq.ParquetFile(path)
        with self._parquet_lock:
            self._parquet[path] = pf
            while len(self._parquet) > _PARQUET_CACHE:
                self._parquet.popitem(last=False)
        return pf

    def _read_file(self, path: str, start: int, end: int) -> pa.Table:
        pf = self._parquet_file(path)
        meta = pf.metadata
        col = pf.schema_arrow.get_field_index("offset")
        groups = []
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(col).statistics
            if stats is not None and stats.has_min_max and (stats.max < start or stats.min >= end):
                continue
            groups.append(i)
        if not groups:
            return pa.table({})
        table = pq.ParquetFile(path, metadata=meta).read_row_groups(groups)
        offsets = table.column("offset")
        mask = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
        return table.filter(mask)

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp_ms: int, below: int
    ) -> tuple[int, int] | None:
        """The earliest tabled offset below ``below`` whose timestamp is >= ``timestamp_ms``."""
        target = timestamp_ms * 1000
        uri = self.table_uri(topic)
        for data_file in self._files(topic, partition):
            if data_file.first_offset >= below:
                break
            if data_file.max_timestamp_us and data_file.max_timestamp_us < target:
                continue
            table = pq.read_table(f"{uri}/{data_file.path}", columns=["offset", "timestamp"])
            table = table.filter(pc.less(table.column("offset"), below))
            ts = table.column("timestamp").cast(pa.int64())
            hits = pc.indices_nonzero(pc.greater_equal(ts, target))
            if len(hits):
                row = hits[0].as_py()
                return table.column("offset")[row].as_py(), ts[row].as_py() // 1000
        return None


def _ts_us(value) -> int:
    if value is None:
        return 0
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1_000_000)
    return int(value)
