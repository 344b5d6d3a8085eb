"""A hypothesis state machine over the in-process cluster (``tests/cluster/harness.py``):
brokers cut off, pairs cut, brokers stalled, the network healed, the clock moved, ISR
checks, produces; after every step the safety rules hold:

* no two brokers ever lead a partition at the same leader epoch, and an epoch names one
  leader for all time (in every image and at the controller);
* a partition's ISR is a subset of its replicas, and holds its leader when it has one;
* a broker's high watermark never goes back;
* a record acknowledged with ``acks=all`` is in the log of the partition's leader.

Each example starts a fresh cluster (about 2.5 s), so the examples are few and short
(random each run; a failure is shrunk and reported with its seed). Checked against a
controller broken on purpose (a new leader keeping the old epoch): it found it.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from laketail.cluster.metadata import NO_LEADER
from laketail.errors import LaketailError
from laketail.produce_path import PRODUCE_SCHEMA
from tests.cluster.harness import Cluster

BROKERS = (1, 2, 3)
PARTITIONS = 2
_SCHEMA = pa.schema([PRODUCE_SCHEMA.field("value"), PRODUCE_SCHEMA.field("partition")])


class ClusterStates(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory(prefix="laketail-states-")
        self.cluster = Cluster(Path(self.tmp.name))
        self.epoch_leader: dict[tuple[int, int], int] = {}  # (partition, leader epoch) -> leader
        self.hw: dict[tuple[int, int], int] = {}  # (broker, partition) -> highest HW seen
        self.acked: dict[int, int] = {}  # partition -> highest offset acknowledged with acks=all
        self.sent = 0
        self._run(self._start())

    def _run(self, coro):
        return self.loop.run_until_complete(coro)

    async def _start(self) -> None:
        c = self.cluster
        for b in BROKERS:
            await c.start(b)
        await c.controller().create_topic("t", PARTITIONS, 3, {"min.insync.replicas": "2"})
        await c.until("t taken up", lambda: c.converged("t", PARTITIONS))

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self._run(self.cluster.close())
        self.loop.close()
        self.tmp.cleanup()

    # -- faults ------------------------------------------------------------------------------------

    @rule(broker=st.sampled_from(BROKERS))
    def isolate(self, broker: int) -> None:
        self.cluster.network.isolated.add(broker)

    @rule(a=st.sampled_from(BROKERS), b=st.sampled_from(BROKERS))
    def cut(self, a: int, b: int) -> None:
        if a != b:
            self.cluster.network.cuts.add(frozenset((a, b)))

    @rule(partition=st.integers(0, PARTITIONS - 1), stall=st.booleans())
    def isolate_a_leader(self, partition: int, stall: bool) -> None:
        """The faults that matter most, made likely: the partition's leader cut off
        (running, or stalled too)."""
        for b in self.cluster.brokers.values():
            if b.cluster.replicas.leads("t", partition):
                self.cluster.network.isolated.add(b.broker_id)
                if stall:
                    self.cluster.paused.add(b.broker_id)

    @rule(broker=st.sampled_from(BROKERS))
    def stall(self, broker: int) -> None:
        self.cluster.paused.add(broker)

    @rule()
    def heal(self) -> None:
        self.cluster.network.heal()
        self.cluster.paused.clear()

    @rule(ms=st.sampled_from([2_000, 10_000]))
    def advance(self, ms: int) -> None:
        self._run(self.cluster.advance(ms))

    @rule()
    def check_isr(self) -> None:
        async def round_of_isr_checks() -> None:  # in the loop: a shrink is sent as a task
            self.cluster.check_isr()
            await self.cluster.settle()

        self._run(round_of_isr_checks())

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def produce(self, partition: int) -> None:
        c = self.cluster
        leaders = [b for b in c.brokers.values() if b.cluster.replicas.leads("t", partition)
                   and b.broker_id not in c.paused and not b.cluster.fenced]
        if not leaders:
            return
        broker = leaders[0]
        self.sent += 1
        batch = pa.RecordBatch.from_pydict({"value": [b"v%d" % self.sent], "partition": [partition]}, schema=_SCHEMA)

        async def send():
            return await asyncio.wait_for(broker.produce("t", batch, acks="all"), 1.0)

        try:
            result = self._run(send())
        except (LaketailError, TimeoutError):
            return  # refused or not known to be replicated: nothing to hold it to
        self.acked[partition] = max(self.acked.get(partition, -1), list(result.offsets)[-1])

    # -- safety ------------------------------------------------------------------------------------

    def _registrations(self):
        c = self.cluster
        for b in c.brokers.values():
            yield from b.cluster.image.partitions.values()
            controller = b.cluster.active_controller
            if controller is not None:
                yield from controller.partitions.values()

    @invariant()
    def an_epoch_names_one_leader(self) -> None:
        for reg in self._registrations():
            if reg.leader == NO_LEADER:
                continue
            key = (reg.partition, reg.leader_epoch)
            assert self.epoch_leader.setdefault(key, reg.leader) == reg.leader, (key, self.epoch_leader[key], reg)

    @invariant()
    def one_broker_leads_an_epoch(self) -> None:
        for p in range(PARTITIONS):
            epochs = [b.cluster.replicas.leader_epoch("t", p) for b in self.cluster.brokers.values()
                      if not b.cluster.fenced]
            led = [e for e in epochs if e is not None]
            assert len(led) == len(set(led)), (p, led)

    @invariant()
    def the_isr_is_replicas_and_holds_the_leader(self) -> None:
        for reg in self._registrations():
            assert set(reg.isr) <= set(reg.replicas), reg
            assert reg.isr, reg
            assert reg.leader == NO_LEADER or reg.leader in reg.isr, reg

    @invariant()
    def the_high_watermark_never_goes_back(self) -> None:
        for b in self.cluster.brokers.values():
            for p in range(PARTITIONS):
                hw = b.logs.get("t", p).high_watermark
                assert hw >= self.hw.get((b.broker_id, p), 0), (b.broker_id, p, hw, self.hw)
                self.hw[(b.broker_id, p)] = hw

    @invariant()
    def acknowledged_records_are_on_the_leader(self) -> None:
        c = self.cluster
        for p, offset in self.acked.items():
            for b in c.brokers.values():
                if b.cluster.replicas.leads("t", p) and not b.cluster.fenced:
                    assert b.logs.get("t", p).log_end_offset > offset, (b.broker_id, p, offset)


ClusterStates.TestCase.settings = settings(
    max_examples=6, stateful_step_count=15, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cluster_states = ClusterStates.TestCase
