"""Regression tests for the transaction coordinator (in process, on a real broker):
offsets sent to a transaction can no longer leave it prepared forever.

Before the fix, an offset for a partition that did not exist was accepted, and the
commit failed after PrepareCommit: the transactional id stayed PrepareCommit (every
later call CONCURRENT_TRANSACTIONS) and the broker's start-up recovery raised on it,
so the broker could not start again.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.coordinator.offsets import CommittedOffset
from laketail.errors import InvalidTxnState, OffsetMetadataTooLarge, UnknownTopicOrPartition
from laketail.storage.partition_log import ProducerBatch


async def _start(tmp_path, clock) -> Broker:
    settings = load_settings(None, env={}, data=str(tmp_path), offsets_topic_num_partitions=2,
                             transaction_state_log_num_partitions=2)
    broker = Broker(settings, clock=clock)
    await broker.start()
    return broker


async def _send(broker: Broker, value: bytes, pid: int, epoch: int, seq: int) -> None:
    batch = pa.RecordBatch.from_pydict({"value": pa.array([value], pa.binary()),
                                        "partition": pa.array([0], pa.int32())})
    await broker.produce("out", batch, producer=ProducerBatch(pid, epoch, seq, True))


def test_offsets_for_a_missing_partition_or_too_much_metadata_are_refused_up_front(tmp_path):
    async def scenario():
        broker = await _start(tmp_path, ManualClock())
        await broker.create_topic("out", 1)
        await broker.create_topic("in", 1)
        txns = broker.transactions
        pid, epoch = await txns.init_producer_id("etl")
        await _send(broker, b"x", pid, epoch, 0)
        with pytest.raises(UnknownTopicOrPartition):
            await txns.add_offsets("etl", pid, epoch, "g", {("missing", 0): CommittedOffset(1)})
        with pytest.raises(UnknownTopicOrPartition):
            await txns.add_offsets("etl", pid, epoch, "g", {("in", 3): CommittedOffset(1)})
        with pytest.raises(OffsetMetadataTooLarge):
            await txns.add_offsets("etl", pid, epoch, "g", {("in", 0): CommittedOffset(1, "m" * 5000)})
        assert await txns.end("etl", pid, epoch, commit=True) == "CompleteCommit"
        await broker.close()

    asyncio.run(scenario())


def test_a_topic_deleted_before_the_commit_does_not_leave_the_transaction_prepared(tmp_path):
    clock = ManualClock()

    async def scenario():
        broker = await _start(tmp_path, clock)
        await broker.create_topic("out", 1)
        await broker.create_topic("in", 1)
        await broker.create_topic("other", 1)
        txns = broker.transactions
        pid, epoch = await txns.init_producer_id("etl")
        await _send(broker, b"x", pid, epoch, 0)
        await txns.add_offsets("etl", pid, epoch, "g", {("in", 0): CommittedOffset(5),
                                                        ("other", 0): CommittedOffset(9)})
        await broker.delete_topic("in")
        assert await txns.end("etl", pid, epoch, commit=True) == "CompleteCommit"
        assert broker.groups.committed("g", [("other", 0)])[("other", 0)].offset == 9
        await broker.close()
        again = await _start(tmp_path, clock)  # recovery has nothing left to finish
        assert again.transactions.describe("etl").state == "CompleteCommit"
        result = await again.fetch("out", 0, 0, isolation="read_committed")
        assert result.records.column("value").to_pylist() == [b"x"]
        await again.close()

    asyncio.run(scenario())


def test_a_batch_whose_session_timed_out_does_not_commit(tmp_path):
    """A writer attempt aborted by transaction.timeout.ms lost its records: committing
    the batch with it must fail (the driver retries the batch) instead of answering
    committed=true without them."""
    clock = ManualClock()

    async def scenario():
        broker = await _start(tmp_path, clock)
        await broker.create_topic("out", 1)
        txns = broker.transactions
        slow, pid1, e1 = await txns.enlist("sink", 0, timeout_ms=1_000)
        idle, _, _ = await txns.enlist("sink", 0, timeout_ms=1_000)  # a task with no rows
        await _send(broker, b"lost", pid1, e1, 0)
        clock.advance(1_500)
        assert await txns.expire() == 1
        with pytest.raises(InvalidTxnState):
            await txns.commit_batch("sink", 0, [slow, idle])
        assert txns.sink("sink").committed_batch == -1
        # The retried batch commits, with a session that has no rows too.
        again, pid2, e2 = await txns.enlist("sink", 0)
        empty, _, _ = await txns.enlist("sink", 0)
        await _send(broker, b"kept", pid2, e2, 0)
        assert await txns.commit_batch("sink", 0, [again, empty]) is True
        result = await broker.fetch("out", 0, 0, isolation="read_committed")
        assert result.records.column("value").to_pylist() == [b"kept"]
        await broker.close()

    asyncio.run(scenario())
