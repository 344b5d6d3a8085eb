"""Coordinator deadlines on a timer over the injected clock (``coordinator/timer.py``):
the timer itself, and the group coordinator's session and rebalance deadlines firing on
a ``ManualClock`` (no sleeping, no broker)."""

import asyncio

import pytest

from laketail.clock import ManualClock
from laketail.coordinator.fakes import InMemoryLog
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import OffsetStore
from laketail.coordinator.timer import CoordinatorTimer
from laketail.errors import UnknownMemberId


def test_due_tasks_run_in_deadline_order_and_replaced_or_cancelled_ones_do_not() -> None:
    clock = ManualClock()
    timer = CoordinatorTimer(clock)
    ran: list[str] = []
    timer.schedule("b", 2.0, lambda: ran.append("b"))
    timer.schedule("a", 1.0, lambda: ran.append("a"))
    timer.schedule("c", 3.0, lambda: ran.append("c-old"))
    timer.schedule("c", 2.5, lambda: ran.append("c"))  # replaces c's task
    timer.schedule("d", 1.5, lambda: ran.append("d"))
    timer.cancel("d")
    assert timer.poll() == 0 and ran == []
    clock.advance(1_000)
    assert timer.poll() == 1 and ran == ["a"]
    clock.advance(2_000)
    assert timer.poll() == 2 and ran == ["a", "b", "c"]
    assert len(timer) == 0 and timer.deadline("c") is None


def test_a_task_that_puts_itself_back_runs_once_per_poll() -> None:
    clock = ManualClock()
    timer = CoordinatorTimer(clock)
    runs = []

    def again() -> None:
        runs.append(clock.monotonic())
        timer.schedule("k", clock.monotonic(), again)  # due at once: waits for the next poll

    timer.schedule("k", 0.0, again)
    assert timer.poll() == 1
    assert timer.poll() == 1
    assert runs == [0.0, 0.0]


def test_an_operation_that_raises_does_not_stop_the_others() -> None:
    clock = ManualClock()
    timer = CoordinatorTimer(clock)
    ran = []
    timer.schedule("bad", 0.0, lambda: 1 / 0)
    timer.schedule("good", 0.0, lambda: ran.append(1))
    assert timer.poll() == 2 and ran == [1]


def _groups(clock: ManualClock) -> GroupCoordinator:
    log = InMemoryLog()
    log.add_topic("t", 2)
    offsets = OffsetStore(log, clock, num_partitions=1, replication_factor=1)
    return GroupCoordinator(log, offsets, clock, initial_rebalance_delay_ms=0)


def test_a_silent_member_is_removed_when_its_session_deadline_fires() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        groups = _groups(clock)
        joined = await groups.join("g", "", topics=["t"], session_timeout_ms=10_000)
        key = ("session", "g", joined.member_id)
        assert groups.timer.deadline(key) == clock.monotonic() + 10.0

        clock.advance(6_000)
        groups.heartbeat("g", joined.generation_id, joined.member_id)  # heard from: 10 s from now
        clock.advance(6_000)
        groups.tick()  # the first deadline came due; the task moved to the heartbeat's
        assert joined.member_id in groups.group("g").members
        assert groups.timer.deadline(key) == clock.monotonic() + 4.0

        clock.advance(4_000)
        groups.tick()  # exactly session.timeout.ms of silence: not longer
        assert joined.member_id in groups.group("g").members
        clock.advance(1)
        groups.tick()
        assert groups.group("g").members == {}
        assert groups.group("g").state == "Empty"
        with pytest.raises(UnknownMemberId):
            groups.heartbeat("g", joined.generation_id, joined.member_id)
        assert len(groups.timer) == 0

    asyncio.run(scenario())


def test_a_rebalance_completes_without_the_member_that_missed_its_deadline() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        groups = _groups(clock)
        a = await groups.join("g", "", client_id="a", topics=["t"], session_timeout_ms=60_000,
                              rebalance_timeout_ms=20_000)
        b_join = asyncio.ensure_future(groups.join("g", "", client_id="b", topics=["t"],
                                                   session_timeout_ms=60_000, rebalance_timeout_ms=20_000))
        await asyncio.sleep(0)  # b joined: the group rebalances and waits for a to rejoin
        assert groups.group("g").state == "PreparingRebalance"
        assert groups.timer.deadline(("rebalance", "g")) == clock.monotonic() + 20.0

        clock.advance(19_999)
        groups.tick()
        assert not b_join.done()
        clock.advance(1)
        groups.tick()  # the rebalance deadline fires: a did not rejoin and is removed
        b = await b_join
        assert b.generation_id == a.generation_id + 1
        assert sorted(groups.group("g").members) == [b.member_id]
        assert groups.timer.deadline(("rebalance", "g")) is None

    asyncio.run(scenario())


def test_a_loaded_open_transaction_keeps_its_deadline() -> None:
    """The timeout of a transaction is set when its Ongoing state is replayed: after a
    write, and at load (from the start time in the record), so another coordinator that
    loads it aborts it at the same moment."""
    from laketail.coordinator.fakes import InMemoryProducerIdBlocks
    from laketail.coordinator.transactions import TransactionCoordinator

    def coordinator(log: InMemoryLog, clock: ManualClock) -> TransactionCoordinator:
        offsets = OffsetStore(log, clock, num_partitions=1, replication_factor=1)
        groups = GroupCoordinator(log, offsets, clock, initial_rebalance_delay_ms=0)
        return TransactionCoordinator(log, log, groups, offsets, clock, num_partitions=1, replication_factor=1,
                                      producer_ids=InMemoryProducerIdBlocks())

    async def scenario() -> None:
        log, clock = InMemoryLog(), ManualClock()
        log.add_topic("t", 1)
        live = coordinator(log, clock)
        pid, epoch = await live.init_producer_id("app", timeout_ms=10_000)
        await live.add_partitions("app", pid, epoch, [("t", 0)])
        clock.advance(4_000)

        loaded = coordinator(log, clock)  # another coordinator takes over 4 s in
        await loaded.load()
        assert loaded.describe("app").state == "Ongoing"
        clock.advance(6_000)
        assert loaded.tick() == []  # exactly transaction.timeout.ms open: not longer
        clock.advance(1)
        assert loaded.tick() == ["app"]
        assert await loaded.expire() == 1
        assert loaded.describe("app").state == "CompleteAbort"
        assert loaded.describe("app").producer_epoch == epoch + 1
        assert len(loaded.timer) == 0

    asyncio.run(scenario())
