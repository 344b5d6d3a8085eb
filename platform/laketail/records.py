"""The record schema (docs/architecture.md §4.2): one row per record, in Arrow.

``RECORD_SCHEMA`` is the topic's Delta table schema, column for column.
``FRAME_SCHEMA`` is what a hot-segment frame stores: the same columns less those the
frame header already says (``partition`` is the directory, ``offset`` is
``base_offset + row``, ``leader_epoch`` is in the header).

Names and types of ``key``, ``value``, ``headers``, ``partition``, ``offset`` and
``timestamp`` match Spark's Kafka source, so code written for it reads laketail as is.
``timestamp`` is microseconds since the epoch, UTC; the REST and client APIs speak
Kafka's milliseconds and convert at their edge.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, Literal

import numpy as np
import pyarrow as pa

Acks = Literal["0", "1", "all"]
IsolationLevel = Literal["read_uncommitted", "read_committed"]

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
#: The producer id of the coordinators' own writes to their internal topics
#: (``__consumer_offsets``, ``__transaction_state``), never handed to a client: blocks
#: start at 0 and never reach it. Its epoch is the coordinators' (the controller epoch
#: they were taken over at), so a partition's producer state refuses the write of a
#: coordinator older than one that has written there (:mod:`laketail.coordinator.ports`).
COORDINATOR_PRODUCER_ID = 1 << 62
_SEQUENCE_WRAP = 2**31

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

RECORD_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int16(), nullable=False),
        pa.field("sequence", pa.int32(), nullable=False),
        pa.field("transactional", pa.bool_(), nullable=False),
        pa.field("control", pa.string()),
        pa.field("leader_epoch", pa.int32(), nullable=False),
    ]
)

#: The typed value column a topic with ``laketail.table.mode=value_schema_id_prefix``
#: adds to ``RECORD_SCHEMA`` in its table (laketail.schemas.columns); every other
#: column is the record schema's.
TYPED_VALUE_COLUMN = "value_struct"
#: The typed key column a topic with ``laketail.table.key.mode=key_schema_id_prefix``
#: (or ``key_schema_latest``) adds the same way, decoded by ``<topic>-key``.
TYPED_KEY_COLUMN = "key_struct"
#: Each typed column and the raw column it is decoded from.
TYPED_COLUMNS = {TYPED_VALUE_COLUMN: "value", TYPED_KEY_COLUMN: "key"}


def laketail_schema_changed(table_schema: pa.Schema) -> bool:
    """Whether a topic's Delta table schema is no longer laketail's: other columns or
    types than ``RECORD_SCHEMA``'s, beside the typed columns. The order is not
    compared: Delta's schema evolution (typed columns) puts the partition column last."""
    columns = {f.name: f.type for f in table_schema if f.name not in TYPED_COLUMNS}
    return columns != {f.name: f.type for f in RECORD_SCHEMA}


_DERIVED = ("partition", "offset", "leader_epoch")
FRAME_SCHEMA = pa.schema([f for f in RECORD_SCHEMA if f.name not in _DERIVED])


def record_size(key: bytes | None, value: bytes | None, headers) -> int:
    """Bytes a record counts against ``max.message.bytes`` (key + value + headers)."""
    size = (len(key) if key else 0) + (len(value) if value else 0)
    for hk, hv in headers or ():
        size += len(hk.encode() if isinstance(hk, str) else hk) + (len(hv) if hv else 0)
    return size


#: Requests of up to this many records share their constant columns (LRU caches of 128
#: shapes: at most about 35 MB); a larger request builds its own. A request may carry
#: millions of empty records, and a cache of such columns for every size a client
#: sends would hold gigabytes.
SHARED_UP_TO_ROWS = 10_000


def null_headers(n: int) -> pa.Array:
    """``n`` null ``headers`` whose children are empty. ``pa.nulls(n, HEADER_TYPE)``
    gives the struct's key and value columns ``n + 1`` offsets each, which every IPC
    message of the column then carries: 8 bytes a record in a frame (15,600 against
    14,800 bytes for 100 records of 100 bytes), and 40 KB in a 500-record fetch answer
    sliced from a 5,000-record frame. Immutable, so shared (up to
    :data:`SHARED_UP_TO_ROWS`)."""
    return _shared_null_headers(n) if n <= SHARED_UP_TO_ROWS else _null_headers(n)


def _null_headers(n: int) -> pa.Array:
    return pa.array([None] * n, HEADER_TYPE)


_shared_null_headers = functools.lru_cache(maxsize=128)(_null_headers)


def _constant_columns(
    n: int, timestamp_type: int, producer_id: int, producer_epoch: int, transactional: bool,
    control: str | None,
) -> tuple[pa.Array, ...]:
    """Columns that hold one value for a whole producer batch (immutable, so shared up
    to :data:`SHARED_UP_TO_ROWS` records)."""
    build = _shared_constant_columns if n <= SHARED_UP_TO_ROWS else _build_constant_columns
    return build(n, timestamp_type, producer_id, producer_epoch, transactional, control)


def _build_constant_columns(
    n: int, timestamp_type: int, producer_id: int, producer_epoch: int, transactional: bool,
    control: str | None,
) -> tuple[pa.Array, ...]:
    return (
        pa.repeat(pa.scalar(timestamp_type, pa.int8()), n),
        pa.repeat(pa.scalar(producer_id, pa.int64()), n),
        pa.repeat(pa.scalar(producer_epoch, pa.int16()), n),
        pa.repeat(pa.scalar(transactional, pa.bool_()), n),
        pa.repeat(pa.scalar(control, pa.string()), n),
        pa.repeat(pa.scalar(NO_SEQUENCE, pa.int32()), n),
        null_headers(n),
    )


_shared_constant_columns = functools.lru_cache(maxsize=128)(_build_constant_columns)


def build_frame_batch(
    *,
    timestamps_us: pa.Array | list[int],
    keys: pa.Array | list[bytes | None],
    values: pa.Array | list[bytes | None],
    headers: pa.Array | list | None = None,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: str | None = None,
) -> pa.RecordBatch:
    """A batch in ``FRAME_SCHEMA`` from column values (one producer batch)."""
    n = len(values)
    ts_type, pid, epoch, txn, ctl, no_seq, no_headers = _constant_columns(
        n, timestamp_type, producer_id, producer_epoch, transactional, control
    )
    if headers is None:
        headers = no_headers
    if base_sequence == NO_SEQUENCE:
        sequence = no_seq
    else:
        # Kafka's sequences are int32 and wrap from 2**31 - 1 to 0
        # (DefaultRecordBatch.incrementSequence).
        sequence = pa.array(np.arange(base_sequence, base_sequence + n, dtype=np.int64) % _SEQUENCE_WRAP,
                            pa.int32())
    if isinstance(timestamps_us, pa.Array):
        if timestamps_us.type != TIMESTAMP_TYPE:
            timestamps_us = timestamps_us.cast(TIMESTAMP_TYPE)
    else:
        timestamps_us = pa.array(timestamps_us, TIMESTAMP_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            timestamps_us,
            ts_type,
            keys if isinstance(keys, pa.Array) else pa.array(keys, pa.binary()),
            values if isinstance(values, pa.Array) else pa.array(values, pa.binary()),
            headers if isinstance(headers, pa.Array) else pa.array(headers, HEADER_TYPE),
            pid,
            epoch,
            sequence,
            txn,
            ctl,
        ],
        schema=FRAME_SCHEMA,
    )


def to_record_batch(
    frame_batch: pa.RecordBatch, partition: int, base_offset: int, leader_epoch: int
) -> pa.RecordBatch:
    """Widen a frame batch to ``RECORD_SCHEMA`` with its partition, offsets and epoch."""
    n = frame_batch.num_rows
    epochs = pa.repeat(pa.scalar(leader_epoch, pa.int32()), n)
    return pa.RecordBatch.from_arrays(_wide_columns(frame_batch, partition, base_offset, epochs),
                                      schema=RECORD_SCHEMA)


#: Frames averaging fewer rows than this are concatenated into one chunk per column
#: before they are widened. Parquet's writer pays per chunk: 100,000 records of 100
#: bytes in 100-row chunks took 31 ms of CPU to write against 21 ms concatenated first
#: (the concatenation included); at 500-row chunks 20 against 18; from about 1,000
#: rows the two are level.
COMBINE_BELOW_ROWS = 1_000


def widen_frames(
    frame_batches: list[pa.RecordBatch], leader_epochs: list[int], first_offset: int, partition: int
) -> pa.Table:
    """Widen consecutive frame batches (dense offsets from ``first_offset``, frame *i*
    written at ``leader_epochs[i]``) to one ``RECORD_SCHEMA`` table, in a fixed number
    of Arrow calls however many frames there are (:func:`to_record_batch` is one frame)."""
    if not frame_batches:
        return pa.Table.from_batches([], RECORD_SCHEMA)
    narrow = pa.Table.from_batches(frame_batches, FRAME_SCHEMA)
    if len(frame_batches) > 1 and narrow.num_rows < COMBINE_BELOW_ROWS * len(frame_batches):
        narrow = narrow.combine_chunks()  # small frames: one chunk per column, not one per frame
    counts = np.fromiter((b.num_rows for b in frame_batches), np.int64, len(frame_batches))
    epochs = pa.array(np.repeat(np.asarray(leader_epochs, np.int32), counts))
    return pa.Table.from_arrays(_wide_columns(narrow, partition, first_offset, epochs), schema=RECORD_SCHEMA)


def _wide_columns(narrow: pa.RecordBatch | pa.Table, partition: int, first_offset: int,
                  leader_epochs: pa.Array) -> list:
    """The ``RECORD_SCHEMA`` columns of ``narrow`` (``FRAME_SCHEMA``): its own, plus the
    partition, dense offsets from ``first_offset`` and the given epochs."""
    n = narrow.num_rows
    by_name = {name: narrow.column(i) for i, name in enumerate(narrow.schema.names)}
    by_name["partition"] = pa.repeat(pa.scalar(partition, pa.int32()), n)
    by_name["offset"] = pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64))
    by_name["leader_epoch"] = leader_epochs
    return [by_name[f.name] for f in RECORD_SCHEMA]


def data_records(records: pa.Table | pa.RecordBatch) -> Iterator[tuple[Any, Any, int]]:
    """``(key, value, offset)`` of each record that is not a transaction marker: what an
    internal topic's reader (a coordinator's or the schema registry's load) replays."""
    for key, value, offset, control in zip(
        records.column("key").to_pylist(), records.column("value").to_pylist(),
        records.column("offset").to_pylist(), records.column("control").to_pylist(),
    ):
        if control is None:
            yield key, value, offset


def payload_bytes(column: pa.Array | pa.ChunkedArray) -> int:
    """Bytes of the values of a binary column (nulls count 0), from its offsets alone."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    total = 0
    for chunk in chunks:
        if len(chunk) == chunk.null_count:
            continue
        large = pa.types.is_large_binary(chunk.type) or pa.types.is_large_string(chunk.type)
        width = np.int64 if large else np.int32
        offsets = np.frombuffer(chunk.buffers()[1], width, len(chunk) + 1, chunk.offset * np.dtype(width).itemsize)
        total += int(offsets[-1] - offsets[0])
    return total
