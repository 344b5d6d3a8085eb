"""Elections, ISR changes, fencing, controller failover and metadata propagation, on a
three-broker cluster in one process (``tests/cluster/harness.py``): an in-memory network
the test partitions and heals, and a manual clock it moves. The real-process SIGKILL
proofs stay in tests/replication."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from laketail.produce_path import PRODUCE_SCHEMA
from tests.cluster.harness import HEARTBEAT_MS, LAG_MS, SESSION_MS, Cluster, run_three


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": values}, schema=pa.schema([PRODUCE_SCHEMA.field("value")]))


def test_three_brokers_agree_on_one_controller_and_a_new_topic(tmp_path):
    async def scenario(c: Cluster) -> None:
        assert [b.broker_id for b in c.brokers.values() if b.cluster.is_controller] == [1]
        await c.brokers[2].create_topic("t", 3, 3)  # forwarded to the controller
        await c.until("every broker took up its part", lambda: c.converged("t", 3))
        version = c.controller().cluster.image.version
        assert all(b.cluster.image.version == version for b in c.brokers.values())
        for p in range(3):
            reg = c.registration("t", p)
            assert sorted(reg.replicas) == [1, 2, 3] and reg.isr == reg.replicas
            leaders = [b.broker_id for b in c.brokers.values() if b.cluster.replicas.leads("t", p)]
            assert leaders == [reg.leader]

    run_three(tmp_path, scenario)


async def _topic(c: Cluster, name: str, partitions: int = 1) -> None:
    await c.controller().create_topic(name, partitions, 3)
    await c.until(f"{name} taken up everywhere", lambda: c.converged(name, partitions))


def _leo(broker, topic: str, partition: int = 0) -> int:
    return broker.logs.get(topic, partition).log_end_offset


def test_an_acks_all_produce_returns_once_every_isr_member_has_it(tmp_path):
    async def scenario(c: Cluster) -> None:
        await _topic(c, "t")
        leader = c.leader("t")
        result = await leader.produce("t", _batch([b"a", b"b", b"c"]), acks="all")
        assert list(result.offsets) == [0, 1, 2]
        assert leader.logs.get("t", 0).high_watermark == 3
        for broker in c.brokers.values():  # the HW is the smallest LEO over the ISR
            assert _leo(broker, "t") == 3
        await c.until("the followers learn the HW", lambda: all(
            b.logs.get("t", 0).high_watermark == 3 for b in c.brokers.values()))

    run_three(tmp_path, scenario)


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_and_rejoins_when_caught_up(tmp_path):
    async def scenario(c: Cluster) -> None:
        await _topic(c, "t", 3)
        controller = c.controller().broker_id
        # A partition whose leader is not the controller, and its follower that is not
        # either: cut from the leader, that follower still heartbeats to the controller.
        p = next(p for p in range(3) if c.registration("t", p).leader != controller)
        reg = c.registration("t", p)
        lagging = next(r for r in reg.replicas if r not in (reg.leader, controller))
        leader = c.brokers[reg.leader]
        c.network.cuts.add(frozenset((lagging, reg.leader)))
        await leader.produce("t", _batch_to(p, [b"x"]), acks="1")

        await c.advance(LAG_MS - 1_000)
        c.check_isr()
        await c.settle()
        assert lagging in c.registration("t", p).isr, "not yet lagging for replica.lag.time.max.ms"
        epoch_before = c.registration("t", p).partition_epoch

        await c.advance(2_000)
        c.check_isr()
        await c.until("the ISR shrinks", lambda: lagging not in c.registration("t", p).isr)
        shrunk = c.registration("t", p)
        assert shrunk.leader == reg.leader and shrunk.leader_epoch == reg.leader_epoch
        assert shrunk.partition_epoch > epoch_before
        await c.until("the change reaches the follower cut off", lambda: (
            c.brokers[lagging].cluster.image.partitions[("t", p)].isr == shrunk.isr))
        assert leader.cluster.isr_shrinks >= 1

        c.network.heal()  # it fetches again, reaches the HW, and the leader asks to add it back
        await c.until("the ISR expands", lambda: lagging in c.registration("t", p).isr)
        assert _leo(c.brokers[lagging], "t", p) == _leo(leader, "t", p) == 1

    run_three(tmp_path, scenario)


def test_a_stalled_leader_that_lost_its_session_is_fenced_and_replaced(tmp_path):
    async def scenario(c: Cluster) -> None:
        await _topic(c, "t", 3)
        controller = c.controller().broker_id
        p = next(p for p in range(3) if c.registration("t", p).leader != controller)
        old = c.registration("t", p)
        cut_off = c.brokers[old.leader]
        await cut_off.produce("t", _batch_to(p, [b"acked"]), acks="all")

        c.network.isolated.add(old.leader)
        c.paused.add(old.leader)  # stalled: no round runs there (one that runs claims the controller, below)
        await c.advance(SESSION_MS - 2_000)
        assert not cut_off.cluster.fenced
        assert c.registration("t", p).leader == old.leader
        await c.advance(4_000)

        new = c.registration("t", p)
        assert new.leader not in (old.leader, -1) and new.leader in old.isr
        assert new.leader_epoch == old.leader_epoch + 1
        assert old.leader not in new.isr
        assert cut_off.cluster.fenced  # it heard from no controller for a session
        try:
            await cut_off.produce("t", _batch_to(p, [b"lost"]), acks="1")
        except Exception as exc:  # refused, not written
            assert type(exc).__name__ in ("NotLeaderOrFollower", "LeaderNotAvailable"), repr(exc)
        else:
            raise AssertionError("a fenced leader acknowledged a write")
        await c.until("the survivors converge", lambda: c.converged("t", 3))
        leader = c.brokers[new.leader]
        await leader.produce("t", _batch_to(p, [b"after"]), acks="all")
        assert _leo(leader, "t", p) == 2  # the acked record is kept, the refused one never was

        c.network.heal()
        c.paused.clear()
        await c.advance(HEARTBEAT_MS)
        await c.until("the old leader rejoins as a follower", lambda: c.converged("t", 3))
        assert not cut_off.cluster.fenced
        await c.until("it catches up", lambda: _leo(cut_off, "t", p) == 2)
        await c.until("and is back in the ISR", lambda: old.leader in c.registration("t", p).isr)

    run_three(tmp_path, scenario)


def test_a_stalled_controller_is_replaced_and_steps_down_when_it_wakes(tmp_path):
    async def scenario(c: Cluster) -> None:
        await _topic(c, "t", 3)
        old = c.controller()
        old_epoch = old.cluster.active_controller.epoch
        c.network.isolated.add(old.broker_id)
        c.paused.add(old.broker_id)
        await c.advance(SESSION_MS + 2 * HEARTBEAT_MS)

        new = c.controller()
        assert new.broker_id != old.broker_id and new.cluster.active_controller.epoch > old_epoch
        for p in range(3):  # what the old controller led moved to the others
            reg = c.registration("t", p)
            assert reg.leader not in (old.broker_id, -1) and old.broker_id not in reg.isr
        await c.until("the survivors converge", lambda: c.converged("t", 3))

        await new.create_topic("u", 1, 2)  # a new image reaches the other live broker
        await c.until("u taken up by the survivors", lambda: c.converged("u"))
        assert ("u", 0) not in old.cluster.image.partitions

        c.paused.clear()  # it wakes, still cut off: its tick's write is fenced by the new epoch
        await c.beat([old])
        assert not old.cluster.is_controller
        assert [b.broker_id for b in c.brokers.values() if b.cluster.is_controller] == [new.broker_id]

        c.network.heal()
        await c.advance(HEARTBEAT_MS)
        await c.until("the old controller follows the new one", lambda: c.converged("t", 3) and c.converged("u"))
        assert old.cluster.image.controller_id == new.broker_id

    run_three(tmp_path, scenario)


def test_a_running_controller_cut_off_from_every_broker_leaves_the_partitions_led(tmp_path):
    async def scenario(c: Cluster) -> None:
        await _topic(c, "t", 3)
        old = c.controller()
        c.network.isolated.add(old.broker_id)  # running, reaching the store, reaching no broker
        await c.advance(SESSION_MS + 2 * HEARTBEAT_MS)
        new = c.controller()
        assert new.broker_id != old.broker_id
        for p in range(3):
            assert c.registration("t", p).leader not in (old.broker_id, -1)
        assert not old.cluster.is_controller  # it stepped down at its epoch check, having written nothing

    run_three(tmp_path, scenario)


def _batch_to(partition: int, values: list[bytes]) -> pa.RecordBatch:
    schema = pa.schema([PRODUCE_SCHEMA.field("value"), PRODUCE_SCHEMA.field("partition")])
    return pa.RecordBatch.from_pydict({"value": values, "partition": [partition] * len(values)}, schema=schema)


def test_a_topic_created_through_a_deposed_controller_is_not_controller_and_leaves_nothing(tmp_path):
    """The old controller, woken while still cut off, takes a CreateTopics before its tick
    notices the new epoch: its write is fenced. That answered 500 UNKNOWN_SERVER_ERROR
    ("controller epoch is 4, not 3: deposed", seen with two brokers on a bucket) and left
    the topic in the catalog without partitions. Now it is NOT_CONTROLLER (retriable) and
    the catalog does not have it."""
    from laketail.errors import NotController

    async def scenario(c: Cluster) -> None:
        await _topic(c, "t", 1)
        old = c.controller()
        c.network.isolated.add(old.broker_id)
        c.paused.add(old.broker_id)
        await c.advance(SESSION_MS + 2 * HEARTBEAT_MS)
        new = c.controller()
        assert new.broker_id != old.broker_id
        c.paused.clear()
        assert old.cluster.is_controller  # it has not noticed yet
        with pytest.raises(NotController):
            await old.create_topic("late", 1, 1)
        assert not old.cluster.is_controller
        new.catalog.reload()  # the table as the store has it
        assert "late" not in {t.name for t in new.catalog.topics()}

    run_three(tmp_path, scenario)


def test_a_controller_deposed_while_it_had_nothing_to_write_steps_down_and_the_cluster_heals(tmp_path):
    """The old controller, cut off from every broker while they stall, declares them dead
    and writes that; they then wake and elect a new controller that takes it for dead.
    The old one has nothing left to write, so no write of its own is ever fenced: it stayed
    the controller in its own eyes, never heartbeat to the new one, and the partitions
    whose ISR it had shrunk to itself stayed offline for good (the short Jepsen run in CI:
    ``__consumer_offsets-1 has no leader`` for minutes after healing). Now a controller
    checks its epoch in the store every heartbeat interval and steps down when it was
    superseded."""

    async def scenario(c: Cluster) -> None:
        await _topic(c, "t", 3)
        old = c.controller()
        others = [b for b in c.brokers if b != old.broker_id]
        c.network.isolated.add(old.broker_id)  # running, reaching the store, reaching no broker
        c.paused.update(others)  # stalled: they claim nothing
        await c.advance(SESSION_MS + HEARTBEAT_MS)
        assert all(sorted(c.registration("t", p).isr) == [1, 2, 3] for p in range(3)), \
            "a controller hearing from no broker waits a session for a claim"
        await c.advance(SESSION_MS + HEARTBEAT_MS)  # then it takes them for dead: ISRs down to itself
        assert all(c.registration("t", p).isr == [old.broker_id] for p in range(3))

        c.paused.clear()  # they wake, still cut off from it, and elect one of themselves
        await c.advance(SESSION_MS + 2 * HEARTBEAT_MS, step_ms=HEARTBEAT_MS // 2)
        new = c.controller()
        assert new.broker_id != old.broker_id

        c.network.heal()
        await c.advance(3 * HEARTBEAT_MS)
        assert [b.broker_id for b in c.brokers.values() if b.cluster.is_controller] == [new.broker_id]

        async def rounds() -> None:
            await c.advance(HEARTBEAT_MS)
            c.check_isr()

        def healed() -> bool:
            regs = [c.registration("t", p) for p in range(3)]
            return all(r.leader != -1 and sorted(r.isr) == [1, 2, 3] for r in regs) and c.converged("t", 3)

        await c.until("every partition led and fully in sync again", healed, step=rounds, rounds=60)
        assert old.cluster.image.controller_id == new.broker_id

    run_three(tmp_path, scenario)


def test_isr_changes_sent_together_share_one_write_of_the_controller(tmp_path):
    """A broker back from a pause rejoins the ISR of every partition it follows, and each
    partition's leader sends its own AlterPartition. Written one by one (a full
    ``_system/replicas`` rewrite each, under the controller's lock), a hundred internal
    partitions kept the lock for seconds; a returning broker's heartbeat waited behind
    them past its timeout and the brokers took turns claiming the controller (the short
    Jepsen run). The changes decided while a write is under way now share the next one."""

    partitions = 24

    async def scenario(c: Cluster) -> None:
        await _topic(c, "t", partitions)
        controller = c.controller()
        away = next(b for b in c.brokers.values() if b is not controller)
        c.network.isolated.add(away.broker_id)
        c.paused.add(away.broker_id)
        await c.advance(SESSION_MS + HEARTBEAT_MS)
        assert all(away.broker_id not in c.registration("t", p).isr for p in range(partitions))

        c.network.heal()
        c.paused.clear()
        await c.beat()  # it heartbeats and is alive again (a write of its own)
        await c.until("it is alive to the controller", lambda: controller.cluster.active_controller.brokers[
            away.broker_id].alive)
        writes_before = DeltaTable(f"{c.root}/_system/replicas").version()
        await c.until("it is back in every ISR", lambda: all(
            away.broker_id in c.registration("t", p).isr for p in range(partitions)))
        writes = DeltaTable(f"{c.root}/_system/replicas").version() - writes_before
        assert writes <= partitions // 4, f"{writes} writes for {partitions} ISR expansions"
        await c.until("and every broker knows", lambda: c.converged("t", partitions))

    run_three(tmp_path, scenario)
