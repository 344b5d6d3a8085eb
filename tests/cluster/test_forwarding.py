"""Forwarded appends carry an internal idempotent identity (issue 35, finding 5), over
real partition logs: a leader and a follower fed the leader's frames byte for byte.

Before: a request sent once to broker 2 while the leader of its partition was paused
was written twice (offsets 6989 and 7110): the leader appended the forwarded batch,
lost its leadership while waiting for acks=all and answered NOT_LEADER_OR_FOLLOWER, and
broker 2 sent the same plain batch again to the new leader, which appended it again.
Now the forward's retry is a duplicate the new leader recognises from the producer
state it rebuilt while following, and answers with the original offset."""

from __future__ import annotations

import asyncio

import pytest

from laketail.clock import ManualClock
from laketail.cluster.forwarding import ForwardedAppends
from laketail.config import TopicConfig
from laketail.coordinator.fakes import InMemoryProducerIdBlocks
from laketail.errors import NotLeaderOrFollower, OutOfOrderSequenceNumber
from laketail.records import build_frame_batch
from laketail.storage.partition_log import PartitionLog, ProducerBatch


def _plain(values: list[bytes]):
    """A client's batch without a producer id, as the produce path builds it."""
    return build_frame_batch(timestamps_us=[1_000] * len(values), keys=[None] * len(values), values=values)


def _values(plog: PartitionLog) -> list[bytes]:
    plog.set_high_watermark(plog.log_end_offset)  # as once the ISR has it (no replicas run here)
    return plog.read(0, plog.log_end_offset, 10**6, 1 << 30).column("value").to_pylist()


def test_a_forward_retried_on_the_new_leader_is_written_once(tmp_path):
    clock = ManualClock()

    async def scenario() -> None:
        old_leader = PartitionLog.open(tmp_path / "b1", "t", 0, TopicConfig(), clock)
        new_leader = PartitionLog.open(tmp_path / "b2", "t", 0, TopicConfig(), clock)
        forwarded = ForwardedAppends(lambda size: InMemoryProducerIdBlocks().allocate_producer_ids(size))
        await old_leader.append(_plain([b"earlier"]))

        calls: list[str] = []

        async def call_leader(frame, producer: ProducerBatch) -> int:
            """What ClusterNode.call_leader does with the forward: the old leader writes
            it (the follower copies its frames) but answers NOT_LEADER_OR_FOLLOWER; the
            request is sent again, the same bytes, to the new leader."""
            for target in (old_leader, new_leader):
                calls.append("old" if target is old_leader else "new")
                if target is old_leader:
                    await old_leader.append(frame, producer=producer)
                    await new_leader.append_raw(old_leader.read_raw(0, 1 << 20))  # replicated meanwhile
                    continue  # its answer: NOT_LEADER_OR_FOLLOWER, so the retry
                return await target.append(frame, producer=producer)
            raise NotLeaderOrFollower("unreachable")

        base = await forwarded.send("t", 0, _plain([b"once"]), call_leader)
        assert calls == ["old", "new"]
        assert base == 1  # the original offset
        assert _values(new_leader) == [b"earlier", b"once"]
        # The slot's sequence moved on: the next forward is appended, not taken for a retry.
        assert await forwarded.send("t", 0, _plain([b"next"]), lambda f, p: new_leader.append(f, producer=p)) == 2
        assert _values(new_leader) == [b"earlier", b"once", b"next"]
        await old_leader.close()
        await new_leader.close()

    asyncio.run(scenario())


def test_a_failed_forward_drops_its_identity_and_a_forgotten_one_is_replaced(tmp_path):
    clock = ManualClock()

    async def scenario() -> None:
        blocks = InMemoryProducerIdBlocks()
        forwarded = ForwardedAppends(blocks.allocate_producer_ids)
        seen: list[ProducerBatch] = []
        leader = PartitionLog.open(tmp_path / "l", "t", 0, TopicConfig(), clock)

        async def fails(frame, producer):
            seen.append(producer)
            raise NotLeaderOrFollower("moved")

        with pytest.raises(NotLeaderOrFollower):
            await forwarded.send("t", 0, _plain([b"a"]), fails)

        async def to_leader(frame, producer):
            seen.append(producer)
            return await leader.append(frame, producer=producer)

        assert await forwarded.send("t", 0, _plain([b"b"]), to_leader) == 0
        assert seen[1].producer_id != seen[0].producer_id  # the outcome of the first is unknown: never reused
        # A leader that forgot the identity (a restart without its producer snapshot) refuses
        # the next sequence; the forward goes again under a fresh identity, once.
        forgetful = PartitionLog.open(tmp_path / "f", "t", 0, TopicConfig(), clock)

        async def to_forgetful(frame, producer):
            seen.append(producer)
            return await forgetful.append(frame, producer=producer)

        assert await forwarded.send("t", 0, _plain([b"c"]), to_forgetful) == 0
        assert isinstance(seen[-2], ProducerBatch) and seen[-2].base_sequence == 1
        assert (seen[-1].base_sequence, seen[-1].producer_id != seen[-2].producer_id) == (0, True)
        with pytest.raises(OutOfOrderSequenceNumber):  # what the forgetful leader said to the old identity
            await forgetful.append(_plain([b"x"]), producer=seen[-2])
        await leader.close()
        await forgetful.close()

    asyncio.run(scenario())
