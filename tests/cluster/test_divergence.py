"""A follower whose log diverged from its leader's converges to a byte-identical copy
(Kafka's KIP-101/KIP-279/KIP-320 truncation by leader epoch).

The leader's side is :meth:`ReplicaManager.handle_fetch`'s divergence check, restated
in :func:`leader_answer`; the follower's side is the real
:meth:`ReplicaManager._apply_answer` (it uses nothing of the manager but the log), so a
fix there is what these tests see.

Histories: the leader's epochs are even, a stale follower's own epochs odd, so no epoch
was led by both (one leader per epoch, as the controller guarantees). A follower epoch
that lies between two of the leader's epochs means the two brokers took turns leading
without copying from each other: unclean elections. The follower must still converge.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laketail.clock import ManualClock
from laketail.cluster.replicas import ReplicaManager
from laketail.storage.partition_log import PartitionLog

from .support import append, frame_epochs, frames, log_bytes, open_log

MAX_FETCHES = 60


def leader_answer(leader: PartitionLog, fetch_offset: int, last_fetched_epoch: int) -> dict:
    """What ``handle_fetch`` answers a follower at ``fetch_offset`` whose last frame is
    in ``last_fetched_epoch`` (its diverging branch, or frames from ``fetch_offset``)."""
    answer: dict = {"topic": "t", "partition": 0, "error": None}
    if last_fetched_epoch >= 0:
        epoch, end = leader.end_offset_for_epoch(last_fetched_epoch)
        if epoch != last_fetched_epoch or end < fetch_offset:
            answer["diverging"] = {"epoch": epoch, "end_offset": end}
            answer["hot_start"] = leader.hot_start_offset
            return answer
    if fetch_offset > leader.log_end_offset:
        answer["diverging"] = {"epoch": leader.latest_epoch, "end_offset": leader.log_end_offset}
        return answer
    answer["data"] = leader.read_raw(fetch_offset, 1500)
    answer["hw"] = leader.high_watermark
    answer["log_start"] = leader.log_start_offset
    answer["leo"] = leader.log_end_offset
    return answer


async def follow(leader: PartitionLog, follower: PartitionLog) -> list[str]:
    """Fetch until the follower has everything; returns what each fetch did."""
    trail: list[str] = []
    for _ in range(MAX_FETCHES):
        fetch_offset, last_epoch = follower.log_end_offset, follower.latest_epoch
        answer = leader_answer(leader, fetch_offset, last_epoch)
        data = answer.pop("data", b"")
        step = f"fetch({fetch_offset}, epoch {last_epoch}) -> {answer.get('diverging') or len(data)}"
        try:
            await ReplicaManager._apply_answer(None, follower, answer, data)
        except Exception as exc:
            pytest.fail(
                f"the follower failed to apply {step}: {exc!r}\n"
                f"follower epochs {follower.epochs}, frames {_spans(follower)}\n"
                f"leader epochs {leader.epochs}, frames {_spans(leader)}\ntrail: {trail}"
            )
        trail.append(step)
        if "diverging" not in answer and not data:
            return trail
    pytest.fail(
        f"no convergence after {MAX_FETCHES} fetches\nfollower epochs {follower.epochs}, "
        f"frames {_spans(follower)}\nleader epochs {leader.epochs}, frames {_spans(leader)}\n"
        f"last fetches: {trail[-4:]}"
    )


def _spans(plog: PartitionLog) -> list[tuple[int, int, int]] | str:
    try:
        return [(h.base_offset, h.next_offset, h.leader_epoch) for h in frames(plog)]
    except OSError as exc:  # a segment closed under the log
        return f"unreadable: {exc!r}"


def assert_identical(leader: PartitionLog, follower: PartitionLog) -> None:
    assert follower.log_end_offset == leader.log_end_offset
    assert log_bytes(follower) == log_bytes(leader)
    assert frame_epochs(follower) == frame_epochs(leader)
    for epoch, _ in frame_epochs(leader):
        assert follower.end_offset_for_epoch(epoch) == leader.end_offset_for_epoch(epoch)
    assert follower.producer_state.snapshot() == leader.producer_state.snapshot()


async def lead(plog: PartitionLog, epoch: int, counts: list[int], tag: str) -> None:
    plog.assign_epoch(epoch)
    for i, count in enumerate(counts):
        await append(plog, count, epoch, tag=f"{tag}{epoch}.{i}-")


# -- histories written out ---------------------------------------------------------------------------


def test_a_follower_with_a_stale_suffix_truncates_it_and_copies_the_leader(tmp_path):
    clock = ManualClock()

    async def scenario():
        a, b = open_log(tmp_path / "a", clock), open_log(tmp_path / "b", clock)
        await lead(a, 0, [2, 2], "a")
        await follow(a, b)
        await lead(a, 0, [3], "a")  # [4, 7) never reached b
        await lead(b, 1, [1, 4], "b")  # b led epoch 1 (unclean), wrote [4, 9)
        await lead(a, 2, [2], "a")  # a leads again
        trail = await follow(a, b)
        assert trail[0] == "fetch(9, epoch 1) -> {'epoch': 0, 'end_offset': 7}"
        assert_identical(a, b)

    asyncio.run(scenario())


def test_a_follower_that_led_an_epoch_without_appending_rejoins(tmp_path):
    """a leads epoch 0 and b copies everything; a dies, b leads epoch 1 and appends
    nothing; b dies, a leads epoch 2; b comes back. b's log ends in epoch 1 (its
    assign_epoch), which a never had: a answers "epoch 0 ended at 4", b truncates to 4,
    which is its LEO, so truncate_to does nothing and b still says epoch 1 on the next
    fetch, forever (it never catches up and never rejoins the ISR)."""
    clock = ManualClock()

    async def scenario():
        a, b = open_log(tmp_path / "a", clock), open_log(tmp_path / "b", clock)
        await lead(a, 0, [2, 2], "a")
        await follow(a, b)
        await lead(b, 1, [], "b")
        await lead(a, 2, [1], "a")
        await follow(a, b)
        assert_identical(a, b)

    asyncio.run(scenario())


def test_a_follower_with_two_stale_epochs_around_one_of_the_leaders_converges(tmp_path):
    """a: epoch 0 [0, 3) [3, 6), epoch 2 [6, 8), leads epoch 4. b: copied [0, 3), led
    epoch 1 [3, 10) and epoch 3 [10, 12) (unclean elections each time). b asks about
    epoch 3; a answers "epoch 2 ended at 8"; the follower truncates to min(8, its end of
    epoch 1 = 10) = 8, inside its frame [3, 10). Kafka's follower, when it does not have
    the epoch the leader answered with, truncates to its own end of the largest epoch
    below it (10) and asks again."""
    clock = ManualClock()

    async def scenario():
        a, b = open_log(tmp_path / "a", clock), open_log(tmp_path / "b", clock)
        await lead(a, 0, [3], "a")
        await follow(a, b)
        await lead(a, 0, [3], "a")
        await lead(b, 1, [7], "b")
        await lead(a, 2, [2], "a")
        await lead(b, 3, [2], "b")
        await lead(a, 4, [1], "a")
        await follow(a, b)
        assert_identical(a, b)

    asyncio.run(scenario())


def test_a_follower_whose_every_epoch_is_newer_than_the_leaders_answer_starts_over(tmp_path):
    """b started empty and led epoch 1 (unclean) with [0, 1) [1, 3); a, which had [0, 1)
    in epoch 0, leads epoch 2. a answers b's epoch 1 with "epoch 0 ended at 1". b has no
    epoch at or below 0 (``end_offset_for_epoch(0) == (-1, -1)``), so nothing it holds is
    the leader's: it must drop everything from its first epoch's start (0). It truncates
    to the leader's end (1) instead, keeps its own record 0 and asks about epoch 1 again,
    forever."""
    clock = ManualClock()

    async def scenario():
        a, b = open_log(tmp_path / "a", clock), open_log(tmp_path / "b", clock)
        await lead(a, 0, [1], "a")
        await lead(b, 1, [1, 2], "b")
        await lead(a, 2, [1], "a")
        await follow(a, b)
        assert_identical(a, b)

    asyncio.run(scenario())


# -- random histories ----------------------------------------------------------------------------------

batches = st.lists(st.integers(1, 4), min_size=0, max_size=3)


@st.composite
def histories(draw):
    """The leader's terms (even epochs), how many of its frames the follower copied,
    and the follower's own terms (odd epochs above the last one it copied)."""
    leader_terms, epoch = [], 0
    for _ in range(draw(st.integers(1, 4))):
        epoch += 2 * draw(st.integers(0 if not leader_terms else 1, 2))
        leader_terms.append((epoch, draw(batches)))
    frames_written = sum(len(b) for _, b in leader_terms)
    copied = draw(st.integers(0, frames_written))
    follower_terms = [(2 * draw(st.integers(0, 5)) + 1, draw(batches)) for _ in range(draw(st.integers(0, 3)))]
    return leader_terms, copied, follower_terms


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_any_divergent_follower_ends_byte_identical_to_its_leader(tmp_path_factory, history):
    leader_terms, copied, follower_terms = history
    root = tmp_path_factory.mktemp("diverge")
    clock = ManualClock()

    async def scenario():
        a, b = open_log(root / "a", clock), open_log(root / "b", clock)
        for epoch, counts in leader_terms:
            await lead(a, epoch, counts, "a")
        heads = frames(a)
        cut = heads[copied].base_offset if copied < len(heads) else a.log_end_offset
        while b.log_end_offset < cut:  # b copied the first `copied` frames, then fell behind
            b.append_raw_sync(a.read_raw(b.log_end_offset, 1))
        last_copied = b.latest_epoch
        for epoch, counts in sorted(follower_terms):
            if epoch > max(last_copied, b.latest_epoch):
                await lead(b, epoch, counts, "b")
        newest = max(a.latest_epoch, b.latest_epoch)
        await lead(a, newest + 2 - newest % 2, [1], "a")  # a is the current leader
        await follow(a, b)
        assert_identical(a, b)
        a.set_high_watermark(a.log_end_offset)
        await follow(a, b)  # nothing more to do
        assert b.high_watermark == a.high_watermark

    asyncio.run(scenario())
