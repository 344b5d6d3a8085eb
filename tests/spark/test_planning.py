"""Planning's pure parts: rate limits, splits, the data-loss error, offset documents."""

from __future__ import annotations

from laketail.errors import OffsetOutOfRange
from laketail.spark.planning import data_loss, offsets_json, offsets_of, rate_limit, split_points


def test_rate_limit_shares_the_limit_by_what_is_available() -> None:
    starts = {("t", 0): 0, ("t", 1): 100, ("u", 0): 5}
    ends = {("t", 0): 300, ("t", 1): 200, ("u", 0): 5}
    limited = rate_limit(starts, ends, 40)
    assert limited == {("t", 0): 30, ("t", 1): 110, ("u", 0): 5}
    assert rate_limit(starts, ends, 10_000) == ends


def test_rate_limit_moves_every_partition_with_data() -> None:
    limited = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)
    assert limited[("t", 1)] == 1 and limited[("t", 0)] > 0


def test_split_points_cover_the_range_without_gaps() -> None:
    pieces = split_points(10, 21, 3)
    assert pieces == [(10, 14), (14, 18), (18, 21)]
    assert split_points(0, 2, 5) == [(0, 1), (1, 2)]


def test_data_loss_names_every_partition_and_range() -> None:
    err = data_loss({("t", 1): (0, 40), ("t", 0): (7, 9)})
    assert isinstance(err, OffsetOutOfRange)
    assert "t-0 offsets [7, 9)" in err.message and "t-1 offsets [0, 40)" in err.message
    assert "failOnDataLoss=false" in err.message


def test_streaming_offsets_round_trip() -> None:
    offsets = {("a", 0): 3, ("a", 10): 7, ("b-c.d", 2): 0}
    doc = offsets_json(offsets)
    assert doc == {"a": {"0": 3, "10": 7}, "b-c.d": {"2": 0}}
    assert offsets_of(doc) == offsets
