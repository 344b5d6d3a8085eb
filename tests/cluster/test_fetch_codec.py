"""The replica fetch response (laketail.cluster.replicas): a length-prefixed JSON head
listing the partitions, then each partition's frames back to back, ``size`` bytes each."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from laketail.cluster.replicas import decode_fetch_response, encode_fetch_response

answers = st.lists(
    st.tuples(
        st.fixed_dictionaries(
            {
                "topic": st.text(min_size=1, max_size=12),
                "partition": st.integers(0, 1_000),
                "error": st.sampled_from(
                    [None, "NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH", "OFFSET_OUT_OF_RANGE"]
                ),
            },
            optional={
                "hw": st.integers(0, 2**53),
                "leo": st.integers(0, 2**53),
                "log_start": st.integers(0, 2**53),
                "hot_start": st.integers(0, 2**53),
                "diverging": st.fixed_dictionaries(
                    {"epoch": st.integers(-1, 2**31 - 1), "end_offset": st.integers(-1, 2**53)}
                ),
            },
        ),
        st.binary(max_size=300),
    ),
    max_size=8,
)


@given(answers)
def test_fetch_responses_round_trip(parts):
    heads = [dict(head, size=len(data)) for head, data in parts]
    body = encode_fetch_response(heads, [data for _, data in parts])
    assert decode_fetch_response(body) == [(head, data) for head, (_, data) in zip(heads, parts)]


def test_the_layout_is_a_length_then_the_json_head_then_the_chunks():
    body = encode_fetch_response(
        [
            {"topic": "t", "partition": 0, "size": 3},
            {"topic": "t", "partition": 1, "size": 0},
            {"topic": "u", "partition": 0, "size": 2},
        ],
        [b"abc", b"", b"de"],
    )
    (n,) = struct.unpack_from(">I", body)
    assert body[4 + n:] == b"abcde"
    decoded = decode_fetch_response(body)
    assert [data for _, data in decoded] == [b"abc", b"", b"de"]


def test_a_partition_without_a_size_carries_no_bytes():
    body = encode_fetch_response([{"topic": "t", "partition": 0, "error": "NOT_LEADER_OR_FOLLOWER"}], [])
    assert decode_fetch_response(body) == [({"topic": "t", "partition": 0, "error": "NOT_LEADER_OR_FOLLOWER"}, b"")]
