"""read_committed over table rows: outcomes from the next marker of the same producer."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from laketail.spark.isolation import (
    ABORTED,
    COMMITTED,
    UNDECIDED,
    Markers,
    committed_rows,
    outcomes,
    transaction_ranges,
)


def rows(spec: list[tuple[int, int, bool, str | None]]) -> pa.Table:
    """(offset, producer_id, transactional, control) rows."""
    return pa.table({
        "offset": pa.array([r[0] for r in spec], pa.int64()),
        "producer_id": pa.array([r[1] for r in spec], pa.int64()),
        "transactional": pa.array([r[2] for r in spec], pa.bool_()),
        "control": pa.array([r[3] for r in spec], pa.string()),
    })


# Two producers interleaved: 7 aborts offsets 1-2, 8 commits 3 and 5, 7 then commits 6.
LOG = [
    (0, -1, False, None),
    (1, 7, True, None),
    (2, 7, True, None),
    (3, 8, True, None),
    (4, 7, True, "ABORT"),
    (5, 8, True, None),
    (6, 7, True, None),
    (7, 8, True, "COMMIT"),
    (8, 7, True, "COMMIT"),
    (9, 8, True, None),  # open: no marker yet
]


def test_outcome_is_the_next_marker_of_the_same_producer() -> None:
    markers = Markers.of(rows(LOG))
    got = outcomes(np.array([1, 2, 3, 5, 6, 9]), np.array([7, 7, 8, 8, 7, 8]), markers)
    assert got.tolist() == [ABORTED, ABORTED, COMMITTED, COMMITTED, COMMITTED, UNDECIDED]


def test_committed_rows_drop_markers_and_aborted_records() -> None:
    out, undecided = committed_rows(rows(LOG[:9]), Markers.of(rows(LOG)))
    assert out.column("offset").to_pylist() == [0, 3, 5, 6]
    assert undecided == 0
    out, undecided = committed_rows(rows(LOG), Markers.of(rows(LOG)))
    assert undecided == 1 and 9 not in out.column("offset").to_pylist()


def test_markers_outside_the_rows_decide_them() -> None:
    out, undecided = committed_rows(rows(LOG[:4]), Markers.empty())
    assert undecided == 3 and out.column("offset").to_pylist() == [0]
    out, undecided = committed_rows(rows(LOG[:4]), Markers.of(rows(LOG[4:])))
    assert undecided == 0 and out.column("offset").to_pylist() == [0, 3]


def test_ranges_for_the_sql_views() -> None:
    ranges = transaction_ranges(rows(LOG))
    assert ranges.aborted == [(7, -1, 4)]
    assert ranges.stable_offset == 9
    assert ranges.aborted_producers == frozenset()  # 7 committed later too
    single_use = transaction_ranges(rows([(0, 5, True, None), (1, 5, True, "ABORT"), (2, 6, True, "COMMIT")]))
    assert single_use.aborted == [(5, -1, 1)] and single_use.aborted_producers == {5}


def test_huge_offsets_fall_back_to_one_producer_at_a_time() -> None:
    big = 2**61
    markers = Markers(np.array([big + 5, big + 9]), np.array([1, 2]), np.array([True, False]))
    got = outcomes(np.array([big + 1, big + 2, big + 10]), np.array([1, 2, 2]), markers)
    assert got.tolist() == [ABORTED, COMMITTED, UNDECIDED]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([None, None, None, "COMMIT", "ABORT"])), max_size=60))
def test_vectorised_outcomes_match_a_plain_scan(events: list[tuple[int, str | None]]) -> None:
    spec = [(i, pid, True, ctl) for i, (pid, ctl) in enumerate(events)]
    data = [(o, pid) for o, pid, _, ctl in spec if ctl is None]
    expected = []
    for offset, pid in data:
        nxt = next((ctl for o, p, _, ctl in spec if o > offset and p == pid and ctl), None)
        expected.append({None: UNDECIDED, "COMMIT": COMMITTED, "ABORT": ABORTED}[nxt])
    got = outcomes(np.array([o for o, _ in data], np.int64), np.array([p for _, p in data], np.int64),
                   Markers.of(rows(spec)) if spec else Markers.empty())
    assert got.tolist() == expected
