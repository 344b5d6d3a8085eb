"""What an Arrow IPC stream will cost once decoded, read from its metadata alone.

An IPC record batch may carry LZ4- or ZSTD-compressed buffers: each compressed buffer
starts with its uncompressed length as a little-endian int64 (-1: stored as is), and
pyarrow allocates that much before it decompresses. A few kilobytes of ZSTD can thus
declare (and decode to) hundreds of megabytes. :func:`decoded_size` walks the stream's
messages without decompressing anything and sums what they declare, so a gateway can
refuse a body before pyarrow materialises it.

The message metadata is a flatbuffer (``Message.fbs`` in the Arrow format); the few
fields needed are read by hand here:

* ``Message``: field 1 ``header_type`` (2 = DictionaryBatch, 3 = RecordBatch),
  field 2 ``header``;
* ``RecordBatch``: field 0 ``length`` (rows), field 1 ``nodes`` (structs of
  ``length``, ``null_count``: int64 each), field 2 ``buffers`` (structs of
  ``offset``, ``length``: int64 each, relative to the message body), field 3
  ``compression`` (present when the buffers are compressed);
* ``DictionaryBatch``: field 1 ``data`` (a RecordBatch).

The estimate counts every buffer at its decoded size plus ``ROW_COST`` bytes per row
of every field node: a column of type ``null`` has no buffer at all yet costs offsets
and validity once cast to ``binary``.

Pure functions, no state: safe from any thread.
"""

from __future__ import annotations

import struct

import pyarrow as pa

ROW_COST = 16  # bytes a row costs once cast: int64 offsets, validity, slack

_DICTIONARY_BATCH = 2
_RECORD_BATCH = 3


class IpcTooLarge(Exception):
    """The stream declares more decoded bytes than the limit (carries both numbers)."""

    def __init__(self, declared: int, limit: int) -> None:
        super().__init__(f"declares at least {declared} decoded bytes, above {limit}")
        self.declared = declared
        self.limit = limit


class _Table:
    """One flatbuffer table: reads scalar, table and vector fields by field id."""

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vsize = struct.unpack_from("<H", buf, self.vtable)[0]

    def _field(self, i: int) -> int:
        slot = 4 + 2 * i
        if slot >= self.vsize:
            return 0
        off = struct.unpack_from("<H", self.buf, self.vtable + slot)[0]
        return self.pos + off if off else 0

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        at = self._field(i)
        return struct.unpack_from(fmt, self.buf, at)[0] if at else default

    def table(self, i: int) -> "_Table | None":
        at = self._field(i)
        if not at:
            return None
        return _Table(self.buf, at + struct.unpack_from("<I", self.buf, at)[0])

    def structs(self, i: int) -> list[tuple[int, int]]:
        """A vector of 16-byte structs of two int64s."""
        at = self._field(i)
        if not at:
            return []
        vec = at + struct.unpack_from("<I", self.buf, at)[0]
        count = struct.unpack_from("<I", self.buf, vec)[0]
        return [struct.unpack_from("<qq", self.buf, vec + 4 + 16 * k) for k in range(count)]


def _batch_size(batch: _Table, body: memoryview | None) -> int:
    """Decoded bytes one RecordBatch declares (see the module docstring)."""
    compressed = batch.table(3) is not None
    total = 0
    for offset, length in batch.structs(2):
        if offset < 0 or length < 0:
            raise ValueError("negative buffer offset or length")
        if compressed and length >= 8:
            if body is None or offset + 8 > len(body):
                raise ValueError("buffer outside the message body")
            declared = struct.unpack_from("<q", body, offset)[0]
            total += length - 8 if declared == -1 else max(declared, 0)
        else:
            total += length
    total += ROW_COST * sum(max(rows, 0) for rows, _ in batch.structs(1))
    return total


def decoded_size(body: bytes | pa.Buffer, limit: int) -> int:
    """Bytes the IPC stream in ``body`` declares once decoded; stops and raises
    :class:`IpcTooLarge` as soon as the running sum passes ``limit``.

    Raises ``ValueError`` or a pyarrow error when the stream is malformed (the caller
    maps those to INVALID_REQUEST, as it does for a stream pyarrow cannot read).
    """
    reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(body) if isinstance(body, bytes) else body)
    total = 0
    for message in reader:
        meta = memoryview(message.metadata)
        try:
            root = _Table(meta, struct.unpack_from("<I", meta, 0)[0])
            kind = root.scalar(1, "<B")
            header = root.table(2)
            if header is None or kind not in (_DICTIONARY_BATCH, _RECORD_BATCH):
                continue
            batch = header.table(1) if kind == _DICTIONARY_BATCH else header
            if batch is None:
                continue
            body_view = memoryview(message.body) if message.body is not None else None
            total += _batch_size(batch, body_view)
        except struct.error as exc:
            raise ValueError(f"malformed IPC message metadata: {exc}") from None
        if total > limit:
            raise IpcTooLarge(total, limit)
    return total
