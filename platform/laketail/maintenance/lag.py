"""Consumer lag rows for the lag table ``<root>/_system/consumer_lag``.

One row per group, topic and partition per measurement, with the numbers of
:mod:`laketail.coordinator.lag` (read from the gateway's v3 lag endpoint,
``/v3/clusters/{c}/consumer-groups/{g}/lags``, which computes them):

* ``current_offset`` -- the committed offset (-1 when nothing is committed);
* ``log_end_offset`` -- the partition's high watermark;
* ``lag`` -- ``log_end_offset - current_offset`` (from the log start when nothing is
  committed);
* ``time_lag_ms`` -- how long ago the first unconsumed record was appended;
* ``status`` -- :func:`laketail.coordinator.lag.lag_status` of ``lag``;
* ``batch_id`` -- the lag query's micro-batch that wrote the row (null when a one-off
  measurement did): at most one row per batch, group, topic and partition.

``time`` is when the measurement was taken (microseconds, UTC, like records'
timestamps). :func:`lag_rows` turns the endpoint's documents into rows and
:func:`lag_table` into Arrow, both pure.
"""

from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa

from laketail.coordinator.lag import lag_status
from laketail.records import TIMESTAMP_TYPE

LAG_TABLE = "_system/consumer_lag"

LAG_SCHEMA = pa.schema(
    [
        pa.field("time", TIMESTAMP_TYPE, nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("current_offset", pa.int64(), nullable=False),
        pa.field("log_end_offset", pa.int64(), nullable=False),
        pa.field("lag", pa.int64(), nullable=False),
        pa.field("time_lag_ms", pa.int64(), nullable=False),
        pa.field("consumer_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("status", pa.string()),  # OK < 100, caution < 1,000, warning < 10,000, critical
        pa.field("batch_id", pa.int64()),  # the lag query's micro-batch (null for a one-off measurement)
    ]
)


def lag_table_uri(root: str) -> str:
    return f"{root.rstrip('/')}/{LAG_TABLE}"


def lag_rows(docs: Iterable[dict[str, Any]], now_ms: int) -> list[dict[str, Any]]:
    """Rows from ``KafkaConsumerLag`` documents, sorted by group, topic, partition."""
    rows = [
        {
            "time": now_ms * 1000,
            "group_id": doc["consumer_group_id"],
            "topic": doc["topic_name"],
            "partition": int(doc["partition_id"]),
            "current_offset": int(doc["current_offset"]),
            "log_end_offset": int(doc["log_end_offset"]),
            "lag": int(doc["lag"]),
            "time_lag_ms": int(doc.get("time_lag_ms") or 0),
            "consumer_id": doc.get("consumer_id") or None,
            "client_id": doc.get("client_id") or None,
            "status": lag_status(int(doc["lag"])),
            "batch_id": None,
        }
        for doc in docs
    ]
    rows.sort(key=lambda r: (r["group_id"], r["topic"], r["partition"]))
    return rows


def lag_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=LAG_SCHEMA)
