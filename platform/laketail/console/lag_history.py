"""A consumer group's lag over time, from the lag table ``<root>/_system/consumer_lag``.

The lag job (:mod:`laketail.jobs.lag`) appends one row per group, topic and partition
per measurement (:data:`laketail.maintenance.lag.LAG_SCHEMA`). For a chart, the rows of
one group are summed per measurement ``time``: total ``lag`` (records) and the largest
``time_lag_ms``. Only the newest ``max_points`` measurements are returned, oldest first.

Reading is forgiving: no lag table yet (the job never ran) is an empty history, not an
error. Blocking (delta-rs and pyarrow IO): call it from a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from laketail.maintenance.lag import lag_table_uri


@dataclass(frozen=True)
class LagPoint:
    time_ms: int
    lag: int
    time_lag_ms: int
    partitions: int


def points_of(rows: pa.Table, max_points: int) -> list[LagPoint]:
    """Sum ``rows`` (one group's lag rows) per measurement time; the newest
    ``max_points``, oldest first. Pure."""
    if rows.num_rows == 0:
        return []
    grouped = rows.group_by("time").aggregate([("lag", "sum"), ("time_lag_ms", "max"), ("partition", "count")])
    grouped = grouped.sort_by("time")
    if grouped.num_rows > max_points:
        grouped = grouped.slice(grouped.num_rows - max_points)
    times = pc.cast(grouped.column("time"), pa.int64()).to_pylist()  # microseconds
    return [
        LagPoint(t // 1000, int(lag), int(tl), int(n))
        for t, lag, tl, n in zip(
            times,
            grouped.column("lag_sum").to_pylist(),
            grouped.column("time_lag_ms_max").to_pylist(),
            grouped.column("partition_count").to_pylist(),
        )
    ]


def lag_history(root: str, group_id: str, *, topic: str | None = None, topics: Collection[str] | None = None,
                max_points: int = 500) -> list[LagPoint]:
    """The group's lag per measurement (optionally of one topic only; ``topics``: only
    rows of these, the ones the caller may Describe)."""
    try:
        table = DeltaTable(lag_table_uri(root))
    except TableNotFoundError:
        return []
    condition = ds.field("group_id") == group_id
    if topic is not None:
        condition = condition & (ds.field("topic") == topic)
    if topics is not None:
        condition = condition & ds.field("topic").isin(sorted(topics))
    rows = table.to_pyarrow_dataset().to_table(
        columns=["time", "partition", "lag", "time_lag_ms"], filter=condition
    )
    return points_of(rows, max_points)
