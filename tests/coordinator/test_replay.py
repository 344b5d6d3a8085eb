"""The coordinators' state changes only through ``replay(record)``: whatever sequence of
requests the live path served, loading the records it wrote (a restart, or another
broker taking the coordinators over) yields the same state. On the in-memory
coordinator log (``coordinator.fakes``) and a ``ManualClock``: milliseconds per case."""

import asyncio

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from laketail.clock import ManualClock
from laketail.coordinator.fakes import InMemoryLog, InMemoryProducerIdBlocks
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import (
    OFFSETS_TOPIC,
    CommittedOffset,
    OffsetRecord,
    OffsetShard,
    OffsetStore,
)
from laketail.coordinator.transactions import TXN_TOPIC, TransactionCoordinator, decode_key
from laketail.errors import LaketailError, NotCoordinator

GROUPS = st.sampled_from(["g1", "g2", "g3", "orders"])
TPS = st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 1))

OFFSET_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), GROUPS, st.dictionaries(TPS, st.integers(0, 1000), min_size=1, max_size=3)),
        st.tuples(st.just("delete"), GROUPS, st.lists(TPS, max_size=3)),
        st.tuples(st.just("expire"), st.integers(0, 5_000), st.just(None)),
    ),
    max_size=25,
)


def _offset_log() -> InMemoryLog:
    log = InMemoryLog()
    log.add_topic("t", 2)
    log.add_topic("u", 2)
    return log


def _all_offsets(store: OffsetStore) -> dict:
    return {g: store.group_offsets(g) for g in store.groups()}


@settings(max_examples=40, deadline=None)
@given(OFFSET_OPS)
def test_loading_the_offsets_written_gives_the_live_state(ops) -> None:
    async def scenario() -> None:
        log, clock = _offset_log(), ManualClock()
        live = OffsetStore(log, clock, num_partitions=3, replication_factor=1)
        model: dict[str, dict] = {}  # group -> tp -> (offset, commit timestamp), as Kafka's semantics say
        for op, a, b in ops:
            clock.advance(1_000)
            now = clock.now_ms()
            if op == "commit":
                await live.commit(a, {tp: CommittedOffset(o) for tp, o in b.items()})
                model.setdefault(a, {}).update({tp: (o, now) for tp, o in b.items()})
            elif op == "delete":
                await live.delete(a, b)
                for tp in b:
                    model.get(a, {}).pop(tp, None)
            else:  # no group is active: offsets not committed for longer than ``a`` ms go
                await live.expire(now, a, set())
                model = {g: {tp: (o, ts) for tp, (o, ts) in offs.items() if now - ts <= a}
                         for g, offs in model.items()}
            model = {g: offs for g, offs in model.items() if offs}
        assert {g: {tp: (c.offset, c.commit_timestamp_ms) for tp, c in offs.items()}
                for g, offs in _all_offsets(live).items()} == model

        loaded = OffsetStore(log, ManualClock(), num_partitions=3, replication_factor=1)
        await loaded.load()
        assert _all_offsets(loaded) == _all_offsets(live)
        assert loaded.skipped_records == 0

        # The same records replayed one by one into shards: the same shards.
        for partition in range(3):
            shard = OffsetShard(partition)
            for row in log.rows.get((OFFSETS_TOPIC, partition), []):
                shard.replay(OffsetRecord.decode(row["key"], row["value"]))
            live_shard = live._shards.get(partition)
            assert shard.offsets == (live_shard.offsets if live_shard is not None else {})

    asyncio.run(scenario())


TIDS = st.sampled_from(["app-1", "app-2"])
TXN_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("init"), TIDS),
        st.tuples(st.just("add"), TIDS, st.lists(TPS, max_size=2), st.booleans()),
        st.tuples(st.just("offsets"), TIDS, GROUPS, TPS, st.integers(0, 100)),
        st.tuples(st.just("end"), TIDS, st.booleans()),
        st.tuples(st.just("time"), st.integers(1, 90_000)),
        st.tuples(st.just("enlist"), st.integers(0, 2)),
        st.tuples(st.just("produce"), st.integers(0, 2), TPS),
        st.tuples(st.just("commit_batch"), st.integers(0, 2), st.integers(0, 2)),
        st.tuples(st.just("abort_batch"), st.integers(0, 2)),
    ),
    max_size=30,
)


def _txn_state(txns: TransactionCoordinator) -> tuple:
    """Everything a request can observe of the coordinator's state, comparably."""
    return (
        {t: m.to_json() for t, m in txns._txns.items()},
        dict(txns._by_pid),
        {s: k.to_json() for s, k in txns._sinks.items()},
    )


def _transactions(log: InMemoryLog, clock: ManualClock, blocks: InMemoryProducerIdBlocks) -> TransactionCoordinator:
    offsets = OffsetStore(log, clock, num_partitions=2, replication_factor=1)
    groups = GroupCoordinator(log, offsets, clock, initial_rebalance_delay_ms=0)
    return TransactionCoordinator(log, log, groups, offsets, clock, num_partitions=3, replication_factor=1,
                                  producer_ids=blocks)


@settings(max_examples=40, deadline=None)
@given(TXN_OPS)
# A transaction begun by adding no partition (it was Ongoing in memory only).
@example([("init", "app-1"), ("add", "app-1", [], False)])
# A sink's sessions are forgotten once their batch commits: so are their producer ids.
@example([("enlist", 0), ("produce", 0, ("t", 1)), ("commit_batch", 0, 1)])
def test_loading_the_transaction_state_written_gives_the_live_state(ops) -> None:
    async def scenario() -> None:
        log, clock, blocks = _offset_log(), ManualClock(), InMemoryProducerIdBlocks()
        live = _transactions(log, clock, blocks)
        sessions: dict[int, list[tuple[str, int, int]]] = {}  # batch -> (transactional id, pid, epoch)
        for op, *args in ops:
            try:
                if op == "init":
                    await live.init_producer_id(args[0], timeout_ms=60_000)
                elif op in ("add", "offsets", "end"):
                    meta = live._txns.get(args[0])
                    pid, epoch = (meta.producer_id, meta.producer_epoch) if meta is not None else (0, 0)
                    if op == "add":
                        await live.add_partitions(args[0], pid, epoch - args[2], args[1])
                    elif op == "offsets":
                        await live.add_offsets(args[0], pid, epoch, args[1], {args[2]: CommittedOffset(args[3])})
                    else:
                        await live.end(args[0], pid, epoch, args[1])
                elif op == "time":
                    clock.advance(args[0])
                    await live.expire()
                elif op == "enlist":
                    sessions.setdefault(args[0], []).append(await live.enlist("sink", args[0]))
                elif op == "produce":
                    for _, pid, epoch in sessions.get(args[0], [])[:1]:
                        await live.check_transactional_produce(pid, epoch, *args[1])
                elif op == "commit_batch":
                    ids = [t for t, _, _ in sessions.get(args[0], [])][:args[1]]
                    await live.commit_batch("sink", args[0], ids)
                else:
                    await live.abort_batch("sink", args[0])
            except LaketailError:
                pass  # refused requests are part of the sequence: they must leave no trace either

        loaded = _transactions(log, ManualClock(), InMemoryProducerIdBlocks())
        await loaded.load()
        assert loaded.skipped_records == 0
        assert _txn_state(loaded) == _txn_state(live)

        # The same records replayed one at a time, in log order, into a fresh coordinator.
        replayed = _transactions(log, ManualClock(), InMemoryProducerIdBlocks())
        for partition in range(3):
            for row in log.rows.get((TXN_TOPIC, partition), []):
                replayed.replay(decode_key(row["key"]), row["value"])
        assert _txn_state(replayed) == _txn_state(live)

    asyncio.run(scenario())


def test_a_partitions_shard_unloads_and_loads_alone() -> None:
    """Each partition of ``__consumer_offsets`` is its own shard: unloading one forgets
    only the groups that hash to it, and loading it back replays only its records."""
    from laketail.coordinator.offsets import partition_for_group

    async def scenario() -> None:
        log = _offset_log()
        store = OffsetStore(log, ManualClock(), num_partitions=3, replication_factor=1)
        groups = [f"group-{i}" for i in range(12)]
        for i, group in enumerate(groups):
            await store.commit(group, {("t", 0): CommittedOffset(i)})
        partition = partition_for_group("group-0", 3)
        here = [g for g in groups if partition_for_group(g, 3) == partition]
        elsewhere = [g for g in groups if g not in here]
        assert here and elsewhere

        store.unload_partition(partition)
        assert store.groups() == sorted(elsewhere)
        with pytest.raises(NotCoordinator):  # its groups are coordinated elsewhere now
            store.committed("group-0", ("t", 0))

        await store.load_partition(partition)
        assert store.groups() == sorted(groups)
        assert {g: store.committed(g, ("t", 0)).offset for g in groups} == {g: i for i, g in enumerate(groups)}

    asyncio.run(scenario())
