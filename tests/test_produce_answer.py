"""The v2 produce answer's fast path says exactly what the general encoding says; the
per-record lists of a produce result are the same whether built eagerly or on demand;
``acks`` read from the raw query string is what parsing it gives."""

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from laketail.api.deps import acks_of
from laketail.api.routes.produce import _TEMPLATE_MAX_COUNT, _dense_v2_answer
from laketail.errors import (
    InvalidRequest,
    LeaderNotAvailable,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    RequestTimedOut,
)
from laketail.produce_path import ProduceResult, whole_request_failure


@given(st.integers(0, 10_000), st.integers(0, 2**62), st.integers(1, 300))
def test_dense_answer_is_the_general_answer(partition: int, base: int, count: int) -> None:
    general = {
        "key_schema_id": None,
        "value_schema_id": None,
        "offsets": [
            {"partition": partition, "offset": base + i, "error_code": None, "error": None}
            for i in range(count)
        ],
    }
    assert orjson.loads(_dense_v2_answer(partition, base, count)) == general


def test_dense_answer_golden_bytes() -> None:
    assert _dense_v2_answer(2, 9, 2) == (
        b'{"key_schema_id":null,"value_schema_id":null,"offsets":['
        b'{"partition":2,"offset":9,"error_code":null,"error":null},'
        b'{"partition":2,"offset":10,"error_code":null,"error":null}]}'
    )


def test_dense_answer_beyond_the_cached_templates() -> None:
    count = _TEMPLATE_MAX_COUNT + 3
    offsets = orjson.loads(_dense_v2_answer(1, 7, count))["offsets"]
    assert [o["offset"] for o in offsets] == list(range(7, 7 + count))
    assert {o["partition"] for o in offsets} == {1}


def test_produce_result_lists_are_built_on_demand() -> None:
    dense = ProduceResult(3, 100, 1_700_000_000_000, 4)
    assert dense.dense == (3, 100)
    assert dense.partitions == [3, 3, 3, 3]
    assert dense.offsets == [100, 101, 102, 103]
    assert dense.timestamps_ms == [1_700_000_000_000] * 4
    spread = ProduceResult([0, 1], [5, 9], [1, 2], 2)
    assert spread.dense is None
    assert (spread.partitions, spread.offsets, spread.timestamps_ms) == ([0, 1], [5, 9], [1, 2])


@pytest.mark.parametrize("query, acks", [
    (b"", "all"), (b"acks=1", "1"), (b"acks=0", "0"), (b"acks=all", "all"), (b"acks=-1", "all"),
    (b"acks=1&x=2", "1"), (b"x=2&acks=0", "0"),
])
def test_acks_from_the_query_string(query: bytes, acks: str) -> None:
    assert acks_of(Request({"type": "http", "query_string": query, "headers": []})) == acks


@pytest.mark.parametrize("query", [b"acks=2", b"acks=", b"acks=ALL", b"acks=1&acks=x"])
def test_bad_acks_is_invalid_request(query: bytes) -> None:
    with pytest.raises(InvalidRequest):
        acks_of(Request({"type": "http", "query_string": query, "headers": []}))


def test_a_request_is_refused_as_a_whole_only_when_nothing_was_written() -> None:
    """Issue 35: a 3-record request over partitions whose appends all failed was answered
    LEADER_NOT_AVAILABLE (nothing written) while the forward to partition 2's leader had
    no answer and its record was in the log. Per record, then, with each its own error."""
    gone, unknown, moved = LeaderNotAvailable("no leader"), RequestTimedOut("no answer"), NotLeaderOrFollower("x")
    assert whole_request_failure([], 3, per_record_errors=True) is None
    assert whole_request_failure([gone, NotEnoughReplicas("isr")], 2, per_record_errors=True) is gone
    assert whole_request_failure([gone, unknown], 2, per_record_errors=True) is None
    assert whole_request_failure([gone, moved], 2, per_record_errors=True) is None
    assert whole_request_failure([gone], 2, per_record_errors=True) is None  # the other partition's were written
    # A caller that cannot answer per record: an unknown outcome, never "nothing written".
    assert whole_request_failure([gone, unknown], 3, per_record_errors=False) is unknown
    assert whole_request_failure([gone], 3, per_record_errors=False) is gone
