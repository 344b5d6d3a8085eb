"""The v2 fetch body written from a row template says exactly what the general encoding says."""

import orjson
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from laketail.api.routes.fetch import encode_binary_body, encode_records
from laketail.records import build_frame_batch, to_record_batch

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))


records = st.lists(
    st.tuples(maybe_bytes, maybe_bytes, st.integers(0, 2**43), st.sampled_from([None, []])),
    max_size=30,
)


@given(records, st.integers(0, 2**50), st.integers(0, 1000), st.integers(0, 3))
def test_fetch_body_is_the_general_encoding(rows, base_offset, partition, skip):
    batch = build_frame_batch(
        timestamps_us=[ts * 1000 for _, _, ts, _ in rows],
        keys=[k for k, _, _, _ in rows],
        values=[v for _, v, _, _ in rows],
        headers=[h for _, _, _, h in rows],
    )
    table = pa.Table.from_batches([to_record_batch(batch, partition, base_offset, 0)]).slice(skip)
    general = orjson.dumps(encode_records("orders.v1-x", table, "binary")[0])
    assert encode_binary_body("orders.v1-x", table) == general


def test_records_with_headers_take_the_general_path():
    batch = build_frame_batch(timestamps_us=[1000, 2000], keys=[None, b"k"], values=[b"v", None],
                              headers=[[], [("trace", b"1")]])
    table = pa.Table.from_batches([to_record_batch(batch, 0, 0, 0)])
    assert encode_binary_body("t", table) is None
    assert orjson.loads(orjson.dumps(encode_records("t", table, "binary")[0]))[1]["headers"] == [
        {"key": "trace", "value": "MQ=="}
    ]
