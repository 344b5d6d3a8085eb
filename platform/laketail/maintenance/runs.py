"""One maintenance pass over one topic: snapshot, plan, execute, commit.

The Spark jobs (``jobs/compaction.py``, ``jobs/retention.py``) call these per topic;
only *where* compaction's rewrite runs differs (a :data:`Rewriter`: Spark executors,
or this process with pyarrow). Every decision comes from the pure planners:

* :func:`plan_compaction` -- key compaction (:func:`plan_key_compaction`) for
  ``cleanup.policy`` with ``compact``, then file compaction
  (:func:`plan_file_compaction`) of the small files key compaction leaves alone;
* :func:`run_retention` -- :func:`plan_retention` for ``cleanup.policy`` with
  ``delete``, committed with the log start transactions, then vacuum.

``now_ms`` (what the plans are made for) is passed in, never read here; actions are
stamped with the wall clock (:mod:`.table_commit`), which vacuum's window is measured on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from laketail.maintenance.compaction import plan_key_compaction
from laketail.maintenance.file_compaction import plan_file_compaction
from laketail.maintenance.retention import plan_retention
from laketail.maintenance.rewrite import RewriteOutput, RewriteTask, rewrite_locally, rewrite_tasks
from laketail.maintenance.table_commit import (
    TableSnapshot,
    clean_staging,
    commit_retention,
    commit_rewrite,
    vacuum,
)
from laketail.maintenance.topics import MaintainedTopic

#: ``(table_uri, staging_uri, tasks, now_ms) -> outputs``
Rewriter = Callable[[str, str, Sequence[RewriteTask], int], list[RewriteOutput]]

DEFAULT_VACUUM_AFTER_MS = 3_600_000
#: Staging folders older than this (wall clock) belong to runs that died.
STAGING_KEEP_S = 3600.0


@dataclass
class CompactionResult:
    topic: str
    tasks: list[RewriteTask] = field(default_factory=list)
    outputs: list[RewriteOutput] = field(default_factory=list)
    files_before: int = 0
    version: int | None = None  # the commit's table version; None when nothing was done
    vacuumed: int = 0

    @property
    def files_removed(self) -> int:
        return sum(len(t.inputs) for t in self.tasks)

    def summary(self) -> dict:
        return {
            "job": "compaction",
            "topic": self.topic,
            "rewrites": len(self.tasks),
            "key_compactions": sum(t.rule == "keys" for t in self.tasks),
            "files_removed": self.files_removed,
            "files_added": len(self.outputs),
            "files_before": self.files_before,
            "records_written": sum(o.num_records for o in self.outputs),
            "version": self.version,
            "vacuumed": self.vacuumed,
        }


def plan_compaction(
    snapshot: TableSnapshot, topic: MaintainedTopic, now_ms: int, target_file_bytes: int, min_files: int = 2
) -> list[RewriteTask]:
    key_plans = []
    if topic.compacted:
        key_plans = plan_key_compaction(
            snapshot.files,
            now_ms=now_ms,
            min_compaction_lag_ms=topic.config.min_compaction_lag_ms,
            delete_retention_ms=topic.config.delete_retention_ms,
            min_files=min_files,
        )
    taken = frozenset(f.path for plan in key_plans for f in plan.inputs)
    file_plans = plan_file_compaction(
        snapshot.files, target_file_bytes=target_file_bytes, min_files=min_files, exclude=taken
    )
    return rewrite_tasks(key_plans, file_plans)


def run_compaction(
    root: str,
    topic: MaintainedTopic,
    now_ms: int,
    *,
    target_file_bytes: int,
    min_files: int = 2,
    rewriter: Rewriter = rewrite_locally,
    vacuum_after_ms: int = DEFAULT_VACUUM_AFTER_MS,
    dry_run: bool = False,
) -> CompactionResult:
    snapshot = TableSnapshot.load(root, topic.name, topic.partitions)
    result = CompactionResult(topic.name, files_before=sum(len(f) for f in snapshot.files.values()))
    clean_staging(snapshot.uri, older_than_s=max(vacuum_after_ms / 1000, STAGING_KEEP_S), now_s=time.time())
    result.tasks = plan_compaction(snapshot, topic, now_ms, target_file_bytes, min_files)
    if result.tasks and not dry_run:
        staging = snapshot.staging_uri()
        result.outputs = rewriter(snapshot.uri, staging, result.tasks, now_ms)
        result.version = commit_rewrite(snapshot, staging, result.tasks, result.outputs)
    if not dry_run:
        result.vacuumed = len(vacuum(snapshot.table, vacuum_after_ms))
    return result


@dataclass
class RetentionResult:
    topic: str
    log_start_offsets: dict[int, int] = field(default_factory=dict)
    files_removed: int = 0
    bytes_removed: int = 0
    version: int | None = None
    vacuumed: int = 0

    def summary(self) -> dict:
        return {
            "job": "retention",
            "topic": self.topic,
            "files_removed": self.files_removed,
            "bytes_removed": self.bytes_removed,
            "log_start_offsets": {str(p): o for p, o in sorted(self.log_start_offsets.items())},
            "version": self.version,
            "vacuumed": self.vacuumed,
        }


def run_retention(
    root: str,
    topic: MaintainedTopic,
    now_ms: int,
    *,
    vacuum_after_ms: int = DEFAULT_VACUUM_AFTER_MS,
    dry_run: bool = False,
) -> RetentionResult:
    result = RetentionResult(topic.name)
    if not topic.deleted_by_retention:
        return result
    snapshot = TableSnapshot.load(root, topic.name, topic.partitions)
    plans = plan_retention(
        snapshot.files,
        tiered_offsets=snapshot.tiered_offsets,
        log_start_offsets=snapshot.log_start_offsets,
        now_ms=now_ms,
        retention_ms=topic.config.retention_ms,
        retention_bytes=topic.config.retention_bytes,
    )
    result.log_start_offsets = {p.partition: p.log_start_offset for p in plans}
    result.files_removed = sum(len(p.removed) for p in plans)
    result.bytes_removed = sum(p.size_bytes for p in plans)
    if plans and not dry_run:
        result.version = commit_retention(snapshot, plans)
    if not dry_run:
        result.vacuumed = len(vacuum(snapshot.table, vacuum_after_ms))
    return result
