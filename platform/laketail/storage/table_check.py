"""Validation of a topic's table against what laketail needs of it.

Role: topic tables are Delta tables, and users' tools write to them too (``OPTIMIZE``,
z-order, checkpoints, ``VACUUM``; sometimes, wrongly, appends). Reads are correct
whatever the file layout (see ``table_reader``); what no layout can make correct is a
partition whose table holds one offset twice, lost offsets, offsets the tierer has not
written yet, or another schema. :func:`find_damage` finds those from a partition's file
index and returns the damaged offset ranges; the table reader runs it at each index
build (that is, once per table version it did not write itself) and fails reads of the
damaged ranges rather than serve duplicates.

Invariants of an undamaged partition ``p`` (``tiered`` = version of
``laketail.tier.<p>``, ``log start`` = version of ``laketail.logstart.<p>``):

* every offset in the table is unique and below ``tiered``;
* unless the topic is key-compacted (gaps are then legal), every offset of
  ``[log start, tiered)`` is in the table. Missing offsets are marked, but reads pass
  over them (as over compaction's gaps): there is nothing wrong to serve;
* the table's schema is the record schema.

Cost: statistics prove most of it. A file laketail wrote (its name starts with its first
and last offsets, see ``data_files``) holds sorted unique offsets; any other file's
offset column is read once per path (its :class:`OffsetFacts` are kept). Files whose
offset ranges overlap are read together only while they overlap.

Pure: the caller passes the index and a way to read a file's offsets; nothing here does
IO of its own. Not thread-safe state: none is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence, TypeVar

import numpy as np

if TYPE_CHECKING:
    from laketail.storage.table_reader import DataFile

#: ``data_files.write_data_file``'s names: ``<first:020d>-<last:020d>-<tag><12 hex>.parquet``;
#: tag ``c`` marks laketail's compaction output (key compaction may leave gaps in it).
_LAKETAIL_NAME = re.compile(r"(?:^|/)\d{20}-\d{20}-(?P<tag>[A-Za-z0-9_]*?)[0-9a-f]{12}\.parquet$")


@dataclass(frozen=True, order=True)
class Damage:
    """Offsets ``[first_offset, last_offset]`` of one partition that cannot be served."""

    first_offset: int
    last_offset: int
    reason: str
    #: reads of the range fail (rows there would be wrong or twice); False for offsets
    #: merely missing, which reads pass over as they pass over key compaction's gaps
    refuses_reads: bool = True

    def to_json(self) -> dict:
        return {"first_offset": self.first_offset, "last_offset": self.last_offset, "reason": self.reason,
                "refuses_reads": self.refuses_reads}


@dataclass(frozen=True)
class OffsetFacts:
    """What one file's offset column holds: offsets present more than once and offsets
    missing between its smallest and largest, each as inclusive runs."""

    duplicates: tuple[tuple[int, int], ...]
    gaps: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, offsets: np.ndarray) -> "OffsetFacts":
        return cls(*duplicates_and_gaps(offsets))


def duplicates_and_gaps(offsets: np.ndarray) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """Runs of offsets present twice or more, and runs missing between min and max."""
    if len(offsets) == 0:
        return (), ()
    ordered = np.sort(offsets, kind="stable")
    twice = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    unique = np.unique(ordered)
    steps = np.nonzero(unique[1:] - unique[:-1] > 1)[0]
    gaps = tuple((int(unique[i]) + 1, int(unique[i + 1]) - 1) for i in steps)
    return _runs(twice), gaps


def _runs(values: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Sorted unique integers as inclusive runs: [1, 2, 3, 7] -> ((1, 3), (7, 7))."""
    if len(values) == 0:
        return ()
    breaks = np.nonzero(values[1:] - values[:-1] != 1)[0]
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [len(values) - 1]))
    return tuple((int(values[s]), int(values[e])) for s, e in zip(starts, ends))


def written_by_laketail(path: str) -> bool:
    return _LAKETAIL_NAME.search(path) is not None


def compacted_by_laketail(path: str) -> bool:
    found = _LAKETAIL_NAME.search(path)
    return found is not None and found.group("tag") == "c"


def find_damage(
    files: Mapping[int, list["DataFile"]],
    tiered: Mapping[int, int],
    log_start: Mapping[int, int],
    *,
    gaps_allowed: bool,
    schema_changed: bool,
    facts: Callable[["DataFile"], OffsetFacts],
    offsets: Callable[["DataFile"], np.ndarray] | None = None,
    trust_names: bool = True,
) -> dict[int, list[Damage]]:
    """Damaged offset ranges per partition (only partitions with damage appear).

    ``files`` per partition sorted by first offset (the table reader's index);
    ``facts(file)`` what its offset column holds (cached by the caller);
    ``offsets(file)`` its offset column, read when files overlap (defaults to none:
    overlapping files are then damage as a whole); ``trust_names=False`` reads even
    laketail's own files (``laketail check``)."""
    out: dict[int, list[Damage]] = {}
    for partition in sorted(set(files) | set(tiered)):
        found = _partition_damage(
            files.get(partition, []), tiered.get(partition, 0), log_start.get(partition, 0),
            gaps_allowed, facts, offsets, trust_names,
        )
        if schema_changed:
            last = max([tiered.get(partition, 0) - 1] + [f.last_offset for f in files.get(partition, [])])
            found.append(Damage(0, max(last, 0), "the table's schema is no longer laketail's record schema"))
        if found:
            out[partition] = _merge(found)
    return out


class _OffsetRange(Protocol):
    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...


F = TypeVar("F", bound=_OffsetRange)


def overlap_clusters(files: Sequence[F]) -> list[list[F]]:
    """``files`` (ordered by first offset) cut into runs whose offset ranges overlap one
    another, in order; a file that overlaps nothing is a run of its own."""
    clusters: list[list[F]] = []
    reach = -1
    for f in files:
        if clusters and f.first_offset <= reach:
            clusters[-1].append(f)
        else:
            clusters.append([f])
        reach = max(reach, f.last_offset)
    return clusters


def _partition_damage(files, tiered, log_start, gaps_allowed, facts, offsets, trust_names) -> list[Damage]:
    found: list[Damage] = []
    for f in files:
        if f.last_offset >= tiered:
            found.append(Damage(
                max(f.first_offset, tiered), f.last_offset,
                f"file {f.path} holds offsets at or above the tiered offset {tiered}, "
                "which laketail has not written (an outside append)",
            ))
    # Files whose offset ranges overlap are judged together, the others one by one.
    clusters = overlap_clusters(files)
    for cluster in clusters:
        names = ", ".join(f.path for f in cluster)
        if len(cluster) == 1:
            f = cluster[0]
            if trust_names and written_by_laketail(f.path) and f.num_records <= f.last_offset - f.first_offset + 1:
                continue  # laketail writes sorted unique offsets, dense unless key-compacted
            twice, gaps = facts(f).duplicates, facts(f).gaps
            where = f"file {names}"
        elif offsets is None:
            first = min(f.first_offset for f in cluster)
            found.append(Damage(first, max(f.last_offset for f in cluster), f"files {names} overlap"))
            continue
        else:
            twice, gaps = duplicates_and_gaps(np.concatenate([offsets(f) for f in cluster]))
            where = f"files {names}"
        for a, b in twice:
            found.append(Damage(a, b, f"offsets present more than once in {where}"))
        if not gaps_allowed and not (len(cluster) == 1 and compacted_by_laketail(cluster[0].path)):
            for a, b in gaps:
                if a < tiered:  # above it the table is not meant to hold anything yet
                    found.append(Damage(a, min(b, tiered - 1), f"offsets missing inside {where}", False))
    if not gaps_allowed and tiered > log_start:
        # Gaps next to laketail's compaction output are key compaction's (the topic was
        # compacted before its cleanup.policy became delete), not damage.
        expected, after_compacted = log_start, False
        for cluster in clusters:
            first = min(f.first_offset for f in cluster)
            compacted = any(compacted_by_laketail(f.path) for f in cluster)
            if first > expected and expected < tiered and not (compacted or after_compacted):
                found.append(Damage(expected, min(first, tiered) - 1, "offsets missing from the table", False))
            expected = max(expected, max(f.last_offset for f in cluster) + 1)
            after_compacted = compacted
        if expected < tiered and not after_compacted:
            found.append(Damage(expected, tiered - 1, "offsets missing from the table below the tiered offset", False))
    return found


def _merge(found: list[Damage]) -> list[Damage]:
    """Sorted; ranges that overlap or touch become one (their reasons joined)."""
    merged: list[Damage] = []
    for d in sorted(found):
        if merged and d.first_offset <= merged[-1].last_offset + 1:
            last = merged[-1]
            if d.refuses_reads != last.refuses_reads:  # kept apart: reads treat them differently
                merged.append(d)
                continue
            reason = last.reason if d.reason in last.reason else f"{last.reason}; {d.reason}"
            merged[-1] = Damage(last.first_offset, max(last.last_offset, d.last_offset), reason, last.refuses_reads)
        else:
            merged.append(d)
    return merged
