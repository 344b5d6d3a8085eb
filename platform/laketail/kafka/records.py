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

:func:`decode_batches` validates every batch of a produce request (magic, lengths, CRC,
codec, record framing) before anything is appended: a batch that fails raises
:class:`~laketail.errors.CorruptMessage` (Kafka's CORRUPT_MESSAGE, 2) and nothing of the
request's partition is written. :func:`encode_records` turns a fetch's Arrow rows back
into uncompressed batches, one per run of rows from the same producer batch kind.

Why not kio's ``kio.records``: it truncates timestamps to whole seconds and reads no
compressed batch; the codecs here are ``cramjam`` (gzip, snappy, lz4, zstd in Rust) and
the checksum ``crc32c`` (C, SSE4.2).

Not done (see docs/architecture.md §11.6): batches are decoded into Arrow on the request
path and re-encoded on fetch; Kafka keeps them as bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam
import pyarrow as pa
from crc32c import crc32c

from laketail.errors import CorruptMessage, InvalidRequest
from laketail.records import HEADER_TYPE

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


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (up to 64 bits) at ``pos``: (value, next position)."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptMessage("a record ends inside a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptMessage("a varint is longer than 10 bytes")


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(buf):
        raise CorruptMessage(f"a record field of {n} bytes runs past its record")
    return buf[pos:pos + n], pos + n


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
    """Validate and decode exactly one batch (``buf`` is the whole batch)."""
    if len(buf) < HEADER_SIZE:
        raise CorruptMessage(f"a record batch of {len(buf)} bytes is shorter than its {HEADER_SIZE}-byte header")
    (_, length, _, magic, crc, attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq,
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
    body = buf[HEADER_SIZE:] if codec == 0 else _decompress(codec, buf[HEADER_SIZE:])
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[dict] | None] = []
    stamps: list[int] = []
    pos = 0
    for i in range(count):
        size, pos = _varint(body, pos)
        end = pos + size
        if size < 0 or end > len(body):
            raise CorruptMessage(f"record {i} of {size} bytes runs past its batch")
        pos += 1  # record attributes: unused by Kafka
        ts_delta, pos = _varint(body, pos)
        offset_delta, pos = _varint(body, pos)
        if offset_delta != i:
            raise CorruptMessage(f"record {i} has offset_delta {offset_delta}")
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        n_headers, pos = _varint(body, pos)
        if n_headers < 0:
            raise CorruptMessage(f"record {i} has {n_headers} headers")
        hdrs = []
        for _ in range(n_headers):
            hkey, pos = _bytes(body, pos)
            hval, pos = _bytes(body, pos)
            if hkey is None:
                raise CorruptMessage(f"record {i} has a header with a null key")
            try:
                hdrs.append({"key": hkey.decode(), "value": hval})
            except UnicodeDecodeError as exc:
                raise CorruptMessage(f"record {i} has a header key that is not UTF-8") from exc
        if pos != end:
            raise CorruptMessage(f"record {i} says {size} bytes but holds {size + pos - end}")
        keys.append(key)
        values.append(value)
        headers.append(hdrs or None)
        stamps.append(base_ts + ts_delta)
    if pos != len(body):
        raise CorruptMessage(f"{len(body) - pos} bytes follow the last record of a batch")
    if stamps and max(stamps) > max_ts and not attributes & ATTR_LOG_APPEND_TIME:
        raise CorruptMessage("a record's timestamp is above the batch's max_timestamp")
    return DecodedBatch(pid, epoch, base_seq, bool(attributes & ATTR_TRANSACTIONAL), keys, values, headers,
                        stamps)


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


def to_arrow(batch: DecodedBatch, partition: int) -> pa.RecordBatch:
    """The batch as a produce request in ``PRODUCE_SCHEMA`` (all to ``partition``)."""
    n = len(batch.values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(batch.keys, pa.binary()),
            pa.array(batch.values, pa.binary()),
            pa.array(batch.headers, HEADER_TYPE),
            pa.array(batch.timestamps_ms, pa.int64()),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
        ],
        names=["key", "value", "headers", "timestamp", "partition"],
    )


# -- encoding (fetch) ------------------------------------------------------------------------


def _zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(value: bytes | None) -> bytes:
    return b"\x01" if value is None else _zigzag(len(value)) + value


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
    """One uncompressed batch; ``offsets`` are absolute and may have gaps."""
    base_ts = min(timestamps_ms)
    body = bytearray()
    for off, ts, key, value, hdrs in zip(offsets, timestamps_ms, keys, values, headers):
        rec = bytearray(b"\x00")
        rec += _zigzag(ts - base_ts)
        rec += _zigzag(off - base_offset)
        rec += _field(key)
        rec += _field(value)
        rec += _zigzag(len(hdrs or ()))
        for h in hdrs or ():
            rec += _field(h["key"].encode())
            rec += _field(h["value"])
        body += _zigzag(len(rec))
        body += rec
    tail = struct.pack(">hiqqqhii", attributes, offsets[-1] - base_offset, base_ts, max(timestamps_ms),
                       producer_id, producer_epoch, base_sequence, len(offsets)) + bytes(body)
    return struct.pack(">qiibI", base_offset, len(tail) + 9, leader_epoch, 2, crc32c(tail)) + tail


def control_batch(offset: int, timestamp_ms: int, *, commit: bool = True) -> bytes:
    """A one-record control batch at ``offset``: clients skip it and move past it. Used
    where the log holds a transaction marker the fetch path does not return, so a
    consumer's position moves past the gap instead of fetching it again."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return encode_batch(offset, [offset], [timestamp_ms], [key], [value], [None],
                        attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL)


def encode_records(table: pa.Table, next_offset: int, fetch_offset: int) -> bytes:
    """A fetch answer's records: one batch per run of rows of the same producer batch
    kind (producer id, epoch, transactional), then a control batch over a trailing gap
    (records the fetch path read but does not return, up to ``next_offset``)."""
    out = bytearray()
    last = fetch_offset - 1
    if table.num_rows:
        offsets = table.column("offset").to_pylist()
        stamps = [t // 1000 for t in table.column("timestamp").cast(pa.int64()).to_pylist()]
        ts_types = table.column("timestamp_type").to_pylist()
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        headers = table.column("headers").to_pylist()
        pids = table.column("producer_id").to_pylist()
        epochs = table.column("producer_epoch").to_pylist()
        txns = table.column("transactional").to_pylist()
        epochs_l = table.column("leader_epoch").to_pylist()
        start = 0
        n = len(offsets)
        for i in range(1, n + 1):
            if i < n and (pids[i], epochs[i], txns[i], ts_types[i]) == (pids[start], epochs[start], txns[start],
                                                                          ts_types[start]):
                continue
            attrs = (ATTR_TRANSACTIONAL if txns[start] else 0) | (ATTR_LOG_APPEND_TIME if ts_types[start] else 0)
            out += encode_batch(offsets[start], offsets[start:i], stamps[start:i], keys[start:i], values[start:i],
                                headers[start:i], producer_id=pids[start], producer_epoch=epochs[start],
                                attributes=attrs, leader_epoch=epochs_l[start])
            start = i
        last = offsets[-1]
        stamp = stamps[-1]
    else:
        stamp = 0
    if next_offset - 1 > last:
        out += control_batch(next_offset - 1, stamp)
    return bytes(out)
