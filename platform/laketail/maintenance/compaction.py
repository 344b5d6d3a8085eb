"""Key compaction (``cleanup.policy=compact``): keep the latest record per key.

Planning is pure: :func:`plan_key_compaction` picks, per partition, the contiguous
run of table files from the oldest on whose records are all older than
``min.compaction.lag.ms``, when there are at least ``min_files`` of them.
:func:`compact_rows` is the rewrite rule, over Arrow:

* per key, only the record with the highest offset survives;
* a surviving tombstone (null value) is dropped once older than ``delete.retention.ms``;
* records without a key and control rows (transaction markers) are kept as they are;
* offsets never change (gaps appear where records went), so consumer positions stay
  valid across compaction.

The broker runs it for its internal topics (``__consumer_offsets`` must never need
Spark to stay small); the Spark compaction job runs the same plan for user topics.

How the broker commits (docs/architecture.md §7.4): only a partition's leader compacts
it, fenced by its leader epoch like a tier commit. :func:`rewrite_actions` writes the
surviving rows as one file and returns ``remove`` of the inputs + ``add`` of the
output; :func:`commit_internal` commits every partition's actions in one Delta commit
*against the snapshot version the plan was made from*, with
``laketail.epoch.<p>`` = the leader epoch and no retry inside delta-rs: an input another
writer removed meanwhile, a newer epoch in the table, or any commit since the snapshot
makes it commit nothing (:class:`CompactionAbandoned`); the next pass plans again. So a
commit never removes a file its snapshot does not hold.

Repair (:func:`plan_overlap_repair`): a partition whose files overlap -- what a stale
compaction committed over a newer one before this fence existed -- is repaired when
each group of overlapping files has one file whose offset range holds all the others':
compaction outputs of nested input sets, where the wider one holds every surviving
record of the narrower. The narrower files are removed (by the leader, fenced as
above). Overlaps that do not nest are left alone and reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from laketail.records import RECORD_SCHEMA
from laketail.storage import object_store
from laketail.storage.data_files import write_data_file
from laketail.storage.table_check import overlap_clusters
from laketail.storage.table_reader import EPOCH_APP_PREFIX, DataFile


@dataclass(frozen=True)
class KeyCompactionPlan:
    partition: int
    inputs: tuple[DataFile, ...]
    tombstone_cutoff_us: int  # tombstones with an older timestamp are dropped

    @property
    def first_offset(self) -> int:
        return self.inputs[0].first_offset

    @property
    def last_offset(self) -> int:
        return self.inputs[-1].last_offset


def plan_key_compaction(
    files: Mapping[int, Sequence[DataFile]],
    *,
    now_ms: int,
    min_compaction_lag_ms: int,
    delete_retention_ms: int,
    min_files: int = 2,
) -> list[KeyCompactionPlan]:
    """Which files of which partitions to compact now (oldest first, contiguous)."""
    horizon_us = (now_ms - min_compaction_lag_ms) * 1000
    cutoff_us = (now_ms - delete_retention_ms) * 1000
    plans = []
    for partition in sorted(files):
        run: list[DataFile] = []
        for data_file in sorted(files[partition]):
            if data_file.max_timestamp_us > horizon_us:
                break
            run.append(data_file)
        if len(run) >= min_files:
            plans.append(KeyCompactionPlan(partition, tuple(run), cutoff_us))
    return plans


def compact_rows(rows: pa.Table, tombstone_cutoff_us: int) -> pa.Table:
    """Latest record per key; old tombstones gone; keyless and control rows kept."""
    if rows.num_rows == 0:
        return rows
    keyed = pc.and_(pc.is_valid(rows.column("key")), pc.is_null(rows.column("control")))
    others = rows.filter(pc.invert(keyed))
    keyed_rows = rows.filter(keyed)
    latest = keyed_rows.group_by("key", use_threads=False).aggregate([("offset", "max")])
    survivors = keyed_rows.filter(pc.is_in(keyed_rows.column("offset"), value_set=latest.column("offset_max")))
    ts = survivors.column("timestamp").cast(pa.int64())
    expired = pc.and_(pc.is_null(survivors.column("value")), pc.less(ts, tombstone_cutoff_us))
    survivors = survivors.filter(pc.invert(expired))
    out = pa.concat_tables([survivors, others.select(survivors.column_names).cast(survivors.schema)])
    return out.sort_by("offset")


class CompactionAbandoned(Exception):
    """An internal-topic compaction committed nothing: the table moved since its snapshot
    (an input removed, any commit), or a newer leader epoch is in it. Plan again."""


def rewrite_actions(table_uri: str, plan: KeyCompactionPlan, now_ms: int) -> tuple[list, str | None]:
    """Write ``plan.inputs`` compacted as one file (none when nothing survives); return
    ``remove`` of the inputs + ``add`` of the output, and the output's path (to delete
    if the commit does not happen)."""
    pieces = [object_store.read_parquet(f"{table_uri}/{f.path}") for f in plan.inputs]
    rows = pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]
    kept = compact_rows(rows, plan.tombstone_cutoff_us)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(f.path, True, now_ms, f.size_bytes or None, {"partition": str(plan.partition)})
        for f in plan.inputs
    ]
    if not kept.num_rows:
        return actions, None
    rel, add, _ = write_data_file(table_uri, plan.partition, kept, now_ms, tag="c")
    return actions + [add], f"{table_uri}/{rel}"


def removal_actions(partition: int, files: Sequence[DataFile], now_ms: int) -> list[RemoveAction]:
    return [RemoveAction(f.path, True, now_ms, f.size_bytes or None, {"partition": str(partition)}) for f in files]


def commit_internal(dt: DeltaTable, snapshot_version: int, actions: Sequence[AddAction | RemoveAction],
                    epochs: Mapping[int, int], now_ms: int) -> int:
    """Commit ``actions`` (their partitions' leader epochs in ``epochs``) against
    ``snapshot_version``; returns the new version or raises :class:`CompactionAbandoned`.

    The caller holds the topic's table lock and planned from ``dt`` at
    ``snapshot_version``; ``dt`` is not moved first, so delta-rs checks the commit
    against that version, and with no retries any commit since makes it fail."""
    if dt.version() != snapshot_version:
        raise CompactionAbandoned(f"the table is at version {dt.version()}, the plan at {snapshot_version}")
    present = set(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())
    gone = [a.path for a in actions if isinstance(a, RemoveAction) and a.path not in present]
    if gone:
        raise CompactionAbandoned(f"files the plan removes are not in version {snapshot_version}: {gone[:3]}")
    for partition, epoch in epochs.items():
        fenced_by = dt.transaction_version(f"{EPOCH_APP_PREFIX}{partition}") or 0
        if fenced_by > epoch:
            raise CompactionAbandoned(f"partition {partition}: the table holds leader epoch {fenced_by}, "
                                      f"this broker leads at {epoch}")
    txns = [Transaction(f"{EPOCH_APP_PREFIX}{p}", epoch, last_updated=now_ms) for p, epoch in sorted(epochs.items())]
    try:
        dt.create_write_transaction(
            list(actions), mode="append", schema=RECORD_SCHEMA, partition_by=["partition"],
            commit_properties=CommitProperties(custom_metadata={"laketail.operation": "internal compaction"},
                                               max_commit_retries=0, app_transactions=txns),
        )
    except CommitFailedError as exc:
        raise CompactionAbandoned(f"a concurrent commit since version {snapshot_version}: {exc}") from exc
    dt.update_incremental()
    return dt.version()


def plan_overlap_repair(files: Sequence[DataFile]) -> list[DataFile] | None:
    """The files to remove so that no two of ``files`` (one partition's) overlap, or
    None when some overlap does not nest (see the module docstring). Empty: none overlap."""
    ordered = sorted(files, key=lambda f: (f.first_offset, -f.last_offset))
    removed: list[DataFile] = []
    for cluster in overlap_clusters(ordered):
        if len(cluster) == 1:
            continue
        widest = cluster[0]  # the smallest first offset, the largest last offset among those
        if any(f.last_offset > widest.last_offset for f in cluster[1:]):
            return None
        removed.extend(cluster[1:])
    return removed
