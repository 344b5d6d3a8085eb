"""``laketail check TOPIC``: verify a topic's table and hot logs, and say what is wrong.

Role: the full, slow counterpart of the validation the table reader runs at each index
build (``table_check``). Where that one trusts laketail's own files by their names, this
reads the ``offset``, ``control``, ``transactional`` and ``producer_id`` columns of every
file of the table and every hot record of each partition this broker leads, and checks:

* table: every offset unique; none at or above the tiered offset; no offset of
  ``[log start, tiered)`` missing unless the topic is key-compacted;
* hot log: offsets from its start to the log end offset dense, unique, in order;
* the tiers meet: the hot log starts at or below the tiered offset (else the offsets
  between are nowhere) and the tiered offset is at most the high watermark; the
  broker's tiered offset is not above the table's ``laketail.tier.<p>``;
* control markers: every transactional data record below the last stable offset is
  followed by a COMMIT or ABORT marker of its producer; a marker that follows no
  transactional record of its producer is reported too.

It runs in the broker (which has the hot logs and the table at hand) and answers a plain
JSON report; partitions led by another broker get the table checks only, and say so.
Pure given its inputs apart from the reads it is handed. Not thread-safe: one call, one
worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from laketail.records import RECORD_SCHEMA, laketail_schema_changed
from laketail.storage.table_check import Damage, OffsetFacts, find_damage

_COLUMNS = ["offset", "control", "transactional", "producer_id"]
_CHECK_SCHEMA = pa.schema([RECORD_SCHEMA.field(c) for c in _COLUMNS])  # outside writers' types vary
_HOT_CHUNK = 100_000


@dataclass
class PartitionReport:
    partition: int
    files: int = 0
    table_records: int = 0
    hot_records: int = 0
    tiered_offset: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "partition": self.partition, "files": self.files, "table_records": self.table_records,
            "hot_records": self.hot_records, "tiered_offset": self.tiered_offset,
            "problems": self.problems, "notes": self.notes,
        }


def check_partition(tables, topic: str, partition: int, plog, *, gaps_allowed: bool) -> PartitionReport:
    """Check one partition; ``plog`` is this broker's leading replica, or None."""
    tables.reload(topic)
    files = tables.files_by_partition(topic).get(partition, [])
    dt, lock = tables.delta_table(topic)
    with lock:
        tiered = dt.transaction_version(f"laketail.tier.{partition}") or 0
        log_start = dt.transaction_version(f"laketail.logstart.{partition}") or 0
        schema = pa.schema(dt.schema().to_arrow())
    report = PartitionReport(partition, files=len(files), tiered_offset=tiered)
    uri = tables.table_uri(topic)
    columns: dict[str, pa.Table] = {}
    for f in list(files):
        try:
            columns[f.path] = pq.read_table(f"{uri}/{f.path}", columns=_COLUMNS).select(_COLUMNS).cast(_CHECK_SCHEMA)
        except (OSError, pa.ArrowException) as exc:
            report.problems.append(f"file {f.path} (offsets {f.first_offset}-{f.last_offset}): unreadable: {exc}")
            files.remove(f)
            continue
        report.table_records += columns[f.path].num_rows
        offsets = columns[f.path].column("offset").to_numpy()
        if len(offsets) and (offsets.min() != f.first_offset or offsets.max() != f.last_offset):
            report.problems.append(
                f"file {f.path}: statistics say offsets {f.first_offset}-{f.last_offset}, "
                f"the rows hold {offsets.min()}-{offsets.max()}"
            )
        if len(offsets) > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
            report.notes.append(f"file {f.path}: rows are not in offset order (an outside rewrite; reads sort them)")
    schema_changed = laketail_schema_changed(schema)
    damage = find_damage(
        {partition: files}, {partition: tiered}, {partition: log_start},
        gaps_allowed=gaps_allowed, schema_changed=schema_changed, trust_names=False,
        facts=lambda f: OffsetFacts.of(columns[f.path].column("offset").to_numpy()),
        offsets=lambda f: columns[f.path].column("offset").to_numpy(),
    ).get(partition, [])
    report.problems.extend(_describe(d) for d in damage)

    table_rows = pa.concat_tables(columns.values()) if columns else None
    hot_rows = None
    if plog is None:
        report.notes.append("hot log not checked: another broker leads this partition (run the check there)")
    else:
        hot_rows = _check_hot(plog, lambda: tables.tiered_offset(topic, partition), report)
    _check_markers(table_rows, hot_rows, plog, report)
    return report


def _describe(d: Damage) -> str:
    return f"offsets {d.first_offset}-{d.last_offset}: {d.reason}"


def _check_hot(plog, tiered_now, report: PartitionReport) -> pa.Table | None:
    """``tiered_now()`` reads the table's tiered offset again: the tierer may have
    committed since the table was read, and only a difference that holds is a problem."""
    start, end, broker_tiered = plog.hot_start_offset, plog.high_watermark, plog.tiered_offset
    tiered = tiered_now()
    if broker_tiered > tiered:
        report.problems.append(f"the broker's tiered offset {broker_tiered} is above the table's {tiered}")
    if start > tiered:
        report.problems.append(f"offsets {tiered}-{start - 1} are neither in the table (tiered to {tiered}) "
                               f"nor in the hot log (starts at {start})")
    if tiered > plog.high_watermark:  # read after the tiered offset: it only grows
        report.problems.append(f"the table is tiered to {tiered}, above the high watermark {plog.high_watermark}")
    pieces = []
    position = start
    expected = start
    while position < end:
        chunk = plog.read_once(position, end, _HOT_CHUNK, 1 << 30)
        if chunk.num_rows == 0:
            report.problems.append(f"hot log: nothing readable at offset {position} below the high watermark {end}")
            break
        offsets = chunk.column("offset").to_numpy()
        want = np.arange(expected, expected + len(offsets))
        if not np.array_equal(offsets, want):
            bad = int(np.nonzero(offsets != want)[0][0])
            report.problems.append(
                f"hot log: offset {int(offsets[bad])} where {int(want[bad])} was due (offsets must be dense, "
                "unique and in order)"
            )
            break
        pieces.append(chunk.select(_COLUMNS).cast(_CHECK_SCHEMA))
        expected = position = int(offsets[-1]) + 1
    report.hot_records = sum(p.num_rows for p in pieces)
    return pa.concat_tables(pieces) if pieces else None


def _check_markers(table_rows, hot_rows, plog, report: PartitionReport) -> None:
    """Transactional data records below the LSO must be closed by a marker of their producer."""
    parts = [t for t in (table_rows, hot_rows) if t is not None and t.num_rows]
    if not parts:
        return
    rows = pa.concat_tables(parts).sort_by("offset")
    lso = plog.last_stable_offset if plog is not None else None
    open_since: dict[int, int] = {}
    seen: set[int] = set()
    for offset, control, txn, pid in zip(*(rows.column(c).to_pylist() for c in _COLUMNS)):
        if offset in seen:
            continue  # a duplicate: reported above
        seen.add(offset)
        if control is not None:
            if pid not in open_since:
                report.notes.append(f"offset {offset}: {control} marker of producer {pid} follows no "
                                    "transactional record of it in this partition")
            open_since.pop(pid, None)
        elif txn:
            open_since.setdefault(pid, offset)
    if lso is None:
        return  # the hot log's markers were not read: an open transaction may be closed there
    for pid, first in sorted(open_since.items(), key=lambda kv: kv[1]):
        if first < lso:
            report.problems.append(
                f"offset {first}: a transaction of producer {pid} has no COMMIT/ABORT marker "
                f"below the last stable offset {lso}"
            )
