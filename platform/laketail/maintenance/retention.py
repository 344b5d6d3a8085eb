"""Retention (``cleanup.policy=delete``): delete a partition's oldest table files.

:func:`plan_retention` decides, per partition, how long a prefix of its files (in
offset order) to delete, whole files only, as Kafka deletes whole segments:

* ``retention.ms`` -- from the oldest on, files whose newest record (``max`` of the
  ``timestamp`` statistics) is older than ``now - retention.ms``; the first file that is
  not ends the prefix. A file whose timestamps are unknown is never old;
* ``retention.bytes`` -- from the oldest on, files whose removal still leaves the
  partition's table at least ``retention.bytes`` large (Kafka's rule: the partition
  never drops below the limit because of retention);
* files wholly below the current log start offset are always deleted;
* the prefix never ends inside files whose offsets overlap (a layout only outside
  writers leave): deleting a file with rows above the new log start would lose them;
* only files wholly below the partition's ``tiered_offset`` are ever deleted, so the
  records a consumer at the log end still needs are never touched: they sit at or
  above the new log start offset.

The new ``log_start_offset`` is the first offset of the first file kept or, when every
file goes, the offset after the last deleted record (never more than the tiered
offset, so a consumer at the high watermark stays in range). The plan is committed as
``remove`` actions plus the Delta transaction ``laketail.logstart.<p>`` whose version is
the new log start offset, in ONE commit: brokers follow the table and move their log
start offset from that transaction, so a consumer below it gets OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from laketail.storage.table_reader import DataFile


@dataclass(frozen=True)
class RetentionPlan:
    """The files of one partition to delete and the log start offset that results."""

    partition: int
    removed: tuple[DataFile, ...]
    log_start_offset: int

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.removed)


def plan_retention(
    files: Mapping[int, Sequence[DataFile]],
    *,
    tiered_offsets: Mapping[int, int],
    log_start_offsets: Mapping[int, int],
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
) -> list[RetentionPlan]:
    """What to delete now, per partition; partitions with nothing to delete are absent.

    ``retention_ms`` / ``retention_bytes`` of -1 switch that limit off."""
    horizon_us = (now_ms - retention_ms) * 1000
    plans = []
    for partition in sorted(files):
        ordered = sorted(files[partition])
        tiered = tiered_offsets.get(partition, 0)
        current_start = log_start_offsets.get(partition, 0)
        remaining = sum(f.size_bytes for f in ordered)
        by_time = by_size = True
        removed: list[DataFile] = []
        for data_file in ordered:
            if data_file.last_offset >= tiered:
                break
            below_start = data_file.last_offset < current_start
            by_time = by_time and retention_ms >= 0 and 0 < data_file.max_timestamp_us < horizon_us
            by_size = by_size and retention_bytes >= 0 and remaining - data_file.size_bytes >= retention_bytes
            if not (below_start or by_time or by_size):
                break
            removed.append(data_file)
            remaining -= data_file.size_bytes
        # Files an outside rewrite left overlapping: a deleted file may not hold rows at
        # or above the first kept file's first offset (the new log start offset).
        while removed and len(removed) < len(ordered) and (
            max(f.last_offset for f in removed) >= ordered[len(removed)].first_offset
        ):
            removed.pop()
        if not removed:
            continue
        kept = ordered[len(removed):]
        new_start = kept[0].first_offset if kept else removed[-1].last_offset + 1
        plans.append(RetentionPlan(partition, tuple(removed), max(new_start, current_start)))
    return plans
