"""Column layouts Spark sees: the Kafka source's rows, and the topic table's rows.

``SOURCE_COLUMNS`` are exactly Spark's Kafka source columns and types (``key`` and
``value`` binary, ``topic`` string, ``partition`` int, ``offset`` long, ``timestamp``
timestamp, ``timestampType`` int, and ``headers`` array<struct<key string, value
binary>> with ``includeHeaders``), so a query written for ``format("kafka")`` runs on
``format("laketail")`` unchanged. ``TABLE_COLUMNS`` is the record schema (docs/architecture.md
§4.2) in Spark's types, for the SQL views that read the Delta tables' Parquet files.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from laketail.errors import InvalidRecord
from laketail.records import HEADER_TYPE, TIMESTAMP_TYPE, TYPED_VALUE_COLUMN

SOURCE_COLUMNS = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_COLUMN = "headers array<struct<key:string,value:binary>>"

TABLE_COLUMNS = (
    "partition int, offset long, timestamp timestamp, timestamp_type byte, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>, producer_id long, producer_epoch short, "
    "sequence int, transactional boolean, control string, leader_epoch int"
)

#: Columns of the table a source scan reads (the rest it never needs): the Kafka
#: columns, then what read_committed and the control-row filter look at, which a file
#: whose statistics prove it has neither control nor transactional rows does without.
_SCAN_BASE = ["offset", "timestamp", "timestamp_type", "key", "value"]
_TXN_SCAN = ["producer_id", "transactional", "control"]


def source_ddl(include_headers: bool) -> str:
    return f"{SOURCE_COLUMNS}, {HEADERS_COLUMN}" if include_headers else SOURCE_COLUMNS


def source_arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def scan_columns(include_headers: bool, plain: bool = False) -> list[str]:
    """The table columns a source scan reads from a file; ``plain``: one without
    control or transactional rows."""
    base = _SCAN_BASE if plain else _SCAN_BASE + _TXN_SCAN
    return base + ["headers"] if include_headers else list(base)


def to_source_batches(rows: pa.Table, topic: str, partition: int, include_headers: bool,
                      typed: Mapping[str, pa.Array | pa.ChunkedArray] | None = None) -> list[pa.RecordBatch]:
    """Table (or fetched) rows as Arrow batches in the Kafka source's columns, then the
    ``typed`` columns, in order (``value_struct``, ``key_struct``: :mod:`laketail.spark.typed`)."""
    n = rows.num_rows
    timestamps = rows.column("timestamp")
    if timestamps.type != TIMESTAMP_TYPE:
        timestamps = timestamps.cast(TIMESTAMP_TYPE)
    arrays = [
        _binary(rows.column("key")),
        _binary(rows.column("value")),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        rows.column("offset").cast(pa.int64()),
        timestamps,
        rows.column("timestamp_type").cast(pa.int32()),
    ]
    if include_headers:
        arrays.append(rows.column("headers").cast(HEADER_TYPE))
    schema = source_arrow_schema(include_headers)
    for name, column in (typed or {}).items():
        arrays.append(column)
        schema = schema.append(pa.field(name, column.type))
    return pa.Table.from_arrays(arrays, schema=schema).to_batches()


def _binary(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column if column.type == pa.binary() else column.cast(pa.binary())


def sink_table(batch: pa.RecordBatch, topic_override: str | None) -> pa.Table:
    """A sink's input rows with ``key``/``value`` as binary, ``headers`` typed and a
    ``topic`` column (``topic_override`` replacing the rows' own); other columns kept
    (``value_struct`` / ``key_struct``, which the sink encodes into ``value`` / ``key``:
    :mod:`laketail.spark.typed`)."""
    table = pa.Table.from_batches([batch])
    names = table.column_names
    if "value" not in names and TYPED_VALUE_COLUMN not in names:
        raise InvalidRecord("the laketail sink needs a 'value' column (binary or string) or a 'value_struct' one")
    columns = {name: table.column(name) for name in names}
    for name in ("key", "value"):
        if name in columns:
            columns[name] = _binary(columns[name])
    if "headers" in columns and columns["headers"].type != HEADER_TYPE:
        columns["headers"] = columns["headers"].cast(HEADER_TYPE)
    if topic_override is not None:
        columns["topic"] = pa.chunked_array([pa.repeat(pa.scalar(topic_override, pa.string()), table.num_rows)])
    elif "topic" not in columns:
        raise InvalidRecord("the laketail sink needs a 'topic' column or the 'topic' option")
    elif pc.any(pc.is_null(columns["topic"])).as_py():
        raise InvalidRecord("the laketail sink got a row whose 'topic' is null")
    if "partition" in columns:
        columns["partition"] = columns["partition"].cast(pa.int32())
    if "timestamp" in columns and pa.types.is_timestamp(columns["timestamp"].type):
        columns["timestamp"] = pc.divide(columns["timestamp"].cast(TIMESTAMP_TYPE).cast(pa.int64()), 1000)
    return pa.table(columns)

