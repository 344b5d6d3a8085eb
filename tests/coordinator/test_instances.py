"""Consumer instances (the broker-side consumers behind v2's /consumers) over a real
broker: real logs, a real group coordinator, a manual clock for idle expiry."""

import asyncio

import pyarrow as pa
import pytest

from laketail.api.consumer_instances import ConsumerInstances
from laketail.api.services import Services
from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.coordinator.instance_config import (
    ConsumerInstanceExists,
    ConsumerInstanceNotFound,
    IllegalConsumerState,
    InstanceConfig,
    InvalidConsumerConfig,
)
from laketail.errors import NoOffsetForPartition, RebalanceInProgress, UnknownMemberId


def run(coro):
    return asyncio.run(coro)


async def _broker(tmp_path, clock):
    settings = load_settings(
        None, env={}, data=str(tmp_path), group_initial_rebalance_delay_ms=0,
        group_min_session_timeout_ms=100, offsets_topic_num_partitions=4,
    )
    broker = Broker(settings, clock=clock)
    await broker.start()
    return broker


async def _produce(broker, topic, partition, values):
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array(values, pa.binary()),
        "partition": pa.array([partition] * len(values), pa.int32()),
    })
    await broker.produce(topic, batch)


def _values(batches):
    return [v for _, table in batches for v in table.column("value").to_pylist()]


async def _drain(instance, rounds=20):
    out = []
    for _ in range(rounds):
        got = await instance.records(timeout_ms=200)
        if not got:
            break
        out.extend(_values(got))
    return out


def test_config_takes_v2_keys_and_refuses_bad_values():
    config = InstanceConfig.from_request({
        "name": "c", "format": "JSON", "auto.offset.reset": "earliest", "auto.commit.enable": "false",
        "fetch.min.bytes": "10", "consumer.request.timeout.ms": 500, "isolation.level": "read_uncommitted",
    })
    assert config == InstanceConfig("json", "earliest", False, 10, 500, "read_uncommitted")
    assert InstanceConfig.from_request({}) == InstanceConfig()
    assert InstanceConfig.from_request({"format": "AVRO"}).format == "avro"  # decoded by its schema id
    for bad in ({"format": "cbor"}, {"auto.offset.reset": "sometimes"}, {"auto.commit.enable": "yes"},
                {"fetch.min.bytes": "lots"}, {"enable.auto.commit": "false"}):
        with pytest.raises(InvalidConsumerConfig) as err:
            InstanceConfig.from_request(bad)
        assert err.value.rest_code == 42204


def test_commit_stores_offset_plus_one_and_a_new_instance_resumes(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _broker(tmp_path, clock)
        await broker.create_topic("t", 2)
        await _produce(broker, "t", 0, [b"a0", b"a1", b"a2"])
        await _produce(broker, "t", 1, [b"b0", b"b1"])
        instances = ConsumerInstances(broker, Services.of(broker))
        config = InstanceConfig(auto_offset_reset="earliest", auto_commit_enable=False)
        first = instances.create("g", config, "first")
        with pytest.raises(ConsumerInstanceExists):
            instances.create("g", config, "first")
        await first.subscribe(["t"])
        assert sorted(await _drain(first)) == [b"a0", b"a1", b"a2", b"b0", b"b1"]
        await first.commit([("t", 0, 1, "processed a1")])  # v2: the last record processed
        assert broker.offsets.committed("g", ("t", 0)).offset == 2
        assert broker.offsets.committed("g", ("t", 0)).metadata == "processed a1"
        assert broker.offsets.committed("g", ("t", 1)) is None
        await instances.delete("g", "first")
        with pytest.raises(ConsumerInstanceNotFound):
            instances.get("g", "first")

        second = instances.create("g", config, "second")
        await second.subscribe(["t"])
        assert sorted(await _drain(second)) == [b"a2", b"b0", b"b1"]
        await second.commit()  # no offsets: every position
        assert broker.groups.committed("g", [("t", 0), ("t", 1)]) == {
            ("t", 0): broker.offsets.committed("g", ("t", 0)),
            ("t", 1): broker.offsets.committed("g", ("t", 1)),
        }
        assert broker.offsets.committed("g", ("t", 0)).offset == 3
        assert broker.offsets.committed("g", ("t", 1)).offset == 2
        await instances.close()
        assert not broker.groups.group("g").members
        await broker.close()

    run(scenario())


def test_auto_offset_reset_latest_and_none(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _broker(tmp_path, clock)
        await broker.create_topic("t", 1)
        await _produce(broker, "t", 0, [b"old"])
        instances = ConsumerInstances(broker, Services.of(broker))
        latest = instances.create("g-latest", InstanceConfig(auto_offset_reset="latest"), "c")
        await latest.subscribe(["t"])
        assert await latest.records(timeout_ms=100) == []
        await _produce(broker, "t", 0, [b"new"])
        assert _values(await latest.records(timeout_ms=2000)) == [b"new"]

        strict = instances.create("g-none", InstanceConfig(auto_offset_reset="none"), "c")
        await strict.subscribe(["t"])
        with pytest.raises(NoOffsetForPartition):
            await strict.records(timeout_ms=1000)
        await strict.seek_to([("t", 0)], "beginning")  # a position makes it readable
        assert _values(await strict.records(timeout_ms=1000)) == [b"old", b"new"]
        await instances.close()
        await broker.close()

    run(scenario())


def test_manual_assignment_and_subscription_are_mutually_exclusive(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _broker(tmp_path, clock)
        await broker.create_topic("t", 2)
        await _produce(broker, "t", 1, [b"x", b"y"])
        instances = ConsumerInstances(broker, Services.of(broker))
        manual = instances.create("g", InstanceConfig(auto_offset_reset="earliest"), "manual")
        await manual.assign([("t", 1)])
        with pytest.raises(IllegalConsumerState) as err:
            await manual.subscribe(["t"])
        assert err.value.rest_code == 40903
        assert manual.assignment == [("t", 1)]
        await manual.seek([("t", 1, 1)])
        assert _values(await manual.records(timeout_ms=500)) == [b"y"]
        with pytest.raises(IllegalConsumerState):
            await manual.seek([("t", 0, 0)])  # not assigned
        await manual.commit()  # standalone: the group has no members
        assert broker.offsets.committed("g", ("t", 1)).offset == 2
        await manual.unsubscribe()
        await manual.subscribe(["t"])  # allowed once the assignment is gone
        await instances.close()
        await broker.close()

    run(scenario())


def test_instances_share_partitions_and_the_idle_one_leaves(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _broker(tmp_path, clock)
        await broker.create_topic("t", 3)
        instances = ConsumerInstances(broker, Services.of(broker), instance_timeout_ms=10_000)
        a = instances.create("g", InstanceConfig(), "a")
        b = instances.create("g", InstanceConfig(), "b")
        await a.subscribe(["t"])
        await b.subscribe(["t"])

        async def settled(expect_members):
            for _ in range(200):
                await instances.tick()
                await asyncio.sleep(0.01)
                group = broker.groups.group("g")
                live = [i for i in (a, b) if not i.closed]
                if (group.state == "Stable" and len(group.members) == expect_members
                        and all(i.generation_id == group.generation_id for i in live)):
                    return [i.assignment for i in live]
            raise AssertionError("the group never settled")

        first, second = await settled(2)
        assert sorted(first + second) == [("t", 0), ("t", 1), ("t", 2)]
        assert not set(first) & set(second)

        clock.advance(6_000)
        a.touch()  # a stays busy, b goes quiet
        clock.advance(6_000)
        (only,) = await settled(1)
        assert b.closed and only == [("t", 0), ("t", 1), ("t", 2)]
        with pytest.raises(ConsumerInstanceNotFound):
            instances.get("g", "b")
        await instances.close()
        await broker.close()

    run(scenario())


def test_a_stale_member_is_told_to_rejoin(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _broker(tmp_path, clock)
        await broker.create_topic("t", 2)
        instances = ConsumerInstances(broker, Services.of(broker))
        a = instances.create("g", InstanceConfig(), "a")
        await a.subscribe(["t"])
        await a.records(timeout_ms=500)
        gen = a.generation_id
        # a /v1 member arrives: a learns it must rejoin from its next heartbeat
        joining = asyncio.create_task(broker.groups.join("g", "", topics=["t"], strategies=["range"],
                                                         session_timeout_ms=1000))
        await asyncio.sleep(0.01)
        with pytest.raises(RebalanceInProgress):
            broker.groups.heartbeat("g", gen, a.member_id)
        await instances.tick()
        other = await joining
        assert other.generation_id == gen + 1
        for _ in range(100):
            if a.generation_id == gen + 1:
                break
            await asyncio.sleep(0.01)
        assert a.generation_id == gen + 1 and len(a.assignment) == 1
        forgotten = a.member_id
        broker.groups.leave("g", forgotten)  # the coordinator forgets a
        with pytest.raises(UnknownMemberId):
            broker.groups.heartbeat("g", a.generation_id, forgotten)
        await instances.tick()  # a notices: its partitions are lost, it joins again
        assert a.assignment == [] and a.member_id == ""
        await asyncio.sleep(0.01)  # a's join reaches the coordinator, then the other member rejoins
        again = await broker.groups.join("g", other.member_id, topics=["t"], strategies=["range"],
                                         session_timeout_ms=1000)
        for _ in range(100):
            if a.member_id:
                break
            await asyncio.sleep(0.01)
        assert a.member_id not in ("", forgotten) and a.generation_id == again.generation_id
        assert len(a.assignment) == 1
        await instances.close()
        await broker.close()

    run(scenario())


def test_a_subscribed_topic_that_appears_later_is_assigned(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _broker(tmp_path, clock)
        instances = ConsumerInstances(broker, Services.of(broker))
        early = instances.create("g", InstanceConfig(auto_offset_reset="earliest"), "early")
        await early.subscribe(["later"])
        assert await early.records(timeout_ms=100) == []
        assert early.member_id and early.assignment == []
        await broker.create_topic("later", 2)
        await _produce(broker, "later", 1, [b"hello"])
        broker.groups.tick()  # the coordinator notices the new topic and rebalances
        await instances.tick()  # the instance learns it from its heartbeat and rejoins
        assert _values(await early.records(timeout_ms=2000)) == [b"hello"]
        assert early.assignment == [("later", 0), ("later", 1)]
        await instances.close()
        await broker.close()

    run(scenario())


def test_unsubscribing_while_the_join_is_in_flight_leaves_nothing_behind(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _broker(tmp_path, clock)
        await broker.create_topic("t", 2)
        other = await broker.groups.join("g", "", topics=["t"], strategies=["range"], session_timeout_ms=1000)
        instances = ConsumerInstances(broker, Services.of(broker))
        late = instances.create("g", InstanceConfig(), "late")
        await late.subscribe(["t"])  # its join waits for the other member to rejoin
        await asyncio.sleep(0.01)
        await late.unsubscribe()
        await broker.groups.join("g", other.member_id, topics=["t"], strategies=["range"], session_timeout_ms=1000)
        for _ in range(100):
            if len(broker.groups.group("g").members) == 1 and late._join_task is None:
                break
            await asyncio.sleep(0.01)
        assert list(broker.groups.group("g").members) == [other.member_id]
        assert late.assignment == [] and late.member_id == ""
        await instances.close()
        await broker.close()

    run(scenario())
