"""The hot-segment frame format, pinned to golden bytes."""

import os
import zlib

import pyarrow as pa
import pytest

from laketail import records
from laketail.records import HEADER_TYPE, build_frame_batch, to_record_batch
from laketail.storage import frame

GOLDEN = bytes.fromhex(
    "4c544631"  # magic "LTF1"
    "e817d7e8"  # crc32 of everything from byte 8 on
    "00000005"  # payload length 5
    "000000000000002a"  # base offset 42
    "00000003"  # record count 3
    "00060a24181e4000"  # max timestamp 1_700_000_000_000_000 us
    "00000007"  # leader epoch 7
    "0001"  # attributes: transactional
    "0000"  # reserved
    "68656c6c6f"  # payload "hello"
)


def test_encode_matches_golden_bytes():
    encoded = frame.encode(
        b"hello", base_offset=42, record_count=3, max_timestamp=1_700_000_000_000_000,
        leader_epoch=7, attributes=frame.ATTR_TRANSACTIONAL,
    )
    assert encoded == GOLDEN
    assert len(encoded) == frame.HEADER_SIZE + 5 == 45


def test_crc_covers_every_byte_after_itself():
    assert int.from_bytes(GOLDEN[4:8], "big") == zlib.crc32(GOLDEN[8:])
    header = frame.decode_header(GOLDEN)
    frame.verify(GOLDEN, 0, header)
    for i in range(8, len(GOLDEN)):
        damaged = bytearray(GOLDEN)
        damaged[i] ^= 0x01
        with pytest.raises(frame.CorruptFrame):
            frame.verify(bytes(damaged), 0, frame.decode_header(bytes(damaged)) if i >= 40 else header)


def test_frames_written_with_the_fast_crc_read_as_zlib_computes_it():
    """ISA-L's CRC-32 is zlib's, on every kind of buffer a frame is checked over, at
    sizes around its vector widths and a megabyte."""
    assert frame.crc32.__module__ in ("isal.isal_zlib", "zlib")
    for size in (0, 1, 15, 16, 63, 64, 65, 1000, 4097, 1 << 20):
        data = os.urandom(size + 3)
        for buf in (data, memoryview(data)[3:], pa.py_buffer(data).slice(3)):
            assert frame.crc32(buf) == zlib.crc32(buf)
            assert frame.crc32(buf, 0xE817D7E8) == zlib.crc32(buf, 0xE817D7E8)
    payload = pa.py_buffer(os.urandom(100_000))
    fields = {"base_offset": 9, "record_count": 1, "max_timestamp": 0, "leader_epoch": 0}
    written = frame.encode(payload, **fields)
    assert int.from_bytes(written[4:8], "big") == zlib.crc32(written[8:])


def test_decode_header_fields():
    header = frame.decode_header(GOLDEN)
    assert (header.base_offset, header.record_count, header.next_offset) == (42, 3, 45)
    assert (header.max_timestamp, header.leader_epoch, header.attributes) == (1_700_000_000_000_000, 7, 1)
    assert header.size == 45


def test_short_or_foreign_bytes_are_corrupt():
    with pytest.raises(frame.CorruptFrame):
        frame.decode_header(GOLDEN[:39])
    with pytest.raises(frame.CorruptFrame):
        frame.decode_header(b"XXXX" + GOLDEN[4:])
    with pytest.raises(frame.CorruptFrame):
        frame.verify(GOLDEN[:-1], 0, frame.decode_header(GOLDEN))


def test_arrow_payload_round_trip():
    batch = build_frame_batch(
        timestamps_us=[1, 2, 3],
        keys=[b"k", None, b""],
        values=[b"v1", b"", None],
        headers=[[{"key": "h", "value": b"x"}], [], None],
    )
    payload = frame.serialize_batch(batch)
    encoded = frame.encode(payload, base_offset=0, record_count=3, max_timestamp=3, leader_epoch=0)
    header = frame.decode_header(encoded)
    frame.verify(encoded, 0, header)
    assert frame.decode_batch(encoded, 0, header).equals(batch)


def test_a_frame_without_headers_carries_no_bytes_for_their_children():
    """Null headers cost the list's own offsets and validity, nothing per record in the
    struct's key and value columns, in the frame and in a slice of it as a fetch
    answers it; they read back as null."""
    n = 5_000
    batch = build_frame_batch(timestamps_us=[7] * n, keys=[None] * n, values=[b"v" * 100] * n)
    headers = batch.column("headers")
    assert headers.type == HEADER_TYPE and headers.null_count == n and headers.to_pylist() == [None] * n

    def message_bytes(array) -> int:
        return pa.RecordBatch.from_arrays([array], names=["headers"]).serialize().size

    assert message_bytes(headers) < 4 * n + n // 8 + 1_000  # offsets and validity, and the message
    assert message_bytes(pa.nulls(n, HEADER_TYPE)) > 8 * n  # what pa.nulls would have carried
    answer = to_record_batch(batch, 0, 0, 0).slice(1_000, 500)
    assert message_bytes(answer.column("headers")) < 4 * 500 + 1_000


def test_only_requests_of_common_sizes_share_their_constant_columns():
    """Up to SHARED_UP_TO_ROWS records a request's constant columns are the shared ones
    (the same buffers for the next request of that size); above, each request builds its
    own and the shared caches do not grow: a client sending many large sizes cannot
    make them hold gigabytes."""
    def build(n: int):
        return build_frame_batch(timestamps_us=[7] * n, keys=[None] * n, values=[b""] * n, producer_id=424242)

    def address(batch, column: str) -> int:
        return batch.column(column).buffers()[1].address  # the values, or the list offsets

    def cached() -> tuple[int, int]:
        return (records._shared_constant_columns.cache_info().currsize,
                records._shared_null_headers.cache_info().currsize)

    small, large = records.SHARED_UP_TO_ROWS, records.SHARED_UP_TO_ROWS + 1
    for column in ("producer_id", "headers"):
        assert address(build(small), column) == address(build(small), column)
    before = cached()
    first, second = build(large), build(large)
    for column in ("producer_id", "headers"):
        assert address(first, column) != address(second, column)
    assert first.column("producer_id").to_pylist() == [424242] * large
    assert first.column("headers").null_count == large
    assert cached() == before


def _frames(sizes: list[int]) -> list:
    batches, n = [], 0
    for size in sizes:
        values = [b"v%d" % i for i in range(n, n + size)]
        batches.append(build_frame_batch(timestamps_us=list(range(n, n + size)), keys=[None] * size, values=values))
        n += size
    return batches


@pytest.mark.parametrize("size, chunks", [(100, 1), (999, 1), (1_000, 3), (2_500, 3)])
def test_widened_frames_are_one_chunk_when_small(size, chunks):
    """The tierer writes Parquet from widened frames; its writer pays per chunk, so
    frames under ``COMBINE_BELOW_ROWS`` rows on average are concatenated first, and the
    records are the same either way."""
    from laketail.records import COMBINE_BELOW_ROWS, RECORD_SCHEMA, widen_frames

    assert COMBINE_BELOW_ROWS == 1_000
    batches = _frames([size] * 3)
    table = widen_frames(batches, [4, 5, 5], 10, partition=2)
    assert table.schema == RECORD_SCHEMA
    assert {table.column(name).num_chunks for name in ("value", "timestamp", "key")} == {chunks}
    assert table.column("value").to_pylist() == [b"v%d" % i for i in range(3 * size)]
    assert table.column("offset").to_pylist() == list(range(10, 10 + 3 * size))
    assert table.column("leader_epoch").to_pylist() == [4] * size + [5] * (2 * size)
    assert set(table.column("partition").to_pylist()) == {2}
