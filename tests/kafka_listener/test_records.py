"""Record batches v2 (laketail.kafka.records): golden bytes, CRC, codecs, refusals."""

from __future__ import annotations

import struct

import cramjam
import pyarrow as pa
import pytest
from crc32c import crc32c

from laketail.errors import CorruptMessage, InvalidRequest
from laketail.kafka import records
from laketail.records import HEADER_TYPE

#: One batch of one record (key b"k", value b"v", one header h=x) at offset 5, timestamp
#: 1000 ms, no producer: the bytes Kafka's DefaultRecordBatch writes for it.
GOLDEN = bytes.fromhex(
    "0000000000000005"  # base_offset
    "0000003e"  # batch_length: 62 bytes follow
    "ffffffff"  # partition_leader_epoch
    "02"  # magic
    "85d4936f"  # crc32c of everything after it
    "0000"  # attributes
    "00000000"  # last_offset_delta
    "00000000000003e8"  # base_timestamp
    "00000000000003e8"  # max_timestamp
    "ffffffffffffffff"  # producer_id
    "ffff"  # producer_epoch
    "ffffffff"  # base_sequence
    "00000001"  # record_count
    "18"  # record length 12 (zig-zag)
    "00"  # attributes
    "00"  # timestamp delta 0
    "00"  # offset delta 0
    "026b"  # key: length 1, "k"
    "0276"  # value: length 1, "v"
    "02"  # one header
    "0268"  # header key "h"
    "0278"  # header value "x"
)


def test_encode_writes_the_golden_bytes():
    assert records.encode_batch(5, [5], [1000], [b"k"], [b"v"], [[{"key": "h", "value": b"x"}]]) == GOLDEN


def test_the_golden_crc_is_crc32c_of_the_bytes_after_it():
    assert crc32c(GOLDEN[21:]) == struct.unpack(">I", GOLDEN[17:21])[0]


def test_decode_reads_the_golden_bytes():
    batch = records.decode_batch(GOLDEN)
    assert (batch.keys, batch.values, batch.timestamps_ms) == ([b"k"], [b"v"], [1000])
    assert batch.headers == [[{"key": "h", "value": b"x"}]]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.transactional) == (-1, -1, -1, False)


def _with_body(codec: int, body: bytes, count: int) -> bytes:
    """A batch whose records section is ``body`` (already compressed), CRC recomputed."""
    tail = struct.pack(">hiqqqhii", codec, count - 1, 0, 10_000, 7, 1, 0, count) + body
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c(tail)) + tail


def _plain_records(n: int) -> bytes:
    raw = records.encode_batch(0, list(range(n)), [i for i in range(n)], [None] * n,
                               [b"value-%d" % i for i in range(n)], [None] * n)
    return raw[records.HEADER_SIZE:]


@pytest.mark.parametrize("codec,compress", [
    (1, lambda b: bytes(cramjam.gzip.compress(b))),
    (2, lambda b: bytes(cramjam.snappy.compress_raw(b))),
    (3, lambda b: bytes(cramjam.lz4.compress(b))),
    (4, lambda b: bytes(cramjam.zstd.compress(b))),
])
def test_every_codec_decodes(codec, compress):
    batch = records.decode_batch(_with_body(codec, compress(_plain_records(50)), 50))
    assert batch.values == [b"value-%d" % i for i in range(50)]
    assert (batch.producer_id, batch.producer_epoch) == (7, 1)


def test_java_clients_xerial_snappy_framing_decodes():
    plain = _plain_records(20)
    block = bytes(cramjam.snappy.compress_raw(plain))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert records.decode_batch(_with_body(2, framed, 20)).values == [b"value-%d" % i for i in range(20)]


def test_a_flipped_bit_fails_the_crc():
    bad = bytearray(GOLDEN)
    bad[-1] ^= 1
    with pytest.raises(CorruptMessage, match="CRC"):
        records.decode_batch(bytes(bad))


@pytest.mark.parametrize("mutate,match", [
    (lambda b: b[:16] + b"\x01" + b[17:], "magic"),
    (lambda b: b[:-1], "batch_length"),
    (lambda b: b + b"\x00", "batch_length"),
])
def test_malformed_batches_are_corrupt_message(mutate, match):
    with pytest.raises(CorruptMessage, match=match):
        records.decode_batch(mutate(GOLDEN))


def test_garbage_compressed_records_are_corrupt_message():
    with pytest.raises(CorruptMessage, match="decompress"):
        records.decode_batch(_with_body(4, b"not zstd at all", 1))


def test_unknown_codec_is_corrupt_message():
    with pytest.raises(CorruptMessage, match="codec"):
        records.decode_batch(_with_body(5, b"", 1))


def test_a_record_count_that_lies_is_corrupt_message():
    with pytest.raises(CorruptMessage):
        records.decode_batch(_with_body(0, _plain_records(3), 4))


def test_clients_may_not_produce_control_batches():
    with pytest.raises(InvalidRequest):
        records.decode_batch(records.control_batch(3, 1000))


def test_split_batches_refuses_a_length_running_past_the_records():
    with pytest.raises(CorruptMessage):
        records.split_batches(GOLDEN + GOLDEN[:20])
    assert records.split_batches(GOLDEN + GOLDEN) == [GOLDEN, GOLDEN]


def test_fetch_encoding_keeps_producer_runs_apart_and_covers_a_trailing_gap():
    n = 4
    table = pa.table({
        "offset": pa.array([0, 1, 2, 3], pa.int64()),
        "timestamp": pa.array([1_000_000, 2_000_000, 3_000_000, 4_000_000], pa.int64()).cast(pa.timestamp("us")),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([b"a", None, b"c", b"d"], pa.binary()),
        "value": pa.array([b"1", b"2", None, b"4"], pa.binary()),
        "headers": pa.array([None, [{"key": "h", "value": None}], None, None], HEADER_TYPE),
        "producer_id": pa.array([-1, -1, 9, 9], pa.int64()),
        "producer_epoch": pa.array([-1, -1, 0, 0], pa.int16()),
        "transactional": pa.array([False, False, True, True]),
        "leader_epoch": pa.array([0] * n, pa.int32()),
    })
    raw = records.encode_records(table, next_offset=6, fetch_offset=0)
    batches = records.split_batches(raw)
    assert len(batches) == 3  # two producer runs, then a control batch over offsets 4..5
    first, second = records.decode_batch(batches[0]), records.decode_batch(batches[1])
    assert (first.keys, first.values, first.timestamps_ms) == ([b"a", None], [b"1", b"2"], [1000, 2000])
    assert first.headers == [None, [{"key": "h", "value": None}]]
    assert (second.producer_id, second.transactional, second.values) == (9, True, [None, b"4"])
    base_offset, = struct.unpack_from(">q", batches[2])
    attributes, = struct.unpack_from(">h", batches[2], 21)
    assert base_offset == 5 and attributes & records.ATTR_CONTROL


def _record(fields: bytes) -> bytes:
    """One record of a batch: its zig-zag length, then ``fields`` (attributes onwards)."""
    return bytes([len(fields) << 1]) + fields


@pytest.mark.parametrize("body,count", [
    (b"\x18\x00\xff\xff", 1),  # a timestamp varint running off the end of the records
    (_record(b"\x00\x00\x00\x01\x02v\x02\x02\xff\x01"), 1),  # a header key that is not UTF-8
    (_record(b"\x00\x00\x00\x01\x02v\x01") + b"\x00", 1),  # a byte after the last record
    (_record(b"\x00\x00\x00\x01\x02v\x00") * 2, 2),  # two records at offset delta 0
    (_record(b"\x00\x00\x00\x01\x7fv\x00"), 1),  # value length -64 is null (as in Kafka), then "v" is no header count
    (_record(b"\x00\x00\x00\x01\x02v\x03"), 1),  # a header count of -2
])
def test_records_that_do_not_decode_are_corrupt_message(body, count):
    with pytest.raises(CorruptMessage):
        records.decode_batch(_with_body(0, body, count))


def test_a_record_with_header_key_and_null_header_value_decodes():
    batch = records.decode_batch(_with_body(0, _record(b"\x00\x00\x00\x01\x02v\x02\x02h\x01"), 1))
    assert (batch.keys, batch.values, batch.headers) == ([None], [b"v"], [[{"key": "h", "value": None}]])


def test_the_record_reader_is_aiokafkas_c_one():
    """The produce path's speed rests on it (bench 12): the pure-Python fallback would
    bring back a Python loop per record."""
    assert records._RecordReader.__module__ == "aiokafka.record._crecords.default_records"
