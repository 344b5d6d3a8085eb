"""Maintenance commits to a topic's Delta table through delta-rs.

Role: load one consistent :class:`TableSnapshot` of a topic's table (files per
partition, tiered offsets, log start offsets, all at one version), and commit what
the maintenance plans made of it, against that same version:

* :func:`commit_rewrite` -- compaction outputs moved from the staging folder into
  the table (on an object store, which has no rename, they were written into the
  table's partition folders directly: a file no commit names is an orphan no reader
  opens), then ``remove`` of the inputs + ``add`` of the outputs, all with
  ``dataChange=false`` (rows rearranged, offsets unchanged: a stream that follows the
  table has nothing new to read), in one commit;
* :func:`commit_retention` -- ``remove`` of the deleted files (``dataChange=true``) and,
  per partition, the Delta transaction ``laketail.logstart.<p>`` = the new log start
  offset, in one commit: brokers move their log start offset from it;
* :func:`vacuum` -- removed files deleted from disk once the safety window has passed
  (readers that listed them a moment ago still find them).

Concurrency: the tierer only appends files (no conflict: delta-rs rebases the commit
over concurrent appends, ``max_commit_retries`` times). A concurrent commit that
removed one of our inputs makes ours fail with :class:`MaintenanceConflict`; nothing is
then left behind and the next run plans again from a fresh snapshot.
"""

from __future__ import annotations

import math
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from laketail.clock import SystemClock
from laketail.errors import KafkaStorageError
from laketail.maintenance.retention import RetentionPlan
from laketail.maintenance.rewrite import RewriteOutput, RewriteTask
from laketail.records import RECORD_SCHEMA
from laketail.storage import object_store
from laketail.storage.table_reader import DataFile, TableReader, log_start_app_id, tier_app_id

STAGING_DIR = "_laketail_staging"
COMMIT_RETRIES = 20


class MaintenanceConflict(KafkaStorageError):
    """A concurrent commit changed the files a maintenance plan was made from (retriable:
    plan again from a fresh snapshot)."""


@dataclass
class TableSnapshot:
    """One version of a topic's table, as maintenance plans need it."""

    topic: str
    uri: str
    table: DeltaTable
    version: int
    files: dict[int, list[DataFile]]
    tiered_offsets: dict[int, int]
    log_start_offsets: dict[int, int]

    @classmethod
    def load(cls, root: str, topic: str, partitions: int) -> "TableSnapshot":
        reader = TableReader(root)
        reader.reload(topic)
        dt, _ = reader.delta_table(topic)
        files = reader.files_by_partition(topic)  # the version reload() read, not newer
        tiered = {p: dt.transaction_version(tier_app_id(p)) or 0 for p in range(partitions)}
        starts = {p: dt.transaction_version(log_start_app_id(p)) or 0 for p in range(partitions)}
        return cls(topic, reader.table_uri(topic), dt, dt.version(), files, tiered, starts)

    def staging_uri(self) -> str:
        """A fresh staging folder for one run's outputs (inside the table: same disk).
        On an object store, the table itself: outputs are written where they stay, under
        names no other file has, and become part of the table only by the commit."""
        if object_store.is_remote(self.uri):
            return self.uri
        return f"{self.uri}/{STAGING_DIR}/{uuid.uuid4().hex}"


def _commit(snapshot: TableSnapshot, actions: list, operation: str, txns: list[Transaction] | None = None,
            retries: int = COMMIT_RETRIES) -> int:
    try:
        snapshot.table.create_write_transaction(
            actions,
            mode="append",
            schema=RECORD_SCHEMA,
            partition_by=["partition"],
            commit_properties=CommitProperties(
                custom_metadata={"laketail.operation": operation},
                max_commit_retries=retries,
                app_transactions=txns or None,
            ),
        )
    except CommitFailedError as exc:
        raise MaintenanceConflict(
            f"{operation} of {snapshot.topic} (planned at version {snapshot.version}) conflicts with a "
            f"concurrent commit: {exc}"
        ) from exc
    snapshot.table.update_incremental()
    return snapshot.table.version()


def commit_rewrite(
    snapshot: TableSnapshot,
    staging_uri: str,
    tasks: Sequence[RewriteTask],
    outputs: Sequence[RewriteOutput],
) -> int:
    """Move ``outputs`` into the table and commit them replacing every task's inputs.
    Returns the new table version. The staging folder is removed either way. Outputs
    staged in the table itself (an object store: :meth:`TableSnapshot.staging_uri`) are
    not moved, and are deleted when the commit fails."""
    now_ms = _wall_clock_ms()
    by_task = {task.task_id: task for task in tasks}
    in_place = staging_uri == snapshot.uri
    moved: list[str] = [f"{snapshot.uri}/{output.path}" for output in outputs] if in_place else []
    try:
        for output in [] if in_place else outputs:
            target = f"{snapshot.uri}/{output.path}"
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(f"{staging_uri}/{output.path}", target)
            moved.append(target)
        sizes = {f.path: f.size_bytes for files in snapshot.files.values() for f in files}
        actions: list[AddAction | RemoveAction] = [
            RemoveAction(path, False, now_ms, sizes.get(path) or None, {"partition": str(task.partition)})
            for task in tasks
            for path in task.inputs
        ]
        actions += [
            AddAction(output.path, output.size_bytes, {"partition": str(by_task[output.task_id].partition)},
                      now_ms, False, output.stats)
            for output in outputs
        ]
        return _commit_replacing(snapshot, actions, {path for task in tasks for path in task.inputs})
    except BaseException:
        for path in moved:
            object_store.remove_file(path)
        raise
    finally:
        if not in_place:
            shutil.rmtree(staging_uri, ignore_errors=True)


def _commit_replacing(snapshot: TableSnapshot, actions: list, inputs: set[str]) -> int:
    """Commit a rewrite only on top of a version where all of ``inputs`` are still live.

    delta-rs's conflict check does not catch a concurrent rewrite that removed the same
    files with ``dataChange=false`` (deltalake 1.6: both commits succeed, and the rows are
    in the table twice). So each attempt reads the newest version, checks the inputs are
    all in it, and commits exactly on top of it (no rebasing retries inside delta-rs); a
    concurrent commit (a tier append, most often) makes it read and check again."""
    table = snapshot.table
    for _ in range(COMMIT_RETRIES):
        table.update_incremental()
        live = set(table.get_add_actions(flatten=True).column("path").to_pylist())
        gone = sorted(inputs - live)
        if gone:
            raise MaintenanceConflict(
                f"compaction of {snapshot.topic} (planned at version {snapshot.version}): {len(gone)} of its input "
                f"files were removed by a concurrent commit (for example {gone[0]})")
        try:
            return _commit(snapshot, actions, "compaction", retries=0)
        except MaintenanceConflict:
            continue  # another commit took the next version: check the inputs again on top of it
    raise MaintenanceConflict(f"compaction of {snapshot.topic}: the table kept moving for {COMMIT_RETRIES} attempts")


def commit_retention(snapshot: TableSnapshot, plans: Sequence[RetentionPlan]) -> int:
    """Remove the planned files and move each partition's log start, in one commit."""
    now_ms = _wall_clock_ms()
    actions = [
        RemoveAction(f.path, True, now_ms, f.size_bytes or None, {"partition": str(plan.partition)})
        for plan in plans
        for f in plan.removed
    ]
    txns = [Transaction(log_start_app_id(plan.partition), plan.log_start_offset, last_updated=now_ms) for plan in plans]
    return _commit(snapshot, actions, "retention", txns)


def _wall_clock_ms() -> int:
    """Removal and modification times of actions: the wall clock, whatever time a plan
    was made for (``--now-ms``), because vacuum measures its window on the wall clock."""
    return SystemClock().now_ms()


def vacuum(table: DeltaTable, after_ms: int) -> list[str]:
    """Delete files removed more than ``after_ms`` ago (delta-rs counts whole hours, so
    the window is rounded up to the hour; 0 deletes every removed file now). Files no
    commit ever referenced are left alone."""
    hours = math.ceil(max(after_ms, 0) / 3_600_000)
    return table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)


def clean_staging(table_uri: str, older_than_s: float, now_s: float) -> None:
    """Remove staging folders of runs that died (older than ``older_than_s``); an object
    store's table has none (its runs stage in the table: orphans go with a full VACUUM)."""
    if object_store.is_remote(table_uri):
        return
    base = Path(table_uri) / STAGING_DIR
    if not base.is_dir():
        return
    for run in base.iterdir():
        try:
            if now_s - run.stat().st_mtime > older_than_s:
                shutil.rmtree(run, ignore_errors=True)
        except FileNotFoundError:
            pass
