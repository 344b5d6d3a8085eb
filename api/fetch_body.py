"""The v2 fetch body as bytes, written a column at a time where the rows allow it.

Byte format (Redpanda's fetch shape, the Confluent v2 record fields; no whitespace):
a JSON array of one object per record, in offset order, each exactly::

    {"topic":<topic as JSON>,"key":<K>,"value":<V>,"partition":<p>,"offset":<o>,"timestamp":<ms>,"headers":[]}

joined by ``,``, with ``[`` before the first and ``]`` after the last (``[]`` when there
are none). ``K`` and ``V`` are ``null`` or, in the binary embedded format, standard
base64 with padding in double quotes; in the json format, the stored JSON text as
orjson writes it back after parsing. ``partition``, ``offset`` and ``timestamp``
(Kafka's milliseconds, the stored microseconds floor-divided by 1000) are decimal
integers. These are the bytes ``orjson.dumps`` gives for the dicts of
:func:`encode_records`; records with headers are left to that general path
(:func:`binary_rows` answers ``None``; :func:`rows` takes it).

Column at a time: the rows of a batch are cut into runs in which every row has the
same shape (key and value lengths or null, digit counts of offset and timestamp). In
a run every row has the same length, so the run is one ``rows x width`` byte matrix
filled a column range at a time: the constant pieces broadcast, keys and values
base64-encoded by one ``b2a_base64`` call over the run's values each padded with zero
bytes to whole 3-byte groups (so no group straddles two values; the zero groups'
trailing ``A`` characters are then overwritten with ``=``), the integers as digit
columns. Runs shorter than ``MIN_RUN`` rows (values of varying lengths) are written a
row at a time from one ``%`` template, which is what the whole body cost before: about
1 us per record against about 0.5 us in a run (500 100-byte records).

Cached: when a fetch's records are slices of decoded blocks as read (the fetch route
says so), each slice's encoded rows are kept in the block cache beside the blocks
(:func:`_cached_rows`), so the next fetch of the same slice (another consumer group,
a group re-reading) joins bytes instead of encoding. A consumer that reads a slice
once pays one more copy of its rows and a cache entry.
"""

from __future__ import annotations

import binascii

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from laketail.api.encoding import V2_BINARY, EmbeddedFormat, NotJson, b64encode, encode_json
from laketail.errors import RecordDeserializationError
from laketail.storage.block_cache import BLOCKS

_BODY_CACHE = "v2 binary rows"  # first item of this module's keys in BLOCKS

#: Runs shorter than this are written row by row (a matrix costs a few numpy calls).
MIN_RUN = 8

_b2a = binascii.b2a_base64
_TEMPLATE = b'{"topic":%s,"key":%s,"value":%s,"partition":%d,"offset":%d,"timestamp":%d,"headers":[]},'
_POW10 = 10 ** np.arange(1, 19, dtype=np.int64)  # 10 .. 10**18: digit counts by search
_EQ, _QUOTE, _NULL = 61, 34, np.frombuffer(b"null", np.uint8)


def body(parts: list) -> bytes:
    """``[`` + rows + ``]`` from pieces (numpy byte arrays or bytes, left as they are:
    cached ones are shared) that each end with a row's trailing comma, in one copy."""
    if not parts:
        return b"[]"
    return b"".join([b"[", *parts[:-1], memoryview(parts[-1])[:-1], b"]"])


def binary_rows(topic: str, table: pa.Table, cached: bool = False) -> list | None:
    """The rows of ``table`` in the binary embedded format, as byte pieces (numpy
    arrays or bytes) that concatenate to the rows, each followed by ``,``;
    ``None`` when a record has headers (the general path writes those).

    ``cached``: ``table``'s chunks are slices of decoded blocks as the fetch read them
    (:attr:`FetchResult.from_blocks`); each chunk's rows are then kept in the block
    cache and a fetch of the same slice takes them from there (see :func:`_cached_rows`)."""
    if table.num_rows == 0:
        return []
    if _has_headers(table):
        return None
    for name in ("key", "value"):  # RECORD_SCHEMA's binary (32-bit offsets) is what is read below
        i = table.schema.get_field_index(name)
        if table.schema.field(i).type != pa.binary():
            table, cached = table.set_column(i, name, table.column(i).cast(pa.binary())), False
    topic_json = orjson.dumps(topic)
    parts: list = []
    for batch in table.to_batches():
        if batch.num_rows:
            parts.extend(_cached_rows(topic_json, batch) if cached else _batch_rows(topic_json, batch))
    return parts


def _cached_rows(topic_json: bytes, batch: pa.RecordBatch) -> list:
    """The rows of ``batch`` from :data:`BLOCKS`, encoded and kept there when missing.

    The key is the slice of the block the chunk is: the address of the block's
    ``offset`` column buffer, the slice's first row in it and its length. The entry
    holds that buffer, so while the entry lives no other block can have its address;
    and a chunk is only ever a slice of one block with its own columns (filtered or
    forwarded records, which have new buffers, are not ``cached``). A fetch of the
    same slice (another group, a re-read from the same positions with the same
    ``max_records``) takes the encoded rows; a slice that starts or ends elsewhere in
    the block is encoded again. Counted against ``laketail.fetch.cache.bytes``: the
    encoded rows and the pinned offsets buffer."""
    offsets = batch.column("offset")
    pinned = offsets.buffers()[1]
    key = (_BODY_CACHE, topic_json, pinned.address, offsets.offset, len(offsets))
    found = BLOCKS.get(key)
    if found is not None:
        return [found[1]]
    rows = b"".join(_batch_rows(topic_json, batch))
    BLOCKS.put(key, (pinned, rows), len(rows) + pinned.size)
    return [rows]


def json_rows(topic: str, table: pa.Table) -> list | None:
    """The rows in the json embedded format (each stored key and value parsed and
    written back by orjson: RECORD_DESERIALIZATION_ERROR naming the first record whose
    key or value is not JSON), a row at a time; ``None`` when a record has headers."""
    if table.num_rows == 0:
        return []
    if _has_headers(table):
        return None
    topic_json = orjson.dumps(topic)
    partition = table.column("partition")[0].as_py()
    offsets = table.column("offset").to_pylist()
    stamps = _millis(table.column("timestamp").to_numpy()).tolist()
    keys = _json_texts(table.column("key"), offsets, topic, partition, "key")
    values = _json_texts(table.column("value"), offsets, topic, partition, "value")
    return [b"".join([_TEMPLATE % (topic_json, k, v, partition, o, ts)
                      for k, v, o, ts in zip(keys, values, offsets, stamps)])]


def _json_texts(column: pa.ChunkedArray, offsets: list[int], topic: str, partition: int,
                field: str) -> list[bytes]:
    if column.null_count == len(column):
        return [b"null"] * len(column)
    out = []
    for data, offset in zip(column.to_pylist(), offsets):
        if data is None:
            out.append(b"null")
            continue
        try:
            out.append(orjson.dumps(orjson.loads(data)))
        except orjson.JSONDecodeError as exc:
            raise not_json(topic, partition, offset, field) from exc
    return out


def not_json(topic: str, partition: int, offset: int, field: str) -> RecordDeserializationError:
    """The error for a stored key or value a json consumer cannot return."""
    return RecordDeserializationError(
        f"the {field} of the record at offset {offset} of {topic}-{partition} is not JSON; a json "
        f"consumer stays on it: seek past it (positions), or read it with {V2_BINARY}",
        topic=topic, partition=partition, offset=offset, field=field,
    )


def _has_headers(table: pa.Table) -> bool:
    headers = table.column("headers")
    if headers.null_count == len(headers):
        return False
    return any(chunk.null_count < len(chunk) and bool(np.any(np.diff(_offsets(chunk)))) for chunk in headers.chunks)


def rows(topic: str, table: pa.Table, embedded: EmbeddedFormat, cached: bool = False) -> list:
    """The rows of one partition's ``table`` for :func:`body`: a column at a time, or
    (records with headers) the general per-record encoding as one piece."""
    parts = binary_rows(topic, table, cached) if embedded == "binary" else json_rows(topic, table)
    if parts is not None:
        return parts
    return [orjson.dumps(encode_records(topic, table, embedded)[0])[1:-1] + b","] if table.num_rows else []


# -- records with headers: one record at a time ----------------------------------------

def data_rows(table: pa.Table) -> pa.Table:
    """``table`` without control records (transaction markers)."""
    i = table.schema.get_field_index("control")
    if i >= 0 and table.num_rows:
        control = table.column(i)
        if control.null_count < table.num_rows:
            return table.filter(pc.is_null(control))
    return table


def timestamps_ms(table: pa.Table) -> list[int]:
    """The ``timestamp`` column (microseconds) as Kafka's milliseconds."""
    return (table.column("timestamp").cast(pa.int64()).to_numpy() // 1000).tolist()


def _column(table: pa.Table, name: str) -> list | None:
    """A column as Python values, ``None`` when every value is null (skipped cheaply)."""
    column = table.column(name)
    return None if column.null_count == len(column) else column.to_pylist()


def _b64_column(values: list | None, n: int) -> list:
    if values is None:
        return [None] * n
    return [None if v is None else _b2a(v, newline=False).decode("ascii") for v in values]


def _json_column(values: list | None, n: int, offsets: list[int], topic: str, partition: int,
                 field: str) -> list:
    if values is None:
        return [None] * n
    out = []
    for v, o in zip(values, offsets):
        try:
            out.append(encode_json(v, o))
        except NotJson as exc:
            raise not_json(topic, partition, o, field) from exc
    return out


def encode_records(topic: str, table: pa.Table, embedded: EmbeddedFormat) -> tuple[list[dict], int]:
    """Rows of one partition as Redpanda/Confluent JSON records, plus their key + value
    byte count. Column at a time: all-null columns and dense offsets cost nothing."""
    n = table.num_rows
    if n == 0:
        return [], 0
    offset_column = table.column("offset")
    first, last = offset_column[0].as_py(), offset_column[-1].as_py()
    offsets = list(range(first, last + 1)) if last - first == n - 1 else offset_column.to_pylist()
    partition = table.column("partition")[0].as_py()
    keys = _column(table, "key")
    values = _column(table, "value")
    nbytes = (sum(map(len, filter(None, keys))) if keys else 0) + (
        sum(map(len, filter(None, values))) if values else 0
    )
    if embedded == "binary":
        key_out, value_out = _b64_column(keys, n), _b64_column(values, n)
    else:
        key_out = _json_column(keys, n, offsets, topic, partition, "key")
        value_out = _json_column(values, n, offsets, topic, partition, "value")
    headers = _column(table, "headers")
    header_out = [[]] * n if headers is None else [
        [{"key": h["key"], "value": b64encode(h["value"])} for h in hs] if hs else [] for hs in headers
    ]
    return [
        {"topic": topic, "key": k, "value": v, "partition": partition, "offset": o,
         "timestamp": ts, "headers": h}
        for k, v, o, ts, h in zip(key_out, value_out, offsets, timestamps_ms(table), header_out)
    ], nbytes



# -- one batch -------------------------------------------------------------------------


def _millis(micros: np.ndarray) -> np.ndarray:
    return micros.astype(np.int64, copy=False) // 1000


def _offsets(array: pa.Array) -> np.ndarray:
    return np.frombuffer(array.buffers()[1], np.int32, len(array) + 1, array.offset * 4)


def _digit_counts(values: np.ndarray) -> np.ndarray:
    return np.searchsorted(_POW10, values, side="right") + 1


def _lengths(array: pa.Array) -> np.ndarray:
    """Byte length of each value, -1 for null."""
    n = len(array)
    if array.null_count == n:
        return np.full(n, -1, np.int64)
    lengths = np.diff(_offsets(array)).astype(np.int64)
    if array.null_count:
        lengths[array.is_null().to_numpy(zero_copy_only=False)] = -1
    return lengths


def _batch_rows(topic_json: bytes, batch: pa.RecordBatch) -> list:
    n = batch.num_rows
    keys, values = batch.column("key"), batch.column("value")
    offsets = batch.column("offset").to_numpy()
    stamps = _millis(batch.column("timestamp").to_numpy())
    partition = batch.column("partition")[0].as_py()
    low, high = int(stamps.min()), int(stamps.max())
    first, last = int(offsets.min()), int(offsets.max())
    if low < 0 or first < 0:  # never written by laketail; the template handles sign
        return [_template_rows(topic_json, batch, partition, 0, n, offsets, stamps)]
    middle = b',"partition":%d,"offset":' % partition
    key_lengths, value_lengths = _lengths(keys), _lengths(values)
    key_length, value_length = int(key_lengths[0]), int(value_lengths[0])
    digits = len(str(first))
    if (len(str(low)) == len(str(high)) and len(str(last)) == digits
            and (key_lengths == key_length).all() and (value_lengths == value_length).all()):
        # one shape throughout (the common case): one run, no per-row shape arrays
        return [_run_matrix(topic_json, middle, keys, values, 0, n, key_length, value_length,
                            offsets, digits, stamps, len(str(low)))]
    offset_digits, stamp_digits = _digit_counts(offsets), _digit_counts(stamps)
    change = ((key_lengths[1:] != key_lengths[:-1]) | (value_lengths[1:] != value_lengths[:-1])
              | (offset_digits[1:] != offset_digits[:-1]) | (stamp_digits[1:] != stamp_digits[:-1]))
    starts = [0, *(np.flatnonzero(change) + 1).tolist(), n]
    parts: list = []
    slow_from = None  # consecutive short runs go to one template pass
    for a, b in zip(starts[:-1], starts[1:]):
        if b - a < MIN_RUN:
            slow_from = a if slow_from is None else slow_from
            continue
        if slow_from is not None:
            parts.append(_template_rows(topic_json, batch, partition, slow_from, a, offsets, stamps))
            slow_from = None
        parts.append(_run_matrix(topic_json, middle, keys, values, a, b, int(key_lengths[a]), int(value_lengths[a]),
                                 offsets[a:b], int(offset_digits[a]), stamps[a:b], int(stamp_digits[a])))
    if slow_from is not None:
        parts.append(_template_rows(topic_json, batch, partition, slow_from, n, offsets, stamps))
    return parts


def _template_rows(topic_json: bytes, batch: pa.RecordBatch, partition: int, a: int, b: int,
                   offsets: np.ndarray, stamps: np.ndarray) -> bytes:
    """Rows ``[a, b)`` one ``%`` template each (values of varying lengths)."""
    keys = batch.column("key").slice(a, b - a).to_pylist()
    values = batch.column("value").slice(a, b - a).to_pylist()
    return b"".join([
        _TEMPLATE % (topic_json, _quoted(k), _quoted(v), partition, o, ts)
        for k, v, o, ts in zip(keys, values, offsets[a:b].tolist(), stamps[a:b].tolist())
    ])


def _quoted(data: bytes | None) -> bytes:
    return b"null" if data is None else b'"' + _b2a(data, newline=False) + b'"'


def _run_matrix(topic_json: bytes, middle: bytes, keys: pa.Array, values: pa.Array, a: int, b: int,
                key_length: int, value_length: int, offsets: np.ndarray, offset_digits: int,
                stamps: np.ndarray, stamp_digits: int) -> np.ndarray:
    """Rows ``[a, b)``, all of one shape, as one byte matrix (see the module docstring)."""
    rows = b - a
    pieces = [
        _constant(b'{"topic":' + topic_json + b',"key":'), _text_matrix(keys, a, rows, key_length),
        _constant(b',"value":'), _text_matrix(values, a, rows, value_length),
        _constant(middle), _digits(offsets, offset_digits), _constant(b',"timestamp":'),
        _digits(stamps, stamp_digits), _constant(b',"headers":[]},'),
    ]
    out = np.empty((rows, sum(p.shape[-1] for p in pieces)), np.uint8)
    at = 0
    for piece in pieces:
        width = piece.shape[-1]
        out[:, at:at + width] = piece
        at += width
    return out.reshape(-1)


def _constant(text: bytes) -> np.ndarray:
    return np.frombuffer(text, np.uint8)


def _digits(values: np.ndarray, count: int) -> np.ndarray:
    powers = 10 ** np.arange(count - 1, -1, -1, dtype=np.int64)
    return ((values[:, None] // powers) % 10 + 48).astype(np.uint8)


def _text_matrix(array: pa.Array, a: int, rows: int, length: int) -> np.ndarray:
    """``"<base64>"`` of rows ``[a, a + rows)`` of a binary column whose values there are
    all ``length`` bytes, or ``null`` when they are all null (``length`` -1)."""
    if length < 0:
        return _NULL
    groups = (length + 2) // 3
    start = int(_offsets(array)[a])
    data = np.frombuffer(array.buffers()[2], np.uint8, rows * length, start) if length else np.empty(0, np.uint8)
    if length % 3:
        padded = np.zeros((rows, groups * 3), np.uint8)
        padded[:, :length] = data.reshape(rows, length)
        data = padded
    text = np.empty((rows, groups * 4 + 2), np.uint8)
    text[:, 0] = text[:, -1] = _QUOTE
    if groups:
        # ``.data``, the array's memoryview: numpy types ndarray as a buffer only on Python 3.12+
        text[:, 1:-1] = np.frombuffer(_b2a(data.data, newline=False), np.uint8).reshape(rows, groups * 4)
        if length % 3:
            text[:, -1 - (3 - length % 3):-1] = _EQ
    return text
