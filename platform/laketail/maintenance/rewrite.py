"""Rewrite tasks: what one compaction output file is made of, and how it is written.

A :class:`RewriteTask` is one plan reduced to plain values, so it can travel to a Spark
executor: the partition, the input files (relative paths) and the rule to apply:

* ``"files"`` -- file compaction: every row as it is, in offset order;
* ``"keys"`` -- key compaction: :func:`compact_keys`, the latest record per key.

:func:`write_output` applies the rule to the input rows and writes the output with
:func:`laketail.storage.data_files.write_data_file` (``dataChange=false``) into a
staging folder inside the table, so a task that dies or is retried leaves nothing in
the table itself; the driver moves the outputs it commits (:mod:`.table_commit`). On an
object store the "staging folder" is the table (no rename there): an output no commit
names is an orphan, which no reader opens.
Both executors -- Spark's ``mapInArrow`` tasks and the driver for small inputs -- use
these functions, so a file is the same whoever wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from laketail.maintenance.compaction import KeyCompactionPlan, compact_rows
from laketail.maintenance.file_compaction import FileCompactionPlan
from laketail.storage import object_store
from laketail.storage.data_files import write_data_file

RewriteRule = Literal["files", "keys"]
_KEEP_EVERY_TOMBSTONE = -(2**62)


@dataclass(frozen=True)
class RewriteTask:
    task_id: int
    partition: int
    inputs: tuple[str, ...]  # relative paths, offset order
    first_offset: int
    last_offset: int
    rule: RewriteRule
    tombstone_cutoff_us: int = _KEEP_EVERY_TOMBSTONE


@dataclass(frozen=True)
class RewriteOutput:
    """A written output file, relative to the staging folder (and, once moved, the table)."""

    task_id: int
    path: str
    size_bytes: int
    stats: str
    num_records: int
    first_offset: int
    last_offset: int
    min_timestamp_us: int
    max_timestamp_us: int


def rewrite_tasks(
    key_plans: Sequence[KeyCompactionPlan], file_plans: Sequence[FileCompactionPlan]
) -> list[RewriteTask]:
    tasks = [
        RewriteTask(i, p.partition, tuple(f.path for f in p.inputs), p.first_offset, p.last_offset, "keys",
                    p.tombstone_cutoff_us)
        for i, p in enumerate(key_plans)
    ]
    tasks += [
        RewriteTask(len(tasks) + i, p.partition, tuple(f.path for f in p.inputs), p.first_offset, p.last_offset,
                    "files")
        for i, p in enumerate(file_plans)
    ]
    return tasks


def compact_keys(rows: pa.Table, tombstone_cutoff_us: int) -> pa.Table:
    """Key compaction of a user topic: :func:`compact_rows` over the non-transactional
    records, transactional records and markers kept as they are.

    A transactional record may belong to an open or an aborted transaction, so it never
    replaces an older value and is never replaced: a reader from the start still ends
    on each key's final value. A tombstone past ``tombstone_cutoff_us`` goes only when
    no transactional record of its key survives (else that value would come back)."""
    if rows.num_rows == 0:
        return rows
    transactional = pc.fill_null(rows.column("transactional"), False)
    held = rows.filter(transactional)
    kept = compact_rows(rows.filter(pc.invert(transactional)), _KEEP_EVERY_TOMBSTONE)
    ts = kept.column("timestamp").cast(pa.int64())
    expired = pc.and_(
        pc.and_(pc.is_null(kept.column("value")), pc.is_valid(kept.column("key"))),
        pc.less(ts, tombstone_cutoff_us),
    )
    held_keys = pc.drop_null(held.column("key")).unique()
    if len(held_keys):
        expired = pc.and_(expired, pc.invert(pc.fill_null(pc.is_in(kept.column("key"), value_set=held_keys), False)))
    kept = kept.filter(pc.invert(expired))
    return pa.concat_tables([kept, held.select(kept.column_names).cast(kept.schema)]).sort_by("offset")


def apply_rule(task: RewriteTask, rows: pa.Table) -> pa.Table:
    rows = rows.sort_by("offset")
    if task.rule == "keys":
        return compact_keys(rows, task.tombstone_cutoff_us)
    return rows


def write_output(staging_uri: str, task: RewriteTask, rows: pa.Table, now_ms: int) -> RewriteOutput | None:
    """Apply the task's rule and write the result; ``None`` when no row survives."""
    out = apply_rule(task, rows)
    if out.num_rows == 0:
        return None
    rel, add, data_file = write_data_file(staging_uri, task.partition, out, now_ms, data_change=False, tag="c")
    return RewriteOutput(
        task.task_id, rel, add.size, add.stats, data_file.num_records, data_file.first_offset,
        data_file.last_offset, data_file.min_timestamp_us, data_file.max_timestamp_us,
    )


def read_inputs(table_uri: str, task: RewriteTask) -> pa.Table:
    pieces = [object_store.read_parquet(f"{table_uri}/{path}") for path in task.inputs]
    return pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]


def rewrite_locally(table_uri: str, staging_uri: str, tasks: Iterable[RewriteTask], now_ms: int) -> list[RewriteOutput]:
    """Run tasks in this process with pyarrow (small inputs, or no Spark at hand)."""
    outputs = []
    for task in tasks:
        output = write_output(staging_uri, task, read_inputs(table_uri, task), now_ms)
        if output is not None:
            outputs.append(output)
    return outputs
