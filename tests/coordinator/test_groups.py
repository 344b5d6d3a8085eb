"""The group coordinator on an in-memory coordinator log (``coordinator.fakes``), driven
by a manual clock so session timeouts are tested without sleeping; the lag report, which
reads a real partition's records, over a real broker (real logs, real Delta tables)."""

import asyncio

import pytest

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.coordinator.fakes import InMemoryLog
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import CommittedOffset, OffsetStore, java_string_hash, partition_for_group
from laketail.errors import GroupIdNotFound, IllegalGeneration, NonEmptyGroup, RebalanceInProgress, UnknownMemberId


def run(coro):
    return asyncio.run(coro)


async def _join_together(broker, clock, count, **kwargs):
    """Members joining an empty group together: the initial rebalance delay gathers them."""
    tasks = [asyncio.create_task(broker.groups.join("g", "", **kwargs)) for _ in range(count)]
    await asyncio.sleep(0.01)
    clock.advance(60)
    broker.groups.tick()
    return await asyncio.gather(*tasks)


class _Coordinators:
    """The offset store and group coordinator wired as the broker wires them, on ``log``."""

    def __init__(self, log, clock, delay_ms):
        self.log = log
        self.offsets = OffsetStore(log, clock, num_partitions=4, replication_factor=1)
        self.groups = GroupCoordinator(
            log, self.offsets, clock, min_session_timeout_ms=100, initial_rebalance_delay_ms=delay_ms
        )

    async def create_topic(self, name, partitions):
        self.log.add_topic(name, partitions)

    async def close(self):
        pass


async def _coordinators(clock, delay_ms=50, log=None):
    """Coordinators on a fresh log, or loaded from ``log`` (a restart)."""
    parts = _Coordinators(log if log is not None else InMemoryLog(), clock, delay_ms)
    await parts.offsets.load()
    return parts


async def _broker(tmp_path, clock, delay_ms=50):
    settings = load_settings(
        None, env={}, data=str(tmp_path), group_initial_rebalance_delay_ms=delay_ms,
        group_min_session_timeout_ms=100, offsets_topic_num_partitions=4,
    )
    broker = Broker(settings, clock=clock)
    await broker.start()
    return broker


def test_java_string_hash_matches_java():
    # Values of "x".hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648  # Java's famous MIN_VALUE hash
    assert partition_for_group("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert 0 <= partition_for_group("anything", 50) < 50


@pytest.mark.parametrize("members,partitions", [(2, 3), (5, 4)])
def test_members_share_partitions_disjointly_and_extras_idle(members, partitions):
    clock = ManualClock()

    async def scenario():
        broker = await _coordinators(clock)
        await broker.create_topic("orders", partitions)
        joins = await _join_together(
            broker, clock, members, topics=["orders"], strategies=["range"], session_timeout_ms=1000
        )
        assert len({j.generation_id for j in joins}) == 1
        assignments = [broker.groups.sync("g", j.generation_id, j.member_id) for j in joins]
        flat = sorted(tp for a in assignments for tp in a)
        assert flat == [("orders", p) for p in range(partitions)]
        assert sum(1 for a in assignments if not a) == max(members - partitions, 0)
        await broker.close()

    run(scenario())


def test_silent_member_is_removed_and_its_partitions_move():
    clock = ManualClock()

    async def scenario():
        broker = await _coordinators(clock)
        await broker.create_topic("t", 4)
        a, b = await _join_together(
            broker, clock, 2, topics=["t"], strategies=["range"], session_timeout_ms=1000
        )
        gen = a.generation_id
        assert len(broker.groups.sync("g", gen, a.member_id)) == 2
        clock.advance(600)
        broker.groups.heartbeat("g", gen, a.member_id)  # a stays alive, b goes silent
        clock.advance(600)
        broker.groups.tick()
        group = broker.groups.group("g")
        assert b.member_id not in group.members
        with pytest.raises(RebalanceInProgress):
            broker.groups.heartbeat("g", gen, a.member_id)
        rejoined = await broker.groups.join(
            "g", a.member_id, topics=["t"], strategies=["range"], session_timeout_ms=1000
        )
        assert rejoined.generation_id == gen + 1
        assert broker.groups.sync("g", rejoined.generation_id, a.member_id) == [("t", p) for p in range(4)]
        with pytest.raises(UnknownMemberId):
            broker.groups.heartbeat("g", rejoined.generation_id, b.member_id)
        await broker.close()

    run(scenario())


def test_commit_with_a_stale_generation_is_rejected_and_offsets_survive_restart():
    clock = ManualClock()

    async def scenario():
        broker = await _coordinators(clock)
        await broker.create_topic("t", 2)
        (a,) = await _join_together(broker, clock, 1, topics=["t"], session_timeout_ms=1000)
        gen = a.generation_id
        await broker.groups.commit(
            "g", {("t", 0): CommittedOffset(5, "m", 1)}, generation_id=gen, member_id=a.member_id
        )
        with pytest.raises(IllegalGeneration):
            await broker.groups.commit(
                "g", {("t", 0): CommittedOffset(9)}, generation_id=gen - 1, member_id=a.member_id
            )
        with pytest.raises(UnknownMemberId):
            await broker.groups.commit("g", {("t", 0): CommittedOffset(9)}, generation_id=gen, member_id="nobody")
        assert broker.groups.committed("g", [("t", 0), ("t", 1)]) == {
            ("t", 0): CommittedOffset(5, "m", 1), ("t", 1): None,
        }
        await broker.close()
        again = await _coordinators(clock, log=broker.log)
        assert again.groups.committed("g", [("t", 0)])[("t", 0)].offset == 5
        await again.close()

    run(scenario())


def test_cooperative_sticky_moves_partitions_in_two_generations():
    clock = ManualClock()

    async def scenario():
        broker = await _coordinators(clock)
        await broker.create_topic("t", 4)
        (a,) = await _join_together(
            broker, clock, 1, topics=["t"], strategies=["cooperative-sticky"], session_timeout_ms=1000
        )
        assert len(broker.groups.sync("g", a.generation_id, a.member_id)) == 4
        join_b = asyncio.create_task(
            broker.groups.join("g", "", topics=["t"], strategies=["cooperative-sticky"], session_timeout_ms=1000)
        )
        await asyncio.sleep(0)
        a2 = await broker.groups.join(
            "g", a.member_id, topics=["t"], strategies=["cooperative-sticky"], session_timeout_ms=1000
        )
        b = await join_b
        kept = broker.groups.sync("g", a2.generation_id, a.member_id)
        assert len(kept) == 2 and broker.groups.sync("g", b.generation_id, b.member_id) == []
        # Everyone synced: the follow-up rebalance hands the revoked partitions over.
        a3, b3 = await asyncio.gather(
            broker.groups.join(
                "g", a.member_id, topics=["t"], strategies=["cooperative-sticky"], session_timeout_ms=1000
            ),
            broker.groups.join(
                "g", b.member_id, topics=["t"], strategies=["cooperative-sticky"], session_timeout_ms=1000
            ),
        )
        assert broker.groups.sync("g", a3.generation_id, a.member_id) == kept
        assert len(broker.groups.sync("g", b3.generation_id, b.member_id)) == 2
        await broker.close()

    run(scenario())


def test_lag_follows_commits_and_grades_status(tmp_path):
    from laketail.coordinator.lag import group_lags, lag_status

    clock = ManualClock()

    async def scenario():
        import pyarrow as pa

        broker = await _broker(tmp_path, clock)
        await broker.create_topic("t", 2)
        batch = pa.RecordBatch.from_pydict({"value": [b"v"] * 150, "partition": pa.array([0] * 150, pa.int32())})
        await broker.produce("t", batch)
        await broker.groups.commit("g", {("t", 0): CommittedOffset(20), ("t", 1): CommittedOffset(0)})
        clock.advance(5_000)
        lags = {(lag.topic, lag.partition): lag for lag in await group_lags(broker, "g")}
        assert (lags[("t", 0)].current_offset, lags[("t", 0)].log_end_offset, lags[("t", 0)].lag) == (20, 150, 130)
        assert lags[("t", 0)].time_lag_ms == 5_000
        assert lags[("t", 0)].status == "caution"
        assert (lags[("t", 1)].lag, lags[("t", 1)].time_lag_ms, lags[("t", 1)].status) == (0, 0, "OK")
        await broker.close()

    run(scenario())
    assert [lag_status(n) for n in (0, 99, 100, 999, 1000, 9999, 10000)] == [
        "OK", "OK", "caution", "caution", "warning", "warning", "critical"]


def test_a_second_join_supersedes_the_pending_one():
    clock = ManualClock()

    async def scenario():
        broker = await _coordinators(clock, delay_ms=1_000)
        await broker.create_topic("t", 1)
        first = asyncio.create_task(broker.groups.join("g", "", topics=["t"], session_timeout_ms=1000))
        await asyncio.sleep(0.01)
        (member_id,) = broker.groups.group("g").members
        second = asyncio.create_task(broker.groups.join("g", member_id, topics=["t"], session_timeout_ms=1000))
        await asyncio.sleep(0.01)
        with pytest.raises(RebalanceInProgress):
            await first
        clock.advance(1_001)
        broker.groups.tick()
        assert (await second).member_id == member_id
        await broker.close()

    run(scenario())


def test_delete_refuses_a_group_with_members_and_forgets_an_empty_one_for_good():
    clock = ManualClock()

    async def scenario():
        broker = await _coordinators(clock)
        await broker.create_topic("t", 1)
        (a,) = await _join_together(broker, clock, 1, topics=["t"], session_timeout_ms=1000)
        await broker.groups.commit("g", {("t", 0): CommittedOffset(5)}, generation_id=a.generation_id,
                                   member_id=a.member_id)
        with pytest.raises(NonEmptyGroup):
            await broker.groups.delete("g")
        broker.groups.leave("g", a.member_id)
        await broker.groups.delete("g")
        assert [g.group_id for g in broker.groups.list_groups()] == []
        assert broker.groups.describe("g").state == "Dead"
        with pytest.raises(GroupIdNotFound):
            await broker.groups.delete("g")
        again = await _coordinators(clock, log=broker.log)  # the tombstones hold after a restart
        assert again.groups.committed("g", [("t", 0)]) == {("t", 0): None}

    run(scenario())
