"""The transaction coordinator on an in-memory coordinator log (``coordinator.fakes``):
fencing, offsets in transactions, recovery of a prepared transaction, timeouts, epoch
bumps; and over a real broker (real logs, real Delta tables), what needs the real log:
isolation levels, Spark's batch transactions, idempotent retries."""

import asyncio

import pyarrow as pa
import pytest

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.coordinator.fakes import InMemoryLog, InMemoryProducerIdBlocks
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import CommittedOffset, OffsetStore
from laketail.coordinator.transactions import TXN_TOPIC, TransactionCoordinator
from laketail.errors import OutOfOrderSequenceNumber, ProducerFenced
from laketail.storage.partition_log import ProducerBatch


class _Coordinators:
    """Offsets, groups and transactions wired as the broker wires them, on ``log``."""

    def __init__(self, log, clock, producer_ids=None):
        self.log = log
        self.offsets = OffsetStore(log, clock, num_partitions=2, replication_factor=1)
        self.groups = GroupCoordinator(log, self.offsets, clock, initial_rebalance_delay_ms=0)
        self.transactions = TransactionCoordinator(
            log, log, self.groups, self.offsets, clock, num_partitions=2, replication_factor=1,
            producer_ids=producer_ids if producer_ids is not None else InMemoryProducerIdBlocks(),
        )

    async def load(self):
        """What the broker does at start (``Broker.load_coordinators``)."""
        await self.offsets.load()
        await self.transactions.load()
        await self.transactions.recover()
        return self


async def _coordinators(clock, log=None):
    return await _Coordinators(log if log is not None else InMemoryLog(), clock).load()


async def _enlist(txns, pid, epoch, topic="t", partition=0):
    """What a transactional produce does first (``ProducePath.produce``)."""
    await txns.check_transactional_produce(pid, epoch, topic, partition)


def _settings(tmp_path):
    return load_settings(None, env={}, data=str(tmp_path), offsets_topic_num_partitions=2,
                         transaction_state_log_num_partitions=2, group_initial_rebalance_delay_ms=0)


async def _start(tmp_path, clock):
    broker = Broker(_settings(tmp_path), clock=clock)
    await broker.start()
    return broker


async def _send(broker, values, pid, epoch, seq, partition=0, topic="t", transactional=True):
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array(values, pa.binary()), "partition": pa.array([partition] * len(values), pa.int32()),
    })
    return await broker.produce(topic, batch, producer=ProducerBatch(pid, epoch, seq, transactional))


async def _values(broker, isolation, topic="t", partition=0):
    result = await broker.fetch(topic, partition, 0, max_records=10_000, isolation=isolation)
    return result.records.column("value").to_pylist()


def test_commit_and_abort_under_both_isolation_levels(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _start(tmp_path, clock)
        await broker.create_topic("t", 1)
        txns = broker.transactions
        pid, epoch = await txns.init_producer_id("app-1")
        await _send(broker, [b"a1", b"a2"], pid, epoch, 0)
        plain = pa.RecordBatch.from_pydict({"value": [b"plain"], "partition": pa.array([0], pa.int32())})
        await broker.produce("t", plain)
        # The open transaction holds read_committed back: nothing at or after it shows.
        assert await _values(broker, "read_committed") == []
        assert await _values(broker, "read_uncommitted") == [b"a1", b"a2", b"plain"]
        await txns.end("app-1", pid, epoch, commit=True)
        assert await _values(broker, "read_committed") == [b"a1", b"a2", b"plain"]
        await _send(broker, [b"b1"], pid, epoch, 2)
        await txns.end("app-1", pid, epoch, commit=False)
        assert await _values(broker, "read_committed") == [b"a1", b"a2", b"plain"]
        assert await _values(broker, "read_uncommitted") == [b"a1", b"a2", b"plain", b"b1"]
        state = broker.partition_state("t", 0)
        assert state.last_stable_offset == state.high_watermark == 6  # 4 records + 2 markers
        await broker.close()
        # After a restart the outcome of each transaction is still known.
        again = await _start(tmp_path, clock)
        assert await _values(again, "read_committed") == [b"a1", b"a2", b"plain"]
        await again.close()

    asyncio.run(scenario())


def test_a_new_session_fences_the_zombie_and_aborts_its_transaction():
    clock = ManualClock()

    async def scenario():
        parts = await _coordinators(clock)
        parts.log.add_topic("t", 1)
        txns = parts.transactions
        pid, old = await txns.init_producer_id("app")
        await _enlist(txns, pid, old)
        pid2, new = await txns.init_producer_id("app")
        assert (pid2, new) == (pid, old + 1)
        assert parts.log.markers == [("t", 0, pid, old, "ABORT")]  # the zombie's transaction
        with pytest.raises(ProducerFenced):
            await _enlist(txns, pid, old)
        with pytest.raises(ProducerFenced):
            await txns.end("app", pid, old, commit=True)
        await _enlist(txns, pid, new)
        await txns.end("app", pid, new, commit=True)
        assert parts.log.markers[1:] == [("t", 0, pid, new, "COMMIT")]

    asyncio.run(scenario())


def test_offsets_sent_to_a_transaction_commit_only_with_it():
    clock = ManualClock()

    async def scenario():
        parts = await _coordinators(clock)
        parts.log.add_topic("t", 1)
        parts.log.add_topic("in", 1)
        txns = parts.transactions
        pid, epoch = await txns.init_producer_id("etl")
        await _enlist(txns, pid, epoch)
        await txns.add_offsets("etl", pid, epoch, "g", {("in", 0): CommittedOffset(7)})
        await txns.end("etl", pid, epoch, commit=False)
        assert parts.groups.committed("g", [("in", 0)])[("in", 0)] is None
        await _enlist(txns, pid, epoch)
        await txns.add_offsets("etl", pid, epoch, "g", {("in", 0): CommittedOffset(9)})
        await txns.end("etl", pid, epoch, commit=True)
        assert parts.groups.committed("g", [("in", 0)])[("in", 0)].offset == 9
        # ... and it is in __consumer_offsets: a restarted coordinator has it.
        again = await _coordinators(clock, log=parts.log)
        assert again.groups.committed("g", [("in", 0)])[("in", 0)].offset == 9

    asyncio.run(scenario())


def test_a_prepared_transaction_is_completed_after_a_restart():
    clock = ManualClock()

    async def scenario():
        parts = await _coordinators(clock)
        parts.log.add_topic("t", 2)
        txns = parts.transactions
        pid, epoch = await txns.init_producer_id("app")
        await _enlist(txns, pid, epoch, partition=0)
        await _enlist(txns, pid, epoch, partition=1)
        meta = txns.describe("app")
        meta.state = "PrepareCommit"  # the crash comes after PREPARE, before any marker
        await txns._write(("txn", "app"), meta.to_json())
        assert parts.log.markers == []
        again = await _coordinators(clock, log=parts.log)
        assert sorted(parts.log.markers) == [("t", 0, pid, epoch, "COMMIT"), ("t", 1, pid, epoch, "COMMIT")]
        assert again.transactions.describe("app").state == "CompleteCommit"

    asyncio.run(scenario())


def test_timed_out_transaction_is_aborted_and_its_producer_fenced():
    clock = ManualClock()

    async def scenario():
        parts = await _coordinators(clock)
        parts.log.add_topic("t", 1)
        txns = parts.transactions
        pid, epoch = await txns.init_producer_id("slow", timeout_ms=1_000)
        await _enlist(txns, pid, epoch)
        clock.advance(999)
        assert await txns.expire() == 0
        clock.advance(501)
        assert await txns.expire() == 1
        assert [m[4] for m in parts.log.markers] == ["ABORT"]
        with pytest.raises(ProducerFenced):
            await txns.end("slow", pid, epoch, commit=True)

    asyncio.run(scenario())


def test_batch_transactions_commit_exactly_the_given_attempts_once(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _start(tmp_path, clock)
        await broker.create_topic("t", 1)
        txns = broker.transactions
        first, pid1, e1 = await txns.enlist("sink", 0)
        retry, pid2, e2 = await txns.enlist("sink", 0)  # a second attempt of the same task
        await _send(broker, [b"attempt-1"], pid1, e1, 0)
        await _send(broker, [b"attempt-2"], pid2, e2, 0)
        assert await txns.commit_batch("sink", 0, [retry]) is True
        assert await _values(broker, "read_committed") == [b"attempt-2"]
        # The driver replays batch 0: its new attempt must not land.
        replay, pid3, e3 = await txns.enlist("sink", 0)
        await _send(broker, [b"replayed"], pid3, e3, 0)
        assert await txns.commit_batch("sink", 0, [replay]) is False
        assert await _values(broker, "read_committed") == [b"attempt-2"]
        assert txns.sink("sink").committed_batch == 0
        await broker.close()

    asyncio.run(scenario())


def test_idempotent_retry_through_the_broker(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _start(tmp_path, clock)
        await broker.create_topic("t", 1)
        pid, epoch = await broker.transactions.init_producer_id(None)
        first = await _send(broker, [b"a", b"b"], pid, epoch, 0, transactional=False)
        again = await _send(broker, [b"a", b"b"], pid, epoch, 0, transactional=False)
        assert first.offsets == again.offsets == [0, 1]
        with pytest.raises(OutOfOrderSequenceNumber):
            await _send(broker, [b"c"], pid, epoch, 5, transactional=False)
        assert await _values(broker, "read_committed") == [b"a", b"b"]
        await broker.close()

    asyncio.run(scenario())


def test_a_bump_after_abort_never_fences_the_session_that_took_over():
    clock = ManualClock()

    async def scenario():
        parts = await _coordinators(clock)
        txns = parts.transactions
        pid, epoch = await txns.init_producer_id("app")
        assert await txns.init_producer_id("app", expected=(pid, epoch)) == (pid, epoch + 1)
        newer = await txns.init_producer_id("app")  # another session takes over
        with pytest.raises(ProducerFenced):
            await txns.init_producer_id("app", expected=(pid, epoch + 1))  # the old one's late bump
        assert txns.describe("app").producer_epoch == newer[1]
        assert TXN_TOPIC in parts.log.topics  # created on first use, as the broker does

    asyncio.run(scenario())


def test_producer_ids_are_never_reused_by_a_coordinator_that_lost_its_state():
    """Issue 35 finding 3: ``POST /v1/producers`` handed out 0, 2, 1 and, after a failover
    whose load of ``__transaction_state`` failed, 0, 1, 2 again. Ids come from durable
    blocks shared by the cluster, so a coordinator that starts from an empty (or
    unreadable) log still hands out new ones."""
    asyncio.run(_no_reuse_after_a_lost_state())


async def _no_reuse_after_a_lost_state():
    clock = ManualClock()
    blocks = InMemoryProducerIdBlocks()
    first = await _Coordinators(InMemoryLog(), clock, blocks).load()
    before = {(await first.transactions.init_producer_id())[0] for _ in range(3)}
    # The next controller: its log read nothing of the first one's block records.
    second = await _Coordinators(InMemoryLog(), clock, blocks).load()
    after = {(await second.transactions.init_producer_id())[0] for _ in range(3)}
    assert len(before) == 3 and len(after) == 3
    assert not before & after


def test_the_first_block_starts_above_the_ids_the_loaded_state_names():
    """Ids handed out before blocks lived in ``_system/producer_ids`` (the legacy block
    record, transactional ids' producer ids) are the floor of the first block."""
    asyncio.run(_floor_from_the_loaded_state())


async def _floor_from_the_loaded_state():
    clock = ManualClock()
    log = InMemoryLog()
    old = await _Coordinators(log, clock, InMemoryProducerIdBlocks()).load()
    await old.transactions.init_producer_id()
    pid, _ = await old.transactions.init_producer_id("t1")
    fresh = InMemoryProducerIdBlocks()  # a cluster whose _system/producer_ids is new
    new = await _Coordinators(log, clock, fresh).load()
    assert (await new.transactions.init_producer_id())[0] > pid
