"""Kafka's record batches (magic 2) in and out of laketail's Arrow columns.

The byte format, as Kafka's ``DefaultRecordBatch`` writes it (big-endian)::

    offset  size  field
    0       8     base_offset
    8       4     batch_length          bytes after this field
    12      4     partition_leader_epoch
    16      1     magic                 2
    17      4     crc                   CRC-32C (Castagnoli) of bytes 21 .. end
    21      2     attributes            bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4,
                                        4 zstd), bit 3 LogAppendTime, bit 4
                                        transactional, bit 5 control
    23      4     last_offset_delta
    27      8     base_timestamp        ms
    35      8     max_timestamp         ms
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     record_count
    61      ...   records (compressed as a whole when the codec is not 0)

    record: length varint | attributes int8 | timestamp_delta varlong |
            offset_delta varint | key_length varint | key | value_length varint | value |
            header_count varint | (key_length varint | key utf-8 | value_length varint | value)*

Varints are zig-zag; a length of -1 is null. A control record's key is ``version int16,
type int16`` (0 abort, 1 commit), its value ``version int16, coordinator_epoch int32``.

:func:`decode_batch` validates each batch of a produce request (magic, lengths, CRC,
codec, record framing, offset deltas) before anything is appended: a batch that fails
raises :class:`~laketail.errors.CorruptMessage` (Kafka's CORRUPT_MESSAGE, 2) and nothing
of the request's partition is written. :func:`encode_records` turns a fetch's Arrow rows
back into uncompressed batches, one per run of rows from the same producer batch kind.

No Python loop over varints: the header and the CRC are read here over the bytes
(``struct``; ``crc32c``, C with SSE4.2), the codecs are ``cramjam`` (gzip, snappy, lz4,
zstd in Rust), and the records are read and written by aiokafka's record-batch reader and
builder (Cython): one C call per record, where ``_varint`` alone took 36% of the broker
before (bench 12). A length below -1 is null, as Kafka's ``DefaultRecord`` reads it. Why
not kio's ``kio.records``: it truncates timestamps to whole seconds and reads no
compressed batch.

Not done (see docs/architecture.md §11.6): the hot log stores Arrow frames, so batches
are decoded into Arrow columns on the request path and encoded again on fetch; Kafka
keeps them as bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch as _RecordReader
from aiokafka.record.default_records import DefaultRecordBatchBuilder as _BatchBuilder
from crc32c import crc32c

from laketail.errors import CorruptMessage, InvalidRequest
from laketail.records import HEADER_TYPE, null_headers

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
#: bytes 0..16 before the CRC: base_offset, batch_length, partition_leader_epoch, magic
_CRC_START = 21
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
ATTR_CODEC = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
_XERIAL = b"\x82SNAPPY\x00"
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
#: zero bytes after the records the reader reads (see :func:`decode_batch`): more than a
#: varint's 10 bytes
_PAD = bytes(16)
#: Kafka's RecordBatch.NO_TIMESTAMP, which aiokafka's reader gives as None
NO_TIMESTAMP = -1


@dataclass
class DecodedBatch:
    """One validated producer batch: the header fields laketail keeps and its records
    as columns (timestamps in ms)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[dict] | None]
    timestamps_ms: list[int]


def _decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == 1:
            return bytes(cramjam.gzip.decompress(data))
        if codec == 2:
            if data.startswith(_XERIAL):  # the Java client's framing: 16-byte header, then blocks
                out, pos = bytearray(), 16
                while pos < len(data):
                    (size,) = struct.unpack_from(">i", data, pos)
                    out += bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + size]))
                    pos += 4 + size
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, struct.error, ValueError) as exc:
        raise CorruptMessage(f"the {CODECS[codec]} records of a batch do not decompress: {exc}") from exc
    raise CorruptMessage(f"unknown compression codec {codec}")


def decode_batch(buf: bytes) -> DecodedBatch:
    """Validate and decode exactly one batch (``buf`` is the whole batch).

    The header, lengths and CRC are checked here over the bytes; the records are read by
    aiokafka's record reader (C, Cython), never by a Python loop over varints. It reads
    each length-prefixed field with a bounds check but a varint without one, so the
    bytes it reads are always followed by :data:`_PAD` zero bytes it may run into and
    never past: a varint running off the end then reads zeros and the record's
    length check refuses it."""
    if len(buf) < HEADER_SIZE:
        raise CorruptMessage(f"a record batch of {len(buf)} bytes is shorter than its {HEADER_SIZE}-byte header")
    (base_offset, length, _, magic, crc, attributes, last_delta, _, max_ts, pid, epoch, base_seq,
     count) = HEADER.unpack_from(buf)
    if magic != 2:
        raise CorruptMessage(f"record batch magic {magic}: only magic 2 (Kafka 0.11+) is accepted")
    if length + 12 != len(buf):
        raise CorruptMessage(f"batch_length {length} does not match the {len(buf) - 12} bytes that follow it")
    if crc32c(memoryview(buf)[_CRC_START:]) != crc:
        raise CorruptMessage("record batch CRC-32C does not match its bytes")
    if attributes & ATTR_CONTROL:
        raise InvalidRequest("clients do not produce control batches")
    if count < 0 or count != last_delta + 1:
        raise CorruptMessage(f"record_count {count} does not match last_offset_delta {last_delta}")
    codec = attributes & ATTR_CODEC
    if codec == 0:
        plain = bytes(buf) + _PAD
    else:  # the reader gets the records uncompressed, under the same header less its codec
        body = _decompress(codec, bytes(buf[HEADER_SIZE:]))
        plain = b"".join((buf[:21], _ATTRIBUTES.pack(attributes & ~ATTR_CODEC), buf[23:HEADER_SIZE], body, _PAD))
    try:
        rows = list(_RecordReader(memoryview(plain)[:len(plain) - len(_PAD)]))
    except (CorruptRecordException, UnicodeDecodeError, SystemError, ValueError, OverflowError) as exc:
        raise CorruptMessage(f"a record of the batch does not decode: {exc}") from exc
    if [r.offset for r in rows] != list(range(base_offset, base_offset + count)):
        raise CorruptMessage("the records' offset deltas are not 0, 1, 2, ... in order")
    stamps = [r.timestamp for r in rows]
    if None in stamps:  # timestamp -1, Kafka's NO_TIMESTAMP: the broker's clock stamps it
        stamps = [NO_TIMESTAMP if s is None else s for s in stamps]
    if stamps and max(stamps) > max_ts and not attributes & ATTR_LOG_APPEND_TIME:
        raise CorruptMessage("a record's timestamp is above the batch's max_timestamp")
    headers: list[list[dict] | None] = [r.headers or None for r in rows]
    if any(headers):
        headers = [h and [{"key": k, "value": v} for k, v in h] for h in headers]  # type: ignore[misc]
    return DecodedBatch(pid, epoch, base_seq, bool(attributes & ATTR_TRANSACTIONAL), [r.key for r in rows],
                        [r.value for r in rows], headers, stamps)


def split_batches(records: bytes) -> list[bytes]:
    """A produce request's ``records`` field cut into whole batches (lengths checked)."""
    out = []
    pos = 0
    while pos < len(records):
        if len(records) - pos < 12:
            raise CorruptMessage("a record set ends inside a batch's offset and length")
        (length,) = struct.unpack_from(">i", records, pos + 8)
        end = pos + 12 + length
        if length < HEADER_SIZE - 12 or end > len(records):
            raise CorruptMessage(f"a batch_length of {length} runs past the request's records")
        out.append(records[pos:end])
        pos = end
    return out


def columns(batch: DecodedBatch) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The batch's keys, values and headers as the Arrow columns of the record schema."""
    headers = pa.array(batch.headers, HEADER_TYPE) if any(batch.headers) else null_headers(len(batch.headers))
    return pa.array(batch.keys, pa.binary()), pa.array(batch.values, pa.binary()), headers


# -- encoding (fetch) ------------------------------------------------------------------------


#: what the builder appends for a record without headers (it only reads it)
_NO_HEADERS: list = []
#: big enough that aiokafka's builder never refuses a record for want of room
_UNBOUNDED = 2**31 - 1
_PREFIX = struct.Struct(">qii")  # base_offset, batch_length, partition_leader_epoch


def encode_batch(
    base_offset: int,
    offsets: list[int],
    timestamps_ms: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    headers: list[list[dict] | None],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    leader_epoch: int = -1,
) -> bytes:
    """One uncompressed batch; ``offsets`` are absolute and may have gaps.

    The records are written by aiokafka's batch builder (C); its header names base
    offset 0 and no leader epoch, which sit before the CRC and are set here. Attributes
    it does not write (LogAppendTime, control) are set here too, with the CRC again."""
    builder = _BatchBuilder(2, 0, 1 if attributes & ATTR_TRANSACTIONAL else 0, producer_id, producer_epoch,
                            base_sequence, _UNBOUNDED)
    append = builder.append
    for off, ts, key, value, hdrs in zip(offsets, timestamps_ms, keys, values, headers):
        append(off - base_offset, ts, key, value,
               [(h["key"], h["value"]) for h in hdrs] if hdrs else _NO_HEADERS)
    out = builder.build()
    _PREFIX.pack_into(out, 0, base_offset, len(out) - 12, leader_epoch)
    if attributes & ~ATTR_TRANSACTIONAL:
        _ATTRIBUTES.pack_into(out, 21, attributes)
        _CRC.pack_into(out, 17, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def control_batch(offset: int, timestamp_ms: int, *, commit: bool = True) -> bytes:
    """A one-record control batch at ``offset``: clients skip it and move past it. Used
    where the log holds a transaction marker the fetch path does not return, so a
    consumer's position moves past the gap instead of fetching it again."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return encode_batch(offset, [offset], [timestamp_ms], [key], [value], [None],
                        attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL)


def _run_starts(table: pa.Table) -> list[int]:
    """Where each run of rows of one producer batch kind (producer id, epoch,
    transactional, timestamp type) starts, found over the columns, not row by row."""
    n = table.num_rows
    change = np.zeros(n, dtype=bool)
    for name in _RUN_KEY:
        column = table.column(name).to_numpy()
        change[1:] |= column[1:] != column[:-1]
    change[0] = True
    return np.flatnonzero(change).tolist()


_RUN_KEY = ("producer_id", "producer_epoch", "transactional", "timestamp_type")


def _pylist(column: pa.ChunkedArray) -> list:
    """The column as Python values; an all-null one without a conversion per row."""
    return [None] * len(column) if column.null_count == len(column) else column.to_pylist()


def encode_records(table: pa.Table, next_offset: int, fetch_offset: int) -> bytes:
    """A fetch answer's records: one batch per run of rows of the same producer batch
    kind (producer id, epoch, transactional), then a control batch over a trailing gap
    (records the fetch path read but does not return, up to ``next_offset``)."""
    out = bytearray()
    last = fetch_offset - 1
    n = table.num_rows
    if n:
        offsets = table.column("offset").to_pylist()
        stamps = pc.divide(table.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        keys = _pylist(table.column("key"))
        values = _pylist(table.column("value"))
        headers = _pylist(table.column("headers"))
        starts = _run_starts(table)
        for start, end in zip(starts, starts[1:] + [n]):
            row = table.slice(start, 1).to_pylist()[0]
            attrs = ((ATTR_TRANSACTIONAL if row["transactional"] else 0)
                     | (ATTR_LOG_APPEND_TIME if row["timestamp_type"] else 0))
            out += encode_batch(offsets[start], offsets[start:end], stamps[start:end], keys[start:end],
                                values[start:end], headers[start:end], producer_id=row["producer_id"],
                                producer_epoch=row["producer_epoch"], attributes=attrs,
                                leader_epoch=row["leader_epoch"])
        last = offsets[-1]
        stamp = stamps[-1]
    else:
        stamp = 0
    if next_offset - 1 > last:
        out += control_batch(next_offset - 1, stamp)
    return bytes(out)
