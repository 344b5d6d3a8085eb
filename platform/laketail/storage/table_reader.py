"""The table tier: topics' Delta tables, their offset index, and reads from them.

Role: create and delete topic tables, answer a partition's ``tiered_offset`` (from the
Delta transaction action ``laketail.tier.<partition>``, whose version is the next
offset to tier), and serve reads of offsets below the hot tier.

The offset index maps each partition to its data files sorted by first offset, built
from the Delta log's add actions and their ``offset`` statistics, extended by the
tierer after each of its commits and by the tier commits of other laketail writers
(another request process's tier child, a leader seen by its followers), and rebuilt
after any other commit or when a read finds a hole (another writer, such as
compaction, changed the table). A read opens only the files that
overlap the wanted range, and in each only the row groups whose ``offset``
statistics overlap it; decoded row groups stay in the block cache for the next
fetches (see ``block_cache``).

Any file layout reads correctly (outside writers: see ``table_check``). laketail's own
files are sorted and their offset ranges never overlap: that is the fast path, told
apart once per index build (``_Index.overlapping``). A row group whose rows are
out of offset order (an outside ``OPTIMIZE`` writes them so) is sorted once when it is
decoded; a file whose row groups are out of order is sorted per read; a partition whose
files overlap is read from every overlapping file, merged and sorted, and a read that
meets one offset twice fails with CORRUPT_MESSAGE rather than serve both. Each index
build also validates the table (:func:`laketail.storage.table_check.find_damage`); a
read of a damaged offset range (duplicates, rows laketail did not write) fails with
CORRUPT_MESSAGE, a read before it stops at its start; missing offsets are only marked.

Thread-safety: one lock per topic guards that topic's ``DeltaTable`` object and index
builds. The index itself (:class:`_Index`) is never changed in place: a build or an
addition publishes a new one, which a read of decoded blocks (``cached_only``) takes
without the lock: a fetch then stays on the event loop while the tierer commits or
follows the table, reading the index as it was before.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Protocol, Sequence, TypeVar
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from laketail.errors import CorruptMessage
from laketail.records import COORDINATOR_PRODUCER_ID, RECORD_SCHEMA, laketail_schema_changed, payload_bytes
from laketail.storage import object_store
from laketail.storage.block_cache import BLOCKS, NotCached
from laketail.storage.producer_state import LearnedProducer, learned_producers, sequence_runs
from laketail.storage.table_check import Damage, OffsetFacts, find_damage

log = logging.getLogger(__name__)

TIER_APP_PREFIX = "laketail.tier."
EPOCH_APP_PREFIX = "laketail.epoch."
_PARQUET_CACHE = 256


def tier_app_id(partition: int) -> str:
    return f"{TIER_APP_PREFIX}{partition}"


def log_start_app_id(partition: int) -> str:
    return f"laketail.logstart.{partition}"


class _Ranged(Protocol):
    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...


_File = TypeVar("_File", bound=_Ranged)
T = TypeVar("T")


def disjoint(files: Sequence[_Ranged]) -> bool:
    """Sorted by first offset and no two offset ranges overlap (laketail's own layout)."""
    return all(a.last_offset < b.first_offset for a, b in zip(files, files[1:]))


def files_between(files: Sequence[_File], start: int, end: int, lasts: Sequence[int] | None) -> list[_File]:
    """Those of ``files`` (sorted by first offset) holding offsets of ``[start, end)``, in
    order. ``lasts``: the files' last offsets when they are :func:`disjoint` (sorted too,
    so searched); None when ranges overlap (an outside writer's layout: every file is
    looked at). The broker's table reads and Spark's planning both find files so."""
    if lasts is None:
        return [f for f in files if f.last_offset >= start and f.first_offset < end]
    out = []
    for data_file in files[bisect.bisect_left(lasts, start):]:
        if data_file.first_offset >= end:
            break
        out.append(data_file)
    return out


@dataclass(frozen=True, order=True)
class DataFile:
    first_offset: int
    last_offset: int
    path: str  # relative to the table root
    num_records: int = 0
    min_timestamp_us: int = 0
    max_timestamp_us: int = 0
    size_bytes: int = 0


@dataclass(frozen=True)
class _Index:
    """A topic's file index, built whole and then only replaced (never changed in
    place, lists included: readers hold it without the lock)."""

    #: per partition, its data files sorted by first offset
    files: dict[int, list[DataFile]]
    #: per partition, the files' last offsets (what ``bisect`` searches)
    lasts: dict[int, list[int]]
    #: partitions whose files are NOT sorted and disjoint (the slow, merging read path)
    overlapping: frozenset[int]

    @classmethod
    def of(cls, files: dict[int, list[DataFile]]) -> "_Index":
        """The index of ``files`` (each list sorted), which it then owns."""
        return cls(files, {p: [f.last_offset for f in lst] for p, lst in files.items()},
                   frozenset(p for p, lst in files.items() if not disjoint(lst)))

    def adding(self, added: dict[int, DataFile]) -> "_Index":
        """This index with one more file in some partitions (the others' lists shared)."""
        files, lasts, overlapping = dict(self.files), dict(self.lasts), set(self.overlapping)
        for partition, data_file in added.items():
            lst = list(files.get(partition, ()))
            bisect.insort(lst, data_file)
            i = lst.index(data_file)
            if (i > 0 and lst[i - 1].last_offset >= data_file.first_offset) or (
                i + 1 < len(lst) and data_file.last_offset >= lst[i + 1].first_offset
            ):
                overlapping.add(partition)
            files[partition] = lst
            lasts[partition] = [f.last_offset for f in lst]
        return _Index(files, lasts, frozenset(overlapping))


    def between(self, partition: int, start: int, end: int) -> list[DataFile]:
        """The partition's files that hold offsets of ``[start, end)``, in order."""
        lasts = None if partition in self.overlapping else self.lasts.get(partition, [])
        return files_between(self.files.get(partition, []), start, end, lasts)


_EMPTY_INDEX = _Index({}, {}, frozenset())


@dataclass
class _TopicTable:
    uri: str
    table: DeltaTable
    #: the table version the index is of (-1: none built)
    version: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: damaged offset ranges per partition, from the last index build
    damage: dict[int, list[Damage]] = field(default_factory=dict)
    #: what reading a file's offsets found, per path (files never change under a path)
    facts: dict[str, OffsetFacts] = field(default_factory=dict)
    #: the file index as of ``version`` (None: none built), read without the lock
    index: _Index | None = None


def commit_file(uri: str, version: int) -> str:
    """The JSON commit file of ``version`` in the Delta log of the table at ``uri``."""
    return f"{uri}/_delta_log/{version:020d}.json"


def catch_up(table: DeltaTable, uri: str, known: int = -1) -> None:
    """Load the commits made to the table at ``uri`` after ``table``'s version, unless
    none came after version ``known`` either (the caller knows what those commits hold).
    Every new version has its JSON commit file, so when the next one is absent there is
    nothing to load, and a stat replaces delta-rs's listing and replay of the log (tens
    of ms on a table of a few hundred commits, growing with it): a broker checks each
    topic's table at every tier pass, and a session's view follower every 0.2 s, idle
    topics included. On an object store the stat is a HEAD request, where the listing is
    a LIST, which S3 prices at 12.5 times a HEAD."""
    if not object_store.exists(commit_file(uri, max(table.version(), known) + 1)):
        return
    table.update_incremental()


class TableReader:
    """The table tier of every topic under one data root: its Delta tables and their reads.

    Creates and deletes topic tables; answers a partition's ``tiered_offset`` (the version
    of the transaction ``laketail.tier.<p>``) and ``log_start_offset``
    (``laketail.logstart.<p>``); keeps each topic's offset index of data files, extended by
    :meth:`add_files` after a laketail tier commit and rebuilt (and validated for damage,
    :meth:`known_damage`) after any other commit; and :meth:`read` serves offsets below the
    hot tier, opening only the files and row groups whose offset statistics overlap.

    Thread-safety: called from worker threads; one lock per topic guards its
    ``DeltaTable`` and index builds, and a read of cached blocks takes the published index
    without it (module docstring).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = str(root)
        #: whether a topic's offsets may have gaps (key compaction); the broker sets it
        #: from ``cleanup.policy``. Gaps in other topics are damage.
        self.gaps_allowed: Callable[[str], bool] = lambda topic: True
        self._topics: dict[str, _TopicTable] = {}
        self._topics_lock = threading.Lock()
        self._parquet: OrderedDict[str, tuple[pq.ParquetFile, int, bool]] = OrderedDict()  # see _parquet_file
        self._parquet_lock = threading.Lock()

    def table_uri(self, topic: str) -> str:
        return f"{self.root}/topics/{topic}"

    # -- lifecycle ----------------------------------------------------------------------------

    def create_table(self, topic: str) -> None:
        uri = self.table_uri(topic)
        dt = DeltaTable.create(uri, RECORD_SCHEMA, mode="ignore", partition_by=["partition"], name=topic)
        with self._topics_lock:
            self._topics[topic] = _TopicTable(uri, dt, dt.version(), index=_EMPTY_INDEX)

    def delete_table(self, topic: str) -> None:
        with self._topics_lock:
            self._topics.pop(topic, None)
        object_store.remove_tree(self.table_uri(topic))

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
            catch_up(entry.table, entry.uri)
            return entry.table.transaction_version(tier_app_id(partition)) or 0

    def refresh(self, topic: str) -> bool:
        """Catch up with commits made by other writers (Spark's compaction and retention
        jobs); True when the table moved on without the tierer."""
        entry = self._get(topic)
        with entry.lock:
            # The index may be ahead of the DeltaTable object: ``add_files`` extends it
            # with the tier child's commits, which the object need not load (the child
            # committed through its own handle). Only a commit after the index's version
            # is another writer's. The object may be ahead of the index too (tiered_offset
            # loads commits without indexing them). Versions the index has not seen are
            # followed when each is a laketail tier commit (another request process's
            # child); any other would go unvalidated: rebuild then.
            catch_up(entry.table, entry.uri, known=entry.version)
            if entry.table.version() > entry.version:
                if not self._follow_locked(entry, entry.table.version()):
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

    def _files(self, topic: str, partition: int, cached_only: bool = False) -> list[DataFile]:
        return self._index(topic, cached_only).files.get(partition, [])

    def _index(self, topic: str, cached_only: bool = False) -> _Index:
        """The topic's index as last published; ``cached_only`` never waits for the lock
        (a tier commit may hold it) nor reads the log: NotCached when none is built."""
        if cached_only:
            entry = self._topics.get(topic)
            index = entry.index if entry is not None else None
            if index is None:
                raise NotCached(topic)
            return index
        entry = self._get(topic)
        with entry.lock:
            return self._built_locked(entry)

    def _built_locked(self, entry: _TopicTable) -> _Index:
        """``entry``'s index, built first if none was."""
        if entry.index is None:
            self._reload_locked(entry)
        assert entry.index is not None  # published by the build
        return entry.index

    def _follow_locked(self, entry: _TopicTable, upto: int) -> bool:
        """Extend the index with the versions after its own, up to ``upto``, when each is
        a laketail tier commit continuing its partitions' files (:func:`tier_commit_files`):
        with several request processes, each one's tier child commits its partitions to
        the same table, and every other process sees those commits. False, the index
        unchanged, when any is not: the caller rebuilds the index and validates it."""
        index = entry.index
        if index is None:
            return False
        for version in range(entry.version + 1, upto + 1):
            added = tier_commit_files(entry.uri, version)
            if added is None:
                return False
            for partition, data_file in added.items():
                lasts = index.lasts.get(partition)
                if partition in index.overlapping or not lasts or data_file.first_offset != lasts[-1] + 1:
                    return False
            index = index.adding(added)
        entry.index = index
        entry.version = upto
        return True

    def _reload_locked(self, entry: _TopicTable) -> None:
        entry.table.update_incremental()
        actions = pa.table(entry.table.get_add_actions(flatten=True))
        names = set(actions.column_names)
        files: dict[int, list[DataFile]] = {}
        seen: set[str] = set()
        for row in actions.to_pylist():
            if row["path"] in seen:
                continue  # the same add twice in the snapshot: Delta keys its files by path, so one file
            seen.add(row["path"])
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
        entry.version = entry.table.version()
        entry.index = _Index.of(files)
        self._validate_locked(entry, files)

    def _validate_locked(self, entry: _TopicTable, files: dict[int, list[DataFile]]) -> None:
        """Find damage in the index just built (``files``); log each new damaged range once."""
        topic = entry.uri.rsplit("/", 1)[-1]
        try:
            schema = pa.schema(entry.table.schema().to_arrow())
            schema_changed = laketail_schema_changed(schema)
            tiered = {p: entry.table.transaction_version(tier_app_id(p)) or 0 for p in files}
            log_start = {p: entry.table.transaction_version(log_start_app_id(p)) or 0 for p in files}
            gaps_allowed = self.gaps_allowed(topic)
            damage = find_damage(
                files, tiered, log_start,
                gaps_allowed=gaps_allowed, schema_changed=schema_changed,
                facts=lambda data_file: self._offset_facts(entry, data_file),
                offsets=lambda data_file: self._file_offset_column(entry, data_file),
            )
        except Exception:
            log.exception("validating the table of %s failed; leaving its damage marks as they were", topic)
            return
        for partition, ranges in damage.items():
            known = set(entry.damage.get(partition, []))
            for d in ranges:
                if d not in known:
                    log.error("%s-%s: table damaged at offsets %s-%s: %s", topic, partition, d.first_offset,
                              d.last_offset, d.reason)
        entry.damage = damage
        current = {f.path for lst in files.values() for f in lst}
        entry.facts = {path: fact for path, fact in entry.facts.items() if path in current}

    def _offset_facts(self, entry: _TopicTable, data_file: DataFile) -> OffsetFacts:
        """What a file's offset column holds, read once per path."""
        found = entry.facts.get(data_file.path)
        if found is None:
            found = OffsetFacts.of(self._file_offset_column(entry, data_file))
            entry.facts[data_file.path] = found
        return found

    @staticmethod
    def _file_offset_column(entry: _TopicTable, data_file: DataFile) -> np.ndarray:
        path = f"{entry.uri}/{data_file.path}"
        return object_store.read_parquet(path, columns=["offset"]).column("offset").to_numpy()

    def known_damage(self, topic: str) -> dict[int, list[Damage]]:
        """What :meth:`damage` would say, without building an index nor taking a lock
        (metrics scrapes): nothing for a topic whose index was never built."""
        entry = self._topics.get(topic)
        return {} if entry is None else dict(entry.damage)

    def damage(self, topic: str) -> dict[int, list[Damage]]:
        """Damaged offset ranges per partition, as the last index build found them
        (builds the index if none was built yet)."""
        entry = self._get(topic)
        with entry.lock:
            self._built_locked(entry)
            return {p: list(d) for p, d in entry.damage.items() if d}

    def files_by_partition(self, topic: str) -> dict[int, list[DataFile]]:
        """Every data file of the topic's table, per partition, in offset order."""
        entry = self._get(topic)
        with entry.lock:
            return {p: list(files) for p, files in self._built_locked(entry).files.items()}

    def under_snapshot(self, topic: str, work: Callable[[DeltaTable, int, dict[int, list[DataFile]],
                                                        dict[int, list[Damage]]], T]) -> T:
        """Run ``work(table, version, files, damage)`` under the topic's table lock on a
        fresh index: the table loaded to its latest version, the files and damage of
        exactly that version (maintenance plans and commits against one snapshot). The
        index is rebuilt after ``work``, which may have committed."""
        entry = self._get(topic)
        with entry.lock:
            self._reload_locked(entry)
            assert entry.index is not None  # published by the build
            files = {p: list(f) for p, f in entry.index.files.items()}
            try:
                return work(entry.table, entry.version, files, {p: list(d) for p, d in entry.damage.items() if d})
            finally:
                self._reload_locked(entry)

    def reload(self, topic: str) -> None:
        entry = self._get(topic)
        with entry.lock:
            self._reload_locked(entry)

    def add_files(self, topic: str, version: int, added: dict[int, DataFile]) -> None:
        """Record files the tierer just committed as ``version`` (no log re-read)."""
        entry = self._get(topic)
        with entry.lock:
            if entry.index is None or version <= entry.version or not self._follow_locked(entry, version - 1) or any(
                    f.path == d.path for p, d in added.items() for f in entry.index.files.get(p, ())):
                self._reload_locked(entry)  # (a file already indexed: the rebuild holds each path once)
                return
            entry.version = version
            entry.index = entry.index.adding(added)

    @staticmethod
    def _file_offsets(path: str) -> tuple[int, int] | None:
        column = object_store.read_parquet(path, columns=["offset"]).column("offset")
        if len(column) == 0:
            return None
        bounds = pc.min_max(column)
        return bounds["min"].as_py(), bounds["max"].as_py()

    # -- reads ------------------------------------------------------------------------------------

    def read(
        self, topic: str, partition: int, start: int, end: int, max_records: int, max_bytes: int,
        cached_only: bool = False,
    ) -> pa.Table:
        """Rows of ``[start, end)`` in offset order (gaps allowed), at most ``max_records``
        and about ``max_bytes`` (at least one row). With ``cached_only``, raises
        :class:`NotCached` rather than touch the disk or wait for a lock. A read that
        starts in a damaged range raises :class:`CorruptMessage`; one that starts
        before it ends where the damage begins."""
        entry = self._topics.get(topic)
        damaged = entry.damage.get(partition) if entry is not None else None
        if damaged:
            end = _before_damage(topic, partition, damaged, start, end)
        if end - start > max_records:
            # Offsets are dense outside compacted stretches: bound the read so row-group
            # pruning skips what cannot be returned; a stretch of gaps reads on unbounded.
            rows = self.read(topic, partition, start, start + max_records, max_records, max_bytes, cached_only)
            if rows.num_rows:
                return rows
        try:
            return self._read_indexed(topic, partition, start, end, max_records, max_bytes, cached_only)
        except FileNotFoundError:
            if cached_only:
                raise NotCached(topic) from None
            # A file the index names is gone: an outside OPTIMIZE and VACUUM the index has
            # not followed yet. Follow it, once.
            self.reload(topic)
            return self._read_indexed(topic, partition, start, end, max_records, max_bytes, cached_only)

    def _read_indexed(self, topic: str, partition: int, start: int, end: int, max_records: int, max_bytes: int,
                      cached_only: bool) -> pa.Table:
        """:meth:`read` from the files the index holds for ``[start, end)``."""
        index = self._index(topic, cached_only)
        files = index.between(partition, start, end)
        if not files or files[0].first_offset > start:
            if cached_only:
                raise NotCached(topic)
            self.reload(topic)  # compaction or retention may have replaced files
            index = self._index(topic)
            files = index.between(partition, start, end)
        uri = self.table_uri(topic)
        if partition in index.overlapping:
            return self._read_merged(uri, topic, partition, files, start, end, max_records, max_bytes, cached_only)
        pieces: list[pa.Table] = []
        taken = 0
        nbytes = 0
        for data_file in files:
            if taken >= max_records or nbytes >= max_bytes:
                break
            table = self._read_file(f"{uri}/{data_file.path}", partition, start, end, cached_only)
            if table.num_rows == 0:
                continue
            table, size, cut = _take(table, max_records - taken, max_bytes - nbytes, taken == 0)
            if table.num_rows == 0:
                break
            pieces.append(table)
            taken += table.num_rows
            nbytes += size
            if cut:  # a smaller record of the next file may fit, but taking it would leave a gap
                break
        if not pieces:
            return pa.Table.from_batches([], RECORD_SCHEMA)
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)

    def _read_merged(self, uri: str, topic: str, partition: int, files: list[DataFile], start: int, end: int,
                     max_records: int, max_bytes: int, cached_only: bool) -> pa.Table:
        """The slow path for a partition whose files overlap: every overlapping file's
        rows of ``[start, end)``, merged in offset order; one offset twice is damage."""
        pieces = [self._read_file(f"{uri}/{f.path}", partition, start, end, cached_only) for f in files]
        pieces = [p for p in pieces if p.num_rows]
        if not pieces:
            return pa.Table.from_batches([], RECORD_SCHEMA)
        table = pa.concat_tables(pieces).sort_by("offset")
        offsets = table.column("offset").to_numpy()
        twice = offsets[1:][offsets[1:] == offsets[:-1]]
        if len(twice):
            raise CorruptMessage(
                f"{topic}-{partition}: the table holds offset {int(twice[0])} more than once "
                f"(files {', '.join(f.path for f in files)}); see `laketail check {topic}`"
            )
        return _take(table, max_records, max_bytes, True)[0]

    def _parquet_file(self, path: str, cached_only: bool = False) -> tuple[pq.ParquetFile, int, bool]:
        """The open file (metadata read once), the index of its ``offset`` column and
        whether its row groups follow each other in offset order (statistics say so)."""
        with self._parquet_lock:
            found = self._parquet.get(path)
            if found is not None:
                self._parquet.move_to_end(path)
                return found
        if cached_only:
            raise NotCached(path)
        pf = object_store.parquet_file(path)
        col = pf.schema_arrow.get_field_index("offset")
        found = (pf, col, _groups_in_order(pf.metadata, col))
        with self._parquet_lock:
            self._parquet[path] = found
            while len(self._parquet) > _PARQUET_CACHE:
                self._parquet.popitem(last=False)
        return found

    def _read_file(self, path: str, partition: int, start: int, end: int, cached_only: bool = False) -> pa.Table:
        """Rows of ``[start, end)`` in one data file of ``partition``, as ``RECORD_SCHEMA``:
        only the row groups whose offset statistics overlap, each decoded (and given its
        partition column) once while it stays in :data:`BLOCKS`."""
        pf, col, in_order = self._parquet_file(path, cached_only)
        meta = pf.metadata
        reader = None
        pieces = []
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(col).statistics
            if stats is not None and stats.has_min_max and (stats.max < start or stats.min >= end):
                continue
            group = BLOCKS.get((path, i))
            if group is None:
                if cached_only:
                    raise NotCached(path)
                if reader is None:
                    reader = object_store.parquet_file(path, metadata=meta)
                group = _RowGroup.read(reader, i, partition)
                BLOCKS.put((path, i), group, group.table.nbytes)
            pieces.append(group.between(start, end))
        if not pieces:
            return RECORD_SCHEMA.empty_table()
        if len(pieces) == 1:
            return pieces[0]
        table = pa.concat_tables(pieces)
        return table if in_order else table.sort_by("offset")

    def transactions(self, topic: str, partition: int, below: int
                     ) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, int]]]:
        """The partition's transaction markers (control rows) in the table below ``below``,
        as ``(offset, producer_id, kind)``, and its transactional records there, as
        ``(offset, producer_id, producer_epoch)``. Only row groups whose statistics allow
        a transactional row or a marker are read, and only those columns."""
        uri = self.table_uri(topic)
        markers: list[tuple[int, int, str]] = []
        records: list[tuple[int, int, int]] = []
        columns = ["offset", "producer_id", "producer_epoch", "transactional", "control"]
        for data_file in self._files(topic, partition):
            if data_file.first_offset >= below:
                break  # sorted by first offset
            pf, _, _ = self._parquet_file(f"{uri}/{data_file.path}")
            meta = pf.metadata
            txn_col = pf.schema_arrow.get_field_index("transactional")
            groups = []
            for i in range(meta.num_row_groups):
                stats = meta.row_group(i).column(txn_col).statistics
                if stats is None or not stats.has_min_max or stats.max:
                    groups.append(i)
            if not groups:
                continue
            rows = object_store.parquet_file(f"{uri}/{data_file.path}", metadata=meta).read_row_groups(
                groups, columns=columns)
            rows = rows.filter(pc.less(rows.column("offset"), below))
            control = rows.filter(pc.is_valid(rows.column("control")))
            markers.extend(zip(control.column("offset").to_pylist(), control.column("producer_id").to_pylist(),
                               control.column("control").to_pylist()))
            data = rows.filter(pc.and_(pc.is_null(rows.column("control")), rows.column("transactional")))
            records.extend(zip(data.column("offset").to_pylist(), data.column("producer_id").to_pylist(),
                               data.column("producer_epoch").to_pylist()))
        return markers, records

    def producers(self, topic: str, partition: int, below: int) -> dict[int, LearnedProducer]:
        """Each producer's last sequence runs in the table below ``below``
        (:func:`~laketail.storage.producer_state.sequence_runs`): what a hot log that
        restarted above the table's end needs to continue a producer's sequences -- and
        the coordinators' epoch (:data:`~laketail.records.COORDINATOR_PRODUCER_ID`, whose
        writes carry no sequence), so the fence of their writes outlives the reset. Only
        row groups whose statistics allow a producer's record are read, six columns."""
        uri = self.table_uri(topic)
        columns = ["offset", "producer_id", "producer_epoch", "sequence", "timestamp", "control"]
        runs: list = []
        coordinator: tuple[int, int] | None = None  # (epoch, timestamp ms) of the coordinators' last write
        for data_file in self._files(topic, partition):
            if data_file.first_offset >= below:
                break  # sorted by first offset
            pf, _, _ = self._parquet_file(f"{uri}/{data_file.path}")
            meta = pf.metadata
            pid_col = pf.schema_arrow.get_field_index("producer_id")
            groups = []
            for i in range(meta.num_row_groups):
                stats = meta.row_group(i).column(pid_col).statistics
                if stats is None or not stats.has_min_max or stats.max >= 0:
                    groups.append(i)
            if not groups:
                continue
            rows = pq.ParquetFile(f"{uri}/{data_file.path}", metadata=meta).read_row_groups(groups, columns=columns)
            rows = rows.filter(pc.less(rows.column("offset"), below))
            mine = rows.filter(pc.equal(rows.column("producer_id"), COORDINATOR_PRODUCER_ID))
            if mine.num_rows:
                last = pc.max(mine.column("offset")).as_py()
                row = mine.filter(pc.equal(mine.column("offset"), last)).slice(0, 1).to_pylist()[0]
                epoch = max(pc.max(mine.column("producer_epoch")).as_py(), coordinator[0] if coordinator else -1)
                coordinator = (epoch, int(row["timestamp"].timestamp() * 1000))
            rows = rows.filter(pc.and_(
                pc.is_null(rows.column("control")),
                pc.and_(pc.greater_equal(rows.column("producer_id"), 0), pc.greater_equal(rows.column("sequence"), 0)),
            ))
            if rows.num_rows:
                offsets, pids, epochs, sequences = (
                    rows.column(c).to_numpy() for c in ("offset", "producer_id", "producer_epoch", "sequence"))
                runs.extend(sequence_runs(offsets, pids, epochs, sequences,
                                          pc.divide(rows.column("timestamp").cast(pa.int64()), 1000).to_numpy()))
            if len(runs) > 100_000:  # keep what matters only: each producer's last runs
                runs = [(pid, p.epoch, run, p.last_timestamp_ms)
                        for pid, p in learned_producers(runs).items() for run in p.runs]
        learned = learned_producers(runs)
        if coordinator is not None:
            learned[COORDINATOR_PRODUCER_ID] = LearnedProducer(coordinator[0], (), coordinator[1])
        return learned

    def learn_transactions(self, topic: str, plog) -> int:
        """Give ``plog`` (a partition log whose producer state knows nothing below
        ``markers_from``) the transactions the table holds there, and its producers'
        last sequences (:meth:`producers`); how many markers."""
        below = plog.producer_state.markers_from
        if below <= 0:
            return 0
        markers, records = self.transactions(topic, plog.partition, below)
        plog.learn_transactions(markers, records, below, self.producers(topic, plog.partition, below))
        return len(markers)

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp_ms: int, below: int
    ) -> tuple[int, int] | None:
        """The earliest tabled offset below ``below`` whose timestamp is >= ``timestamp_ms``
        (files in any layout: rows need not be in offset order, files may overlap)."""
        target = timestamp_ms * 1000
        uri = self.table_uri(topic)
        best: tuple[int, int] | None = None
        for data_file in self._files(topic, partition):
            if data_file.first_offset >= below or (best is not None and data_file.first_offset > best[0]):
                break  # files are sorted by first offset: none further can hold an earlier hit
            if data_file.max_timestamp_us and data_file.max_timestamp_us < target:
                continue
            table = object_store.read_parquet(f"{uri}/{data_file.path}", columns=["offset", "timestamp"])
            table = table.filter(pc.less(table.column("offset"), below))
            ts = table.column("timestamp").cast(pa.int64())
            hits = table.filter(pc.greater_equal(ts, target))
            if hits.num_rows:
                offsets = hits.column("offset")
                row = pc.index(offsets, pc.min(offsets)).as_py()  # rows may be out of offset order
                found = (offsets[row].as_py(), hits.column("timestamp").cast(pa.int64())[row].as_py() // 1000)
                if best is None or found[0] < best[0]:
                    best = found
        return best


@dataclass(frozen=True)
class _RowGroup:
    """A decoded row group in offset order (sorted once here when its file had it
    otherwise) and its offsets as NumPy, for slicing by binary search."""

    table: pa.Table
    offsets: np.ndarray

    @classmethod
    def read(cls, reader: pq.ParquetFile, index: int, partition: int) -> "_RowGroup":
        table = reader.read_row_group(index)
        table = table.append_column("partition", pa.repeat(pa.scalar(partition, pa.int32()), table.num_rows))
        table = table.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA).combine_chunks()
        offsets = table.column("offset").to_numpy()
        if not bool(np.all(offsets[1:] >= offsets[:-1])):
            table = table.sort_by("offset").combine_chunks()
            offsets = table.column("offset").to_numpy()
        return cls(table, offsets)

    def between(self, start: int, end: int) -> pa.Table:
        lo, hi = np.searchsorted(self.offsets, [start, end])
        return self.table.slice(int(lo), int(hi - lo))


def _groups_in_order(meta: pq.FileMetaData, col: int) -> bool:
    """Each row group's offsets all lie above the previous one's (by statistics)."""
    last = None
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(col).statistics
        if stats is None or not stats.has_min_max:
            return meta.num_row_groups <= 1
        if last is not None and stats.min <= last:
            return False
        last = stats.max
    return True


def _take(table: pa.Table, max_records: int, max_bytes: int, at_least_one: bool) -> tuple[pa.Table, int, bool]:
    """The head of ``table`` (offset order) within ``max_records`` and ``max_bytes`` of
    keys and values (one row at least when ``at_least_one``): the rows, their bytes, and
    whether the byte bound cut it."""
    table = table.slice(0, max_records)
    size = payload_bytes(table.column("value")) + payload_bytes(table.column("key"))
    cut = size > max_bytes
    if cut:  # only then find where the byte bound cuts
        sizes = pc.add(
            pc.fill_null(pc.binary_length(table.column("value")), 0),
            pc.fill_null(pc.binary_length(table.column("key")), 0),
        )
        running = pc.cumulative_sum(sizes)
        fits = pc.sum(pc.less_equal(running, max_bytes)).as_py() or 0
        table = table.slice(0, max(fits, 1 if at_least_one else 0))
        size = pc.sum(sizes.slice(0, table.num_rows)).as_py() or 0
    return table, size, cut


def _before_damage(topic: str, partition: int, damaged: list[Damage], start: int, end: int) -> int:
    """``end`` cut back to the first damaged range at or after ``start``; raises
    :class:`CorruptMessage` when ``start`` lies in one."""
    for d in damaged:
        if not d.refuses_reads:
            continue
        if d.first_offset <= start <= d.last_offset:
            raise CorruptMessage(
                f"{topic}-{partition}: offsets {d.first_offset}-{d.last_offset} of the table are damaged "
                f"({d.reason}); see `laketail check {topic}`"
            )
        if start < d.first_offset < end:
            end = d.first_offset
    return end


def tier_commit_files(uri: str, version: int) -> dict[int, DataFile] | None:
    """The file per partition that version ``version`` of the table at ``uri``
    added, when that version is a laketail tier commit: add actions with offset
    statistics, one per partition, each matched by its partition's ``laketail.tier``
    transaction ending just after the file's last offset; besides them only commit info
    and ``laketail.epoch`` transactions. None for any other commit (a remove, a change of
    metadata or protocol, another application's transaction, an outside writer's add),
    or when the commit file cannot be read. On an object store the commit file is one GET,
    where a rebuild would list and validate every file of the table."""
    try:
        raw = object_store.read_bytes(commit_file(uri, version))
        actions = [json.loads(line) for line in raw.splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    files: dict[int, DataFile] = {}
    tier_ends: dict[str, object] = {}
    try:
        for action in actions:
            (kind, body), = action.items()
            if kind == "commitInfo":
                continue
            if kind == "txn" and body["appId"].startswith(TIER_APP_PREFIX):
                tier_ends[body["appId"][len(TIER_APP_PREFIX):]] = body["version"]
            elif kind == "txn" and body["appId"].startswith(EPOCH_APP_PREFIX):
                continue
            elif kind == "add" and body.get("dataChange", True):
                partition = int(body["partitionValues"]["partition"])
                stats = json.loads(body["stats"])
                low, high = stats["minValues"], stats["maxValues"]
                if partition in files:
                    return None
                files[partition] = DataFile(
                    int(low["offset"]), int(high["offset"]), unquote(body["path"]), int(stats["numRecords"]),
                    _iso_us(low.get("timestamp")), _iso_us(high.get("timestamp")), int(body.get("size") or 0),
                )
            else:
                return None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not files or any(tier_ends.get(str(p)) != f.last_offset + 1 for p, f in files.items()):
        return None
    return files


def _iso_us(text: str | None) -> int:
    """A Delta statistics timestamp (ISO 8601, milliseconds) in microseconds, as
    :func:`_ts_us` gives for the same statistic read through delta-rs."""
    if text is None:
        return 0
    return _ts_us(datetime.fromisoformat(text.replace("Z", "+00:00")))


def _ts_us(value) -> int:
    if value is None:
        return 0
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1_000_000)
    return int(value)
