"""The history checker on synthetic histories: it passes a correct log and names each
kind of violation (a lost, moved or duplicated acknowledgement, a gap, a stranger)."""

from __future__ import annotations

import threading

import pytest

from .history import History, check, describe


def _history() -> History:
    """Partition 0: a@0 b@1 acknowledged, c unknown, d refused; partition 1: e@0."""
    h = History()
    h.invoke(0, ["a", "b", "c", "d"])
    h.invoke(1, ["e"])
    h.ok("a", 0, 0)
    h.ok("b", 0, 1)
    h.unknown(["c"], "ConnectError")
    h.failed(["d"], "NOT_ENOUGH_REPLICAS")
    h.ok("e", 1, 0)
    return h


def test_a_log_that_keeps_every_acknowledgement_passes():
    h = _history()
    assert check(h, {0: [(0, "a"), (1, "b")], 1: [(0, "e")]}, {0: 2, 1: 1}) == []


def test_an_unknown_outcome_may_be_in_the_log_or_not():
    h = _history()
    assert check(h, {0: [(0, "a"), (1, "b"), (2, "c")], 1: [(0, "e")]}, {0: 3, 1: 1}) == []


def test_pending_counts_as_unknown():
    h = History()
    h.invoke(0, ["x", "y"])
    assert check(h, {0: [(0, "y")]}, {0: 1}) == []


def test_an_empty_history_and_empty_log_pass():
    assert check(History(), {}, {}) == []
    assert check(History(), {0: []}, {0: 0}) == []


def test_a_lost_acknowledgement_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "c")], 1: [(0, "e")]}, {0: 2, 1: 1})
    assert len(problems) == 1
    assert "'b'" in problems[0] and "lost" in problems[0] and "holds 'c'" in problems[0]


def test_an_acknowledgement_at_another_offset_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "c"), (2, "b")], 1: [(0, "e")]}, {0: 3, 1: 1})
    assert problems == ["acknowledged value 'b' is at [(0, 2)], not at its acknowledged (0, 1)"]


def test_a_gap_in_the_offsets_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b"), (3, "c")], 1: [(0, "e")]}, {0: 4, 1: 1})
    assert problems == ["partition 0: offsets missing below the end offset 4: 2"]


def test_a_log_shorter_than_its_end_offset_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b")], 1: [(0, "e")]}, {0: 5, 1: 1})
    assert problems == ["partition 0: offsets missing below the end offset 5: 2-4"]


def test_an_offset_read_twice_or_past_the_end_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b"), (1, "b"), (2, "c")], 1: [(0, "e")]}, {0: 2, 1: 1})
    assert any("offsets read more than once: [1]" in p for p in problems)
    assert any("offsets outside 0..1: [2]" in p for p in problems)
    assert any("'b' appears 2 times" in p for p in problems)


def test_a_duplicated_value_is_named_even_when_it_was_unknown():
    problems = check(_history(), {0: [(0, "a"), (1, "b"), (2, "c"), (3, "c")], 1: [(0, "e")]}, {0: 4, 1: 1})
    assert problems == ["value 'c' appears 2 times, at (partition, offset) [(0, 2), (0, 3)]"]


def test_a_duplicate_of_an_acknowledged_value_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b"), (2, "a")], 1: [(0, "e")]}, {0: 3, 1: 1})
    assert problems == ["value 'a' appears 2 times, at (partition, offset) [(0, 0), (0, 2)]"]


def test_a_value_never_sent_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b"), (2, "zz")], 1: [(0, "e")]}, {0: 3, 1: 1})
    assert problems == ["value 'zz' at (0, 2) was never sent"]


def test_a_value_in_the_wrong_partition_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b")], 1: [(0, "e"), (1, "c")]}, {0: 2, 1: 2})
    assert problems == ["value 'c' was sent to partition 0 but is at [(1, 1)]"]


def test_a_refused_value_in_the_log_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b"), (2, "d")], 1: [(0, "e")]}, {0: 3, 1: 1})
    assert problems == ["value 'd' was refused (NOT_ENOUGH_REPLICAS) but is at [(0, 2)]"]


def test_two_acknowledgements_of_one_offset_are_named():
    h = History()
    h.invoke(0, ["a", "b"])
    h.ok("a", 0, 0)
    h.ok("b", 0, 0)
    problems = check(h, {0: [(0, "a")]}, {0: 1})
    assert "partition 0 offset 0 acknowledged for two values, 'a' and 'b'" in problems
    assert any("'b'" in p and "lost" in p for p in problems)


def test_a_lost_partition_is_named():
    problems = check(_history(), {0: [(0, "a"), (1, "b")]}, {0: 2})
    assert problems == ["acknowledged value 'e' (partition 1 offset 0) is lost"]


def test_the_recorder_refuses_a_value_twice_and_a_wrong_partition():
    h = History()
    h.invoke(0, ["a"])
    with pytest.raises(AssertionError):
        h.invoke(1, ["a"])
    with pytest.raises(AssertionError):
        h.ok("a", 1, 0)


def test_the_recorder_is_safe_across_threads():
    h = History()

    def produce(name: str) -> None:
        for i in range(500):
            value = f"{name}-{i}"
            h.invoke(0, [value])
            if i % 2:
                h.ok(value, 0, i)
            else:
                h.unknown([value], "x")

    threads = [threading.Thread(target=produce, args=(f"t{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(h.ops()) == 2000
    assert h.acked_count() == 1000


def test_the_message_lists_the_first_problems_and_the_summary():
    h = _history()
    text = describe([f"p{i}" for i in range(30)], h)
    assert text.startswith("30 violations")
    assert "p24" in text and "p25" not in text and "... and 5 more" in text
    assert "'ok': 3" in text and "NOT_ENOUGH_REPLICAS: 1" in text
