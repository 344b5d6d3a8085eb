"""Kafka's assignors: disjoint, covering, balanced; sticky moves little; extras idle."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laketail.coordinator.assignors import (
    cooperative_sticky,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)


def _flat(assignment):
    return [tp for tps in assignment.values() for tp in tps]


def test_range_matches_kafka_example():
    # Kafka's RangeAssignor doc: two consumers, topics t0 and t1 with 3 partitions each.
    subs = {"C0": ["t0", "t1"], "C1": ["t0", "t1"]}
    got = range_assign(subs, {"t0": 3, "t1": 3})
    assert got == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }


def test_roundrobin_matches_kafka_example():
    subs = {"C0": ["t0", "t1"], "C1": ["t0", "t1"]}
    got = roundrobin_assign(subs, {"t0": 3, "t1": 3})
    assert got == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "C1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }


@pytest.mark.parametrize("assignor", [range_assign, roundrobin_assign, lambda s, p: sticky_assign(s, p, {})])
def test_more_members_than_partitions_leaves_extras_idle(assignor):
    subs = {f"m{i}": ["t"] for i in range(5)}
    got = assignor(subs, {"t": 3})
    assert sorted(_flat(got)) == [("t", 0), ("t", 1), ("t", 2)]
    assert sum(1 for tps in got.values() if not tps) == 2


members = st.integers(min_value=1, max_value=7)
parts = st.integers(min_value=0, max_value=12)


@settings(max_examples=200, deadline=None)
@given(n=members, p=parts, q=parts)
def test_every_assignor_is_disjoint_covering_and_balanced(n, p, q):
    subs = {f"m{i}": ["a", "b"] for i in range(n)}
    counts = {"a": p, "b": q}
    everything = sorted([("a", i) for i in range(p)] + [("b", i) for i in range(q)])
    for got in (roundrobin_assign(subs, counts), sticky_assign(subs, counts, {})):
        flat = _flat(got)
        assert sorted(flat) == everything  # covering, and disjoint (no duplicates)
        sizes = [len(tps) for tps in got.values()]
        assert max(sizes) - min(sizes) <= 1
    got = range_assign(subs, counts)
    assert sorted(_flat(got)) == everything


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=2, max_value=6), p=st.integers(min_value=1, max_value=16))
def test_sticky_keeps_owners_when_a_member_leaves(n, p):
    subs = {f"m{i}": ["t"] for i in range(n)}
    before = sticky_assign(subs, {"t": p}, {})
    gone = "m0"
    after_subs = {m: s for m, s in subs.items() if m != gone}
    after = sticky_assign(after_subs, {"t": p}, {m: tps for m, tps in before.items() if m != gone})
    for member, tps in before.items():
        if member != gone:
            assert set(tps) <= set(after[member])  # survivors keep everything they had
    assert sorted(_flat(after)) == [("t", i) for i in range(p)]


def test_cooperative_sticky_revokes_first_then_hands_over():
    owned = {"m0": [("t", 0), ("t", 1), ("t", 2), ("t", 3)]}
    subs = {"m0": ["t"], "m1": ["t"]}
    first, follow_up = cooperative_sticky(subs, {"t": 4}, owned)
    assert follow_up
    assert len(first["m0"]) == 2 and first["m1"] == []  # two revoked, not yet reassigned
    second, follow_up = cooperative_sticky(subs, {"t": 4}, first)
    assert not follow_up
    assert sorted(first["m0"]) == second["m0"] and len(second["m1"]) == 2
