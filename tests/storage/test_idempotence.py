"""Idempotent appends: retries answered with their original offsets, gaps and stale
epochs refused, and the state rebuilt after a clean stop or a crash."""

import asyncio

import pytest

from laketail.clock import ManualClock
from laketail.config import TopicConfig
from laketail.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber
from laketail.records import build_frame_batch
from laketail.storage.partition_log import PartitionLog, ProducerBatch


def _batch(values, pid=7, epoch=0, seq=0):
    return build_frame_batch(timestamps_us=[1_000] * len(values), keys=[None] * len(values), values=values,
                             producer_id=pid, producer_epoch=epoch, base_sequence=seq)


async def _append(plog, values, pid=7, epoch=0, seq=0, transactional=False):
    return await plog.append(_batch(values, pid, epoch, seq), producer=ProducerBatch(pid, epoch, seq, transactional))


def _values(plog):
    return plog.read(0, plog.high_watermark, 10**6, 1 << 30).column("value").to_pylist()


@pytest.mark.parametrize("restart", ["none", "clean", "crash"])
def test_retries_gaps_and_fencing(tmp_path, restart):
    clock = ManualClock()

    async def scenario():
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        assert await _append(plog, [b"a", b"b"], seq=0) == 0
        assert await _append(plog, [b"c"], seq=2) == 2
        if restart == "clean":
            await plog.close()
        elif restart == "crash":
            for segment in plog.segments:
                segment.close()
        if restart != "none":
            plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        assert await _append(plog, [b"a", b"b"], seq=0) == 0  # a retry: original offsets
        assert await _append(plog, [b"c"], seq=2) == 2
        with pytest.raises(OutOfOrderSequenceNumber):
            await _append(plog, [b"e"], seq=5)
        assert await _append(plog, [b"d"], seq=3) == 3
        assert await _append(plog, [b"x"], epoch=1, seq=0) == 4  # a new epoch starts at 0
        with pytest.raises(InvalidProducerEpoch):
            await _append(plog, [b"zombie"], epoch=0, seq=4)
        assert _values(plog) == [b"a", b"b", b"c", b"d", b"x"]
        await plog.close()

    asyncio.run(scenario())


def test_group_commit_checks_batches_of_one_producer_in_order(tmp_path):
    clock = ManualClock()

    async def scenario():
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        results = await asyncio.gather(
            _append(plog, [b"0"], seq=0), _append(plog, [b"1"], seq=1), _append(plog, [b"1"], seq=1),
            _append(plog, [b"3"], seq=3), return_exceptions=True,
        )
        assert results[:3] == [0, 1, 1]
        assert isinstance(results[3], OutOfOrderSequenceNumber)
        assert _values(plog) == [b"0", b"1"]
        await plog.close()

    asyncio.run(scenario())


def test_open_transaction_holds_the_last_stable_offset(tmp_path):
    clock = ManualClock()

    async def scenario():
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        await plog.append(_batch([b"plain"], pid=-1, seq=-1))
        await _append(plog, [b"t1", b"t2"], pid=9, seq=0, transactional=True)
        await plog.append(_batch([b"later"], pid=-1, seq=-1))
        assert (plog.high_watermark, plog.last_stable_offset) == (4, 1)
        marker = build_frame_batch(timestamps_us=[2_000], keys=[None], values=[None], producer_id=9,
                                   producer_epoch=0, transactional=True, control="ABORT")
        await plog.append(marker, producer=ProducerBatch(9, 0, -1, True, "ABORT"))
        assert plog.last_stable_offset == plog.high_watermark == 5
        assert plog.producer_state.outcome(9, 1) == "ABORT"
        await plog.close()
        again = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        assert again.producer_state.outcome(9, 2) == "ABORT" and again.last_stable_offset == 5
        await again.close()

    asyncio.run(scenario())


def test_a_failed_write_leaves_producer_state_as_it_was(tmp_path):
    import os

    from laketail.errors import KafkaStorageError

    clock = ManualClock()

    async def scenario():
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        await _append(plog, [b"a"], seq=0)
        before = [(b.first_seq, b.base_offset) for b in plog.producer_state.producers[7].batches]
        os.close(plog.segments[-1]._fd_open)  # the disk goes away under the writer
        with pytest.raises(KafkaStorageError):
            await _append(plog, [b"b"], seq=1)
        after = [(b.first_seq, b.base_offset) for b in plog.producer_state.producers[7].batches]
        assert after == before and plog.log_end_offset == 1

    asyncio.run(scenario())


@pytest.mark.parametrize("restart", ["none", "crash"])
def test_sequences_wrap_past_int32_like_kafka(tmp_path, restart):
    """Kafka's sequences are int32 and wrap from 2**31 - 1 to 0
    (``DefaultRecordBatch.incrementSequence``): a batch of two records at 2**31 - 1 holds
    sequences 2**31 - 1 and 0, the next batch starts at 1, and a retry of the wrapped
    batch still gets its original offsets, also after the state is rebuilt from the log."""
    top = 2**31 - 1
    clock = ManualClock()

    async def scenario():
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        # The producer has sent 2**31 - 1 records before (its last batch ended at 2**31 - 2).
        plog.producer_state.apply(7, 0, top - 1, 1, -1, 0, False, None)
        assert await _append(plog, [b"a", b"b"], seq=top) == 0
        stored = plog.read(0, plog.high_watermark, 10**6, 1 << 30).column("sequence").to_pylist()
        assert stored == [top, 0]
        if restart == "crash":
            for segment in plog.segments:
                segment.close()
            plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), clock)
        assert await _append(plog, [b"a", b"b"], seq=top) == 0  # a retry: original offsets
        with pytest.raises(OutOfOrderSequenceNumber):
            await _append(plog, [b"c"], seq=2)
        assert await _append(plog, [b"c"], seq=1) == 2
        assert _values(plog) == [b"a", b"b", b"c"]
        await plog.close()

    asyncio.run(scenario())


def test_sequence_runs_from_table_rows_are_what_a_restarted_log_learns():
    """Rows of two interleaved producers, one of which bumped its epoch, in two row groups
    out of order: per producer the last epoch's runs, adjacent ones joined; a retry inside
    a run is a duplicate at its own offsets, the next sequence is taken, a gap is not."""
    import numpy as np

    from laketail.storage.producer_state import (
        ProducerStateManager,
        learned_producers,
        sequence_runs,
    )

    # offset: pid/epoch/seq -- 0-2: p7 e0 s0-2; 3: p8 e0 s0; 4-5: p7 e0 s3-4; 6-7: p8 e1 s0-1; 8-9: p7 e0 s5-6
    rows = [(0, 7, 0, 0), (1, 7, 0, 1), (2, 7, 0, 2), (3, 8, 0, 0), (4, 7, 0, 3), (5, 7, 0, 4),
            (6, 8, 1, 0), (7, 8, 1, 1), (8, 7, 0, 5), (9, 7, 0, 6)]

    def runs_of(part):
        cols = [np.array(c, dtype=np.int64) for c in zip(*part)]
        return sequence_runs(*cols, cols[0] * 10)

    learned = learned_producers(runs_of(rows[5:]) + runs_of(rows[:5]))  # the later group read first
    assert learned[8].epoch == 1 and [(r.first_seq, r.last_seq, r.base_offset) for r in learned[8].runs] == [(0, 1, 6)]
    assert [(r.first_seq, r.last_seq, r.base_offset, r.count) for r in learned[7].runs] == [
        (0, 2, 0, 3), (3, 4, 4, 2), (5, 6, 8, 2)]  # 3 and 4 were in two row groups: one run
    assert learned[7].last_timestamp_ms == 90

    state = ProducerStateManager()
    state.markers_from = 10
    state.learn([], [], learned)
    assert state.check(7, 0, 5, 2).base_offset == 8  # the last batch retried
    assert state.check(7, 0, 3, 1).base_offset == 4  # an older one inside the run
    assert state.check(7, 0, 7, 1) is None  # the next sequence
    with pytest.raises(OutOfOrderSequenceNumber):
        state.check(7, 0, 9, 1)
    assert state.check(8, 1, 2, 1) is None
    restored = ProducerStateManager.restore(state.snapshot())  # a run stays a run in the snapshot
    assert restored.check(7, 0, 4, 1).base_offset == 5

    wrapping = sequence_runs(*(np.array(c, dtype=np.int64) for c in ([0, 1], [9, 9], [0, 0], [2**31 - 1, 0])),
                             np.array([0, 0]))
    assert [(r.first_seq, r.last_seq, r.count) for _, _, r, _ in wrapping] == [(2**31 - 1, 0, 2)]
