"""The v2 fetch body written a column at a time (api/fetch_body.py) says exactly what the
general encoding says (a dict per record through orjson), byte for byte."""

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from laketail.api import fetch_body
from laketail.api.deps import query_of
from laketail.api.fetch_body import MIN_RUN, binary_rows, encode_records, json_rows
from laketail.api.routes.arrow import write_ipc
from laketail.errors import RecordDeserializationError
from laketail.records import build_frame_batch, to_record_batch

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))


def _table(rows, base_offset=0, partition=0, frames=1, skip=0):
    """``rows`` of (key, value, timestamp ms, headers) as ``frames`` frames of the hot tier."""
    batches = []
    per = max(1, -(-len(rows) // frames))
    for i in range(0, max(len(rows), 1), per):
        chunk = rows[i:i + per]
        batch = build_frame_batch(
            timestamps_us=[ts * 1000 for _, _, ts, _ in chunk],
            keys=[k for k, _, _, _ in chunk],
            values=[v for _, v, _, _ in chunk],
            headers=[h for _, _, _, h in chunk],
        )
        batches.append(to_record_batch(batch, partition, base_offset + i, 0))
    return pa.Table.from_batches(batches).slice(skip)


def _general(topic, table, embedded="binary"):
    return orjson.dumps(encode_records(topic, table, embedded)[0])


def encode_binary_body(topic, table):
    """The whole v2 body in the binary format (``None`` when a record has headers)."""
    parts = binary_rows(topic, table)
    return None if parts is None else fetch_body.body(parts)


def test_golden_bytes():
    """Pinned: keys null, one byte short of a 3-byte group, two short, whole groups; a
    null value; the offsets cross a digit boundary; a timestamp not on a whole ms."""
    n = MIN_RUN * 2
    rows = [(None, b"abcd", 1_700_000_000_000, [])] * n + [(b"k1", None, 5, []), (b"key", b"", 0, [])]
    table = _table(rows, base_offset=100 - n)
    body = encode_binary_body("t.1", table)
    first = (b'{"topic":"t.1","key":null,"value":"YWJjZA==","partition":0,"offset":%d,'
             b'"timestamp":1700000000000,"headers":[]}')
    assert body == (
        b"[" + b",".join(first % o for o in range(100 - n, 100))
        + b',{"topic":"t.1","key":"azE=","value":null,"partition":0,"offset":100,"timestamp":5,"headers":[]}'
        + b',{"topic":"t.1","key":"a2V5","value":"","partition":0,"offset":101,"timestamp":0,"headers":[]}]'
    )
    assert body == _general("t.1", table)
    assert encode_binary_body("t.1", table.slice(0, 0)) == b"[]"


@given(
    st.lists(st.tuples(maybe_bytes, maybe_bytes, st.integers(0, 2**43), st.sampled_from([None, []])), max_size=30),
    st.integers(0, 2**50), st.integers(0, 1000), st.integers(0, 3), st.integers(1, 3),
)
def test_fetch_body_is_the_general_encoding(rows, base_offset, partition, skip, frames):
    table = _table(rows, base_offset, partition, frames, skip)
    assert encode_binary_body("orders.v1-x", table) == _general("orders.v1-x", table)


same_length = st.integers(0, 7).flatmap(lambda n: st.one_of(st.none(), st.binary(min_size=n, max_size=n)))


@settings(max_examples=60)
@given(
    st.integers(0, 7), st.integers(0, 7), st.lists(st.booleans(), min_size=1, max_size=80),
    st.integers(0, 10**6), st.integers(1, 3), st.integers(0, 2**43),
)
def test_long_runs_of_one_shape(key_length, value_length, nulls, base_offset, frames, timestamp):
    """Runs long enough for the matrix path (values of one length, some null, offsets
    crossing digit counts) still give the general encoding's bytes."""
    rows = [(None if null else bytes([i % 256]) * key_length, bytes([(7 * i) % 256]) * value_length,
             timestamp + (i % 3), []) for i, null in enumerate(nulls)]
    base = max(0, 10 ** len(str(base_offset)) - len(rows) // 2)  # crosses a power of ten midway
    table = _table(rows, base, 2, frames)
    assert encode_binary_body("t", table) == _general("t", table)


@given(st.lists(st.tuples(st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers(-2**63, 2**63 - 1))),
                          st.one_of(st.none(), st.lists(st.floats(allow_nan=False), max_size=3))), max_size=20))
def test_json_format_is_the_general_encoding(docs):
    rows = [(None if k is None else orjson.dumps(k), None if v is None else orjson.dumps(v), i, [])
            for i, (k, v) in enumerate(docs)]
    table = _table(rows, 3)
    assert fetch_body.body(json_rows("j", table)) == _general("j", table, "json")


def test_json_format_refuses_what_is_not_json():
    table = _table([(None, b"{not json", 0, [])], 41)
    with pytest.raises(RecordDeserializationError, match="value of the record at offset 41 of j-"):
        json_rows("j", table)


def test_records_with_headers_take_the_general_path():
    table = _table([(None, b"v", 1, []), (b"k", None, 2, [("trace", b"1")])])
    assert encode_binary_body("t", table) is None
    assert json_rows("t", table) is None
    assert orjson.loads(_general("t", table))[1]["headers"] == [{"key": "trace", "value": "MQ=="}]


def test_rows_of_several_topics_make_one_array():
    """A consumer instance's poll joins the rows of each topic into one array."""
    a = _table([(None, b"x" * 10, 1, [])] * 20)
    b = _table([(b"k", b"y", 2, [])] * 3, 7)
    parts = binary_rows("a", a) + binary_rows("b", b)
    assert orjson.loads(fetch_body.body(parts)) == orjson.loads(_general("a", a)) + orjson.loads(_general("b", b))


def _writer_bytes(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_arrow_fetch_stream_is_the_stream_writers_bytes():
    """The cached schema message plus one message per chunk is what pyarrow writes."""
    table = _table([(None, b"v", 1, []), (b"k", None, 2, [("h", b"1")]), (None, b"xyz", 3, None)], 5, frames=2)
    for t in (table, table.slice(1), table.slice(3), table.select(["offset", "value"])):
        assert write_ipc(t) == _writer_bytes(t)
        assert pa.ipc.open_stream(write_ipc(t)).read_all().equals(t)


def test_cached_rows_are_the_same_bytes_and_only_for_the_same_slice():
    """Slices of one block: the second fetch of a slice takes the rows the first kept;
    an overlapping slice of the same block is its own entry, with its own rows."""
    rows = [(None, bytes([i]) * 20, 1_000 + i, []) for i in range(50)]
    block = _table(rows, 700)
    first = binary_rows("c", block.slice(10, 20), cached=True)
    again = binary_rows("c", block.slice(10, 20), cached=True)
    assert again[0] is first[0]
    for lo, n in ((10, 20), (15, 20), (0, 50), (49, 1), (10, 19)):
        part = block.slice(lo, n)
        assert fetch_body.body(binary_rows("c", part, cached=True)) == _general("c", part)
    other_topic = binary_rows("d", block.slice(10, 20), cached=True)
    assert fetch_body.body(other_topic) == _general("d", block.slice(10, 20))


def test_golden_bytes_of_one_shape():
    """Every row of one shape (the one-run path): keys of 2 bytes, values of 4."""
    table = _table([(b"k%d" % i, b"v%03d" % i, 1_764_000_000_000 + i, []) for i in range(3)], 10)
    assert encode_binary_body("t", table) == (
        b'[{"topic":"t","key":"azA=","value":"djAwMA==","partition":0,"offset":10,"timestamp":1764000000000,'
        b'"headers":[]},{"topic":"t","key":"azE=","value":"djAwMQ==","partition":0,"offset":11,'
        b'"timestamp":1764000000001,"headers":[]},{"topic":"t","key":"azI=","value":"djAwMg==","partition":0,'
        b'"offset":12,"timestamp":1764000000002,"headers":[]}]'
    )


@given(st.lists(st.tuples(st.sampled_from(["offset", "max_records", "timeout", "x", ""]),
                          st.text(alphabet="09az=%+&;. -", max_size=6),
                          st.booleans()), max_size=6))
def test_fetch_query_parameters_are_what_starlette_parses(pairs):
    """The fetch routes' own split of the query says what ``request.query_params`` says."""
    query = "&".join(f"{k}={v}" if eq else k for k, v, eq in pairs).encode("latin-1")
    request = Request({"type": "http", "query_string": query, "headers": []})
    assert dict(query_of(request)) == dict(request.query_params)


def test_large_binary_columns_are_encoded_as_binary_ones():
    table = _table([(b"k" * 4, b"v" * 5, 9, [])] * 10, 3)
    large = table.set_column(table.schema.get_field_index("value"), "value",
                             table.column("value").cast(pa.large_binary()))
    assert encode_binary_body("t", large) == _general("t", table)
