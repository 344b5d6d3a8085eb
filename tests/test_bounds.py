"""The edge's number and JSON checks (laketail.bounds, laketail.api.deps): pure, no broker."""

import pyarrow as pa
import pytest

from laketail.api.deps import MAX_JSON_DEPTH, check_json_depth, parse_json
from laketail.bounds import (
    INT32_MAX,
    INT64_MAX,
    MAX_TIMESTAMP_MS,
    bounded_int,
    check_timestamp_column,
    int32,
    parse_int,
    timestamp_ms,
)
from laketail.errors import InvalidRecord, InvalidRequest, InvalidTimestamp


def test_int32_takes_its_range_and_nothing_else():
    assert int32(INT32_MAX, "p") == INT32_MAX
    assert int32(-(2**31), "p") == -(2**31)
    for bad in (2**31, -(2**31) - 1, 2**40, 10**20, True, 1.0, "1", None):
        with pytest.raises(InvalidRequest):
            int32(bad, "p")
    with pytest.raises(InvalidRecord):
        int32(2**31, "records[0].partition", InvalidRecord)


def test_parse_int_from_text():
    assert parse_int(str(INT64_MAX), "offset", -1, INT64_MAX) == INT64_MAX
    for raw in (str(2**63), "-2", "1e3", "", "0x10", " 5", "5 ", "+5", "1_000", "5.0", "-", "--5", "\u0665",
                "1" * 5000):
        with pytest.raises(InvalidRequest):
            parse_int(raw, "offset", -1, INT64_MAX)
    assert parse_int("-1", "offset", -1, INT64_MAX) == -1
    assert parse_int("007", "offset", -1, INT64_MAX) == 7
    assert bounded_int(-1, "offset", -1, INT64_MAX) == -1


def test_timestamps_end_with_year_9999_and_start_at_the_epoch():
    assert timestamp_ms(0) == 0
    assert timestamp_ms(MAX_TIMESTAMP_MS) == MAX_TIMESTAMP_MS
    for bad in (-1, MAX_TIMESTAMP_MS + 1, 2**62, 2**63):
        with pytest.raises(InvalidTimestamp):
            timestamp_ms(bad)
    check_timestamp_column(pa.array([0, None, MAX_TIMESTAMP_MS], pa.int64()))
    check_timestamp_column(pa.nulls(3, pa.int64()))
    for bad in ([1, 2**62], [-5, 1]):
        with pytest.raises(InvalidTimestamp):
            check_timestamp_column(pa.array(bad, pa.int64()))


def _nested(depth: int, inner: str = "1") -> bytes:
    return ("[" * depth + inner + "]" * depth).encode()


def test_one_json_depth_limit():
    assert parse_json(_nested(MAX_JSON_DEPTH)) is not None
    for depth in (MAX_JSON_DEPTH + 1, 255, 1000, 5000):
        with pytest.raises(InvalidRequest, match="deeper than|not valid JSON"):
            parse_json(_nested(depth))
    # Deep inside one record among many flat ones, under objects and arrays mixed.
    doc = {"records": [{"value": "x"}] * 300 + [{"value": {"a": [[{"b": 1}]] * 2}, "h": []}]}
    check_json_depth(doc)
    deep: object = 1
    for i in range(MAX_JSON_DEPTH):
        deep = {"k": deep} if i % 2 else [deep]
    with pytest.raises(InvalidRequest):
        check_json_depth({"records": [{"value": "x"}] * 300 + [{"value": deep}]})


def test_binary_bodies_skip_the_walk_but_not_the_parse():
    body = b'{"records": [{"value": "AA==", "junk": %s}]}' % _nested(200)
    assert parse_json(body, nested_values=False)["records"][0]["value"] == "AA=="
    with pytest.raises(InvalidRequest):
        parse_json(body)
