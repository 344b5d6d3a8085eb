"""A topic table's state at one Delta version, as Spark's driver plans from it.

Role: read the Delta log (delta-rs) once per table version and index its data files
per partition by their ``offset`` statistics, with two facts a planner needs per
file: the offsets it covers and whether it holds control rows (its ``control`` null
count is below its record count; a file without statistics is assumed to). The
snapshot also carries each partition's ``tiered_offset`` and ``log_start_offset`` from
the Delta transaction actions the tierer and retention write
(``laketail.tier.<p>``, ``laketail.logstart.<p>``), so files and offsets agree: they
come from the same version.

Files are immutable, and compaction replaces files in the commit that removes the old
ones, so within one snapshot a partition's files never overlap.

A table's log is read in full once per cache; later calls load only the commits made
since (a stat of the next commit file when nothing moved, for a local table). A topic
deleted and created again starts a new log at the same path: a local table whose first
commit file is not the one the cache opened is opened afresh. :func:`shared_snapshots`
is the process's cache for batch planning and for the tasks that plan their partition
again (``late`` ranges): a Spark Python worker runs query after query.

Thread-safety: a :class:`SnapshotCache` takes a lock around each call.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable

from laketail.records import TYPED_KEY_COLUMN, TYPED_VALUE_COLUMN
from laketail.storage.table_reader import catch_up, commit_file, disjoint, files_between, log_start_app_id, tier_app_id


@dataclass(frozen=True, order=True)
class TableFile:
    """One data file of a partition (picklable: it travels to executors)."""

    first_offset: int
    last_offset: int
    path: str  # absolute: the table URI joined with the add action's path
    num_records: int = 0
    has_control: bool = True
    transactional: bool | None = None  # holds transactional rows (None: statistics do not say)


@dataclass(frozen=True)
class TableSnapshot:
    """One version of a topic's Delta table as the Spark reads plan it: per partition its
    files (ordered by first offset), tiered and log start offsets, and the types of its
    typed columns. Immutable, so shared between threads and queries."""

    uri: str
    version: int
    files: dict[int, tuple[TableFile, ...]]
    tiered: dict[int, int]
    log_start: dict[int, int]
    #: the type of the table's ``value_struct`` (typed columns, ``laketail.table.mode``);
    #: None for a table without it
    value_type: pa.DataType | None = None
    #: the type of its ``key_struct`` (``laketail.table.key.mode``); None without it
    key_type: pa.DataType | None = None

    def typed_types(self) -> dict[str, pa.DataType]:
        """Each typed column the table has (``value_struct``, ``key_struct``) and its type."""
        pairs = ((TYPED_VALUE_COLUMN, self.value_type), (TYPED_KEY_COLUMN, self.key_type))
        return {name: t for name, t in pairs if t is not None}

    def partition_files(self, partition: int) -> tuple[TableFile, ...]:
        return self.files.get(partition, ())

    def overlapping(self, partition: int, start: int, end: int) -> list[TableFile]:
        """Files of ``partition`` holding offsets in ``[start, end)``, in order of first
        offset. Files an outside writer left overlapping are all found (their last
        offsets are not sorted, so no binary search then)."""
        files = self.files.get(partition, ())
        return files_between(files, start, end, [f.last_offset for f in files] if disjoint(files) else None)

    def tiered_offset(self, partition: int) -> int:
        return self.tiered.get(partition, 0)

    def log_start_offset(self, partition: int) -> int:
        return self.log_start.get(partition, 0)


def read_snapshot(table: DeltaTable, uri: str, partitions: int) -> TableSnapshot:
    """Index ``table`` (already at the wanted version) for ``partitions`` partitions."""
    actions = pa.table(table.get_add_actions(flatten=True))
    names = set(actions.column_names)
    by_partition: dict[int, list[TableFile]] = {}
    rows = actions.select([n for n in (
        "path", "partition.partition", "min.offset", "max.offset", "num_records", "null_count.control",
        "max.transactional",
    ) if n in names]).to_pylist()
    for row in rows:
        first, last = row.get("min.offset"), row.get("max.offset")
        partition = row.get("partition.partition")
        if first is None or last is None or partition is None:
            continue  # laketail writes statistics for every file; others are not its files
        records = int(row.get("num_records") or 0)
        nulls = row.get("null_count.control")
        has_control = nulls is None or not records or int(nulls) < records
        transactional = row.get("max.transactional")
        by_partition.setdefault(int(partition), []).append(TableFile(
            int(first), int(last), f"{uri}/{unquote(row['path'])}", records, has_control,
            True if has_control else (None if transactional is None else bool(transactional)),
        ))
    files = {p: tuple(sorted(lst)) for p, lst in by_partition.items()}
    tiered = {p: table.transaction_version(tier_app_id(p)) or 0 for p in range(partitions)}
    log_start = {p: table.transaction_version(log_start_app_id(p)) or 0 for p in range(partitions)}
    schema = pa.schema(table.schema().to_arrow())
    value_type = schema.field(TYPED_VALUE_COLUMN).type if TYPED_VALUE_COLUMN in schema.names else None
    key_type = schema.field(TYPED_KEY_COLUMN).type if TYPED_KEY_COLUMN in schema.names else None
    return TableSnapshot(uri, table.version(), files, tiered, log_start, value_type, key_type)


def log_identity(uri: str) -> tuple[int, int] | None:
    """Which log is at a local ``uri``: its first commit file's inode and modification
    time (a table made again at the path writes a new one). ``None`` on an object store
    and when that file is gone (Delta's log cleanup)."""
    if "://" in uri:
        return None
    try:
        stat = os.stat(commit_file(uri, 0))
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


class SnapshotCache:
    """The latest snapshot of each table, re-indexed only when its version moved; at
    most ``max_tables`` tables, the least recently used dropped first."""

    def __init__(self, max_tables: int = 64) -> None:
        self.max_tables = max_tables
        self._tables: OrderedDict[str, tuple[DeltaTable, tuple[int, int] | None]] = OrderedDict()
        self._snapshots: dict[str, TableSnapshot] = {}
        self._lock = threading.Lock()

    def forget(self, uri: str) -> None:
        """Drop what is known of ``uri`` (its topic was deleted: a topic made again under
        the same name starts a new log there, which must not be read on top of the old)."""
        with self._lock:
            self._forget(uri)

    def _forget(self, uri: str) -> None:
        self._tables.pop(uri, None)
        self._snapshots.pop(uri, None)

    def latest(self, uri: str, partitions: int) -> TableSnapshot:
        with self._lock:
            known_table = self._tables.get(uri)
            identity = log_identity(uri)
            if known_table is not None and known_table[1] is not None and known_table[1] != identity:
                self._forget(uri)  # a new log at the path: not to be read on top of the old
                known_table = None
            if known_table is None:
                table = DeltaTable(uri)
                self._tables[uri] = (table, identity)
                while len(self._tables) > self.max_tables:
                    self._forget(next(iter(self._tables)))
            else:
                table = known_table[0]
                self._tables.move_to_end(uri)
                catch_up(table, uri)
            known = self._snapshots.get(uri)
            if known is not None and known.version == table.version() and len(known.tiered) >= partitions:
                return known
            snapshot = self._snapshots[uri] = read_snapshot(table, uri, partitions)
            return snapshot


_shared = SnapshotCache()


def _forget_shared() -> None:
    global _shared
    _shared = SnapshotCache()


os.register_at_fork(after_in_child=_forget_shared)


def shared_snapshots() -> SnapshotCache:
    """This process's cache, for batch planning and ``late`` tasks (see the module doc)."""
    return _shared
