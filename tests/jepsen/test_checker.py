"""The history checker on hand-made histories: a clean one passes, and each check finds
the violation it exists for (so none of them can pass by finding nothing ever)."""

from __future__ import annotations

from .history import (
    BrokerStart,
    Finding,
    Grant,
    History,
    OffsetCommit,
    OffsetRead,
    Produce,
    Txn,
    check,
    summary,
)


def clean() -> History:
    """Two requests acknowledged, one refused and absent, one unknown and present, a
    committed and an aborted transaction, commits and reads that only go forward."""
    a = Produce("r1", "plain-0", [(0, "a0"), (1, "a1")])
    a.answer([0, 0])
    refused = Produce("r2", "plain-0", [(0, "b0")])
    refused.answer_all("NOT_ENOUGH_REPLICAS")
    unknown = Produce("r3", "idem-0", [(1, "c1")])
    unknown.answer_all("NETWORK_EXCEPTION")
    unknown.answer_all(1)  # the idempotent retry acknowledged
    t1 = Produce("r4", "txn-0", [(0, "t1")])
    t1.answer([2])
    t2 = Produce("r5", "txn-0", [(1, "t2")])
    t2.answer([3])
    return History(
        produces=[a, refused, unknown, t1, t2],
        txns=[Txn("tx", 7, 0, ["t1"], "committed"), Txn("tx", 7, 1, ["t2"], "aborted")],
        commits=[OffsetCommit("g", 0, 5, sent=1.0, answered=1.1, ok=True),
                 OffsetCommit("g", 0, 9, sent=2.0, answered=2.1, ok=True)],
        reads=[OffsetRead("g", 0, 5, sent=1.5, answered=1.6), OffsetRead("g", 0, 9, sent=3.0, answered=3.1)],
        grants=[Grant(None, 3, 0, 0.5), Grant("tx", 7, 0, 0.6), Grant("tx", 7, 1, 5.0)],
        starts=[BrokerStart(0, 0.0, True), BrokerStart(1, 9.0, True)],
        # offset 1 of partition 0 and 2 of partition 1 are transaction markers
        log={0: [(0, "a0"), (2, "t1")], 1: [(0, "a1"), (1, "c1"), (3, "t2")]},
        committed_log={0: ["a0", "t1"], 1: ["a1", "c1"]},
    )


def kinds(findings: list[Finding]) -> list[str]:
    return sorted(f.check for f in findings)


def test_a_clean_history_has_no_finding():
    assert check(clean()) == []
    assert set(summary([]).values()) == {0}


def test_the_history_survives_json():
    h = clean()
    assert History.from_json(h.to_json()) == h


def test_an_acknowledged_record_missing_from_the_log_is_lost():
    h = clean()
    h.log[1] = [(1, "c1"), (3, "t2")]  # a1, acknowledged at 1@0, is gone
    findings = check(h)
    assert kinds(findings) == ["lost"]
    assert "'a1'" in findings[0].detail and "1@0" in findings[0].detail


def test_an_acknowledged_record_at_another_offset_is_lost():
    h = clean()
    h.log[0] = [(0, "t1"), (2, "a0")]
    assert kinds(check(h)) == ["lost", "lost"]


def test_one_request_written_twice_is_a_duplicate():
    h = clean()
    h.log[0].append((3, "a0"))
    findings = check(h)
    assert kinds(findings) == ["duplicate"]
    assert "request r1 of plain-0" in findings[0].detail and "0@0, 0@3" in findings[0].detail


def test_a_refused_record_in_the_log_is_a_partial_failure():
    h = clean()
    h.log[0].append((3, "b0"))
    findings = check(h)
    assert kinds(findings) == ["partial-failure"]
    assert "NOT_ENOUGH_REPLICAS" in findings[0].detail


def test_a_record_with_an_unknown_answer_may_be_present_or_not():
    h = clean()
    maybe = Produce("r6", "plain-1", [(0, "m0"), (0, "m1")])
    maybe.answer_all("REQUEST_TIMED_OUT")
    h.produces.append(maybe)
    h.log[0].append((3, "m0"))
    assert check(h) == []


def test_a_refused_request_partly_written_names_the_written_records():
    """Finding 4 of issue 35: a produce across partitions answered 503 for the whole
    request while some partitions took their records."""
    h = clean()
    across = Produce("r7", "plain-1", [(0, "x0"), (1, "x1")])
    across.answer_all("LEADER_NOT_AVAILABLE")
    h.produces.append(across)
    h.log[1].append((4, "x1"))
    findings = check(h)
    assert kinds(findings) == ["partial-failure"]
    assert "'x1'" in findings[0].detail


def test_a_committed_offset_below_an_acknowledged_commit_goes_backwards():
    h = clean()
    h.reads.append(OffsetRead("g", 0, -1, sent=4.0, answered=4.1))
    findings = check(h)
    assert kinds(findings) == ["offsets-backwards"]
    assert "read as -1" in findings[0].detail and "commit of 9" in findings[0].detail


def test_a_committed_offset_below_an_earlier_read_goes_backwards():
    h = clean()
    h.commits[1].ok = False  # the commit of 9 was not answered, yet 9 was read
    h.reads.append(OffsetRead("g", 0, 5, sent=4.0, answered=4.1))
    findings = check(h)
    assert kinds(findings) == ["offsets-backwards"]
    assert "after 9 was read" in findings[0].detail


def test_a_read_overlapping_an_unanswered_commit_is_not_judged_by_it():
    h = clean()
    h.commits.append(OffsetCommit("g", 0, 20, sent=3.5, answered=4.5, ok=True))
    h.reads.append(OffsetRead("g", 0, 9, sent=4.0, answered=4.2))
    assert check(h) == []


def test_an_idempotent_producer_id_handed_out_twice_is_reuse():
    h = clean()
    h.grants.append(Grant(None, 3, 0, 40.0))
    findings = check(h)
    assert kinds(findings) == ["producer-id-reuse"]
    assert "producer id 3" in findings[0].detail


def test_a_producer_id_of_two_transactional_ids_is_reuse():
    h = clean()
    h.grants.append(Grant("other", 7, 2, 40.0))
    assert kinds(check(h)) == ["producer-id-reuse"]


def test_one_id_and_epoch_handed_out_twice_is_reuse():
    h = clean()
    h.grants.append(Grant("tx", 7, 1, 40.0))
    findings = check(h)
    assert kinds(findings) == ["producer-id-reuse"]
    assert "epoch 1" in findings[0].detail


def test_read_committed_seeing_an_aborted_record():
    h = clean()
    h.committed_log[1].append("t2")
    findings = check(h)
    assert kinds(findings) == ["aborted-visible"]
    assert "'t2'" in findings[0].detail


def test_read_committed_missing_a_committed_record_is_lost():
    h = clean()
    h.committed_log[0] = ["a0"]
    findings = check(h)
    assert kinds(findings) == ["lost"]
    assert "committed transaction" in findings[0].detail


def test_a_broker_that_failed_to_start():
    h = clean()
    h.starts.append(BrokerStart(2, 30.0, False, "exited with code 3: CORRUPT_MESSAGE"))
    findings = check(h)
    assert kinds(findings) == ["broker-start"]
    assert "CORRUPT_MESSAGE" in findings[0].detail


def test_a_value_never_sent_or_in_the_wrong_partition_is_a_phantom():
    h = clean()
    h.log[0].append((3, "nobody"))
    h.log[1].append((4, "b0"))  # refused value, sent to partition 0
    assert kinds(check(h)) == ["partial-failure", "phantom", "phantom"]


def test_a_run_that_could_not_be_read_back_is_unfinished_and_still_judged():
    h = clean()
    h.log, h.committed_log = {}, {}
    h.grants.append(Grant(None, 3, 0, 40.0))
    findings = check(h, finished=False)
    assert kinds(findings) == ["producer-id-reuse", "unfinished"]  # no "lost": nothing was read
