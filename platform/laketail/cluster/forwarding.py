"""Appends forwarded to a partition's leader carry an internal idempotent identity.

Role: a produce that reaches a broker not leading the partition is forwarded (§8.5).
The forward may be answered with an error after the leader wrote it (the issue 35 case:
the leader, paused, appended the batch, lost its leadership while waiting for
``acks=all``, and answered NOT_LEADER_OR_FOLLOWER; the batch had reached the followers),
and the forwarding broker calls the new leader, as a Kafka client retries
NOT_LEADER_OR_FOLLOWER (:meth:`~laketail.cluster.node.ClusterNode.call_leader`). Kafka's brokers never retry a
client's append; here the retry is kept, made safe the way Kafka's idempotent producer
makes its own retries safe: a client batch without a producer id is forwarded under an
internal producer id, epoch 0 and the next sequence of that id for the partition, so the
leader -- the same one or a follower elected since, which rebuilt the producer state
from the replicated frames -- answers a retry with the original offsets and appends
nothing.

Identities: a *slot* is one internal producer id's sequence in one partition, used by
one forward at a time (forwards run concurrently over several connections, and
sequences must arrive in order). A forward takes an idle slot of its partition or a new
one; after a success the slot's sequence moves on and it is idle again. After any
failure the outcome is unknown (written or not), so the slot is dropped and its id never
used again; OUT_OF_ORDER_SEQUENCE_NUMBER (the leader forgot the id: an expired or
restarted producer state) means nothing was written, and the forward is sent again once
under a new slot. Producer ids come from durable blocks (``_system/producer_ids``), the
same ones the transaction coordinator takes, so no client producer ever shares one.

The records keep the internal id in their ``producer_id`` column. Event loop thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

import numpy as np
import pyarrow as pa

from laketail.errors import OutOfOrderSequenceNumber
from laketail.storage.partition_log import ProducerBatch

#: Producer ids taken from ``_system/producer_ids`` at a time by one broker.
ID_BLOCK_SIZE = 100
#: Idle slots kept per partition (more are dropped; their ids are simply not reused).
MAX_IDLE_SLOTS = 64
_SEQUENCE_WRAP = 2**31
INTERNAL_EPOCH = 0

Allocate = Callable[[int], Awaitable[tuple[int, int]]]
Send = Callable[[pa.RecordBatch, ProducerBatch], Awaitable[int]]


@dataclass
class Slot:
    producer_id: int
    next_sequence: int = 0


def stamp(frame: pa.RecordBatch, producer: ProducerBatch) -> pa.RecordBatch:
    """``frame`` with its producer columns (id, epoch, sequence) set to ``producer``'s, as
    an idempotent producer's batch has them: what followers rebuild producer state from."""
    n = frame.num_rows
    schema = frame.schema
    columns = {
        "producer_id": pa.array(np.full(n, producer.producer_id), schema.field("producer_id").type),
        "producer_epoch": pa.array(np.full(n, producer.producer_epoch), schema.field("producer_epoch").type),
        "sequence": pa.array(np.arange(producer.base_sequence, producer.base_sequence + n, dtype=np.int64)
                             % _SEQUENCE_WRAP, schema.field("sequence").type),
    }
    arrays = [columns.get(name, frame.column(i)) for i, name in enumerate(frame.schema.names)]
    return pa.RecordBatch.from_arrays(arrays, schema=frame.schema)


class ForwardedAppends:
    """The internal identities of this broker's forwarded appends (module docstring).
    ``allocate(size)`` takes a durable block of producer ids."""

    def __init__(self, allocate: Allocate) -> None:
        self._allocate = allocate
        self._free_ids: list[int] = []
        self._idle: dict[tuple[str, int], list[Slot]] = {}

    async def send(self, topic: str, partition: int, frame: pa.RecordBatch, send: Send) -> int:
        """Forward ``frame`` through ``send(stamped frame, producer)`` under a slot of the
        partition; return the base offset the leader answered (the original one for a
        retry it recognised)."""
        for attempt in range(2):
            slot = await self._take(topic, partition)
            producer = ProducerBatch(slot.producer_id, INTERNAL_EPOCH, slot.next_sequence)
            try:
                base = await send(stamp(frame, producer), producer)
            except OutOfOrderSequenceNumber:
                if attempt == 0 and slot.next_sequence != 0:
                    continue  # the leader forgot this id (nothing was written): a new one
                raise
            # Any other failure: written or not, nobody knows; the slot is dropped (not put back).
            slot.next_sequence = (slot.next_sequence + frame.num_rows) % _SEQUENCE_WRAP
            idle = self._idle.setdefault((topic, partition), [])
            if len(idle) < MAX_IDLE_SLOTS:
                idle.append(slot)
            return base
        raise AssertionError("unreachable")

    async def _take(self, topic: str, partition: int) -> Slot:
        idle = self._idle.get((topic, partition))
        if idle:
            return idle.pop()
        if not self._free_ids:
            first, end = await self._allocate(ID_BLOCK_SIZE)
            if not self._free_ids:  # another forward may have refilled it meanwhile
                self._free_ids = list(range(end - 1, first - 1, -1))
        return Slot(self._free_ids.pop())
