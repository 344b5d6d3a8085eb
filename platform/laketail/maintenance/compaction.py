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

:func:`execute_key_compaction` writes the surviving rows as one file and commits
``remove`` of the inputs + ``add`` of the output in one Delta commit through delta-rs.
The broker runs it for its internal topics (``__consumer_offsets`` must never need
Spark to stay small); the Spark compaction job runs the same plan for user topics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import RemoveAction

from laketail.storage.data_files import write_data_file
from laketail.storage.table_reader import DataFile


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


def execute_key_compaction(dt, table_uri: str, plan: KeyCompactionPlan, schema: pa.Schema) -> int:
    """Rewrite ``plan.inputs`` as one file; commit remove + add. Returns rows kept.

    The caller holds the topic's table lock (no concurrent tier commit in-process) and
    reloads its file index afterwards."""
    pieces = [pq.read_table(f"{table_uri}/{f.path}") for f in plan.inputs]
    rows = pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]
    kept = compact_rows(rows, plan.tombstone_cutoff_us)
    now_ms = int(time.time() * 1000)
    actions: list = [
        RemoveAction(f.path, True, now_ms, f.size_bytes or None, {"partition": str(plan.partition)})
        for f in plan.inputs
    ]
    if kept.num_rows:
        _, add, _ = write_data_file(table_uri, plan.partition, kept, now_ms, tag="c")
        actions.append(add)
    dt.create_write_transaction(actions, mode="append", schema=schema, partition_by=["partition"])
    dt.update_incremental()
    return kept.num_rows

