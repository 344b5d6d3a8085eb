"""The coordinators serve only state loaded to their partitions' high watermark (issue 35,
finding 2), on a real broker and its real app in-process.

Before: a broker that became the controller kept answering from what it had loaded at
its own start while it reloaded, and when the reload failed for a while it logged
"they serve what they had" and kept serving it: committed offsets went back by
thousands, or to -1. Now the coordinators answer COORDINATOR_LOAD_IN_PROGRESS until
the load is done, then the log's state; a broker that gives them up answers
NOT_COORDINATOR."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from laketail.clock import ManualClock
from laketail.coordinator.fakes import InMemoryLog, InMemoryProducerIdBlocks
from laketail.coordinator.groups import GroupCoordinator
from laketail.coordinator.offsets import (
    OFFSETS_TOPIC,
    CommittedOffset,
    OffsetStore,
    encode_key,
    encode_value,
    partition_for_group,
)
from laketail.coordinator.transactions import TransactionCoordinator
from laketail.errors import CoordinatorLoadInProgress, NotCoordinator
from tests.api_inprocess import assert_error, create_topic, gateway


def _commit(gw, group: str, topic: str, offset: int) -> None:
    resp = gw.post(f"/v1/groups/{group}/commit", json={"offsets": [{"topic": topic, "partition": 0, "offset": offset}]})
    assert resp.status_code == 200, resp.text


def _committed(gw, group: str, topic: str):
    return gw.post(f"/v1/groups/{group}/committed", json={"partitions": [{"topic": topic, "partition": 0}]})


async def _commit_elsewhere(broker, group: str, topic: str, offset: int) -> None:
    """What another controller's coordinator wrote meanwhile: a commit record in the log
    this broker's coordinator has not read."""
    partitions = broker.topic(OFFSETS_TOPIC).partitions
    batch = pa.RecordBatch.from_pydict({
        "key": pa.array([encode_key(group, topic, 0)], pa.binary()),
        "value": pa.array([encode_value(CommittedOffset(offset, "", 1))], pa.binary()),
        "partition": pa.array([partition_for_group(group, partitions)], pa.int32()),
    })
    await broker.produce(OFFSETS_TOPIC, batch, acks="all", internal_topics_allowed=True)


async def _until_loaded(broker) -> None:
    while not broker.coordinators_loaded:
        await asyncio.sleep(0.02)


def test_a_coordinator_taking_over_refuses_until_loaded_then_serves_the_log_not_what_it_had(tmp_path):
    with gateway(tmp_path / "data") as gw:
        create_topic(gw, "t")
        _commit(gw, "g", "t", 5)
        broker = gw.broker
        gw.run(_commit_elsewhere(broker, "g", "t", 9))
        assert _committed(gw, "g", "t").json()["offsets"][0]["offset"] == 5  # what it had

        async def take_over() -> None:
            broker.take_over_coordinators()  # as on becoming the controller again
            with pytest.raises(CoordinatorLoadInProgress):
                broker.check_coordinating()

        gw.run(take_over())
        gw.run(_until_loaded(broker))
        assert _committed(gw, "g", "t").json()["offsets"][0]["offset"] == 9  # the log's state


def test_coordinator_requests_are_refused_while_loading_and_after_giving_up(tmp_path):
    with gateway(tmp_path / "data") as gw:
        create_topic(gw, "t")
        _commit(gw, "g", "t", 3)
        broker = gw.broker

        async def deposed() -> None:
            broker.give_up_coordinators()

        gw.run(deposed())
        assert_error(_committed(gw, "g", "t"), 503, 50305, "NOT_COORDINATOR")
        resp = gw.post("/v1/producers", json={})
        assert_error(resp, 503, 50305, "NOT_COORDINATOR")
        gw.run(deposed())  # giving up twice changes nothing

        async def take_over() -> None:
            broker.take_over_coordinators()

        gw.run(take_over())
        gw.run(_until_loaded(broker))
        assert _committed(gw, "g", "t").json()["offsets"][0]["offset"] == 3


class _Deposed:
    """A fence saying another broker has become the controller meanwhile."""

    def coordinator_epoch(self) -> int:
        return 1

    async def check_coordinator_epoch(self) -> None:
        raise NotCoordinator("broker 2 runs the coordinators now")


def test_a_deposed_coordinator_does_not_acknowledge_a_commit():
    """A paused controller that woke up writes a commit the new coordinators may never
    read; it must not acknowledge it (the client retries at the new coordinator) nor
    serve it from its cache."""

    async def scenario() -> None:
        log = InMemoryLog()
        log.add_topic("t", 1)
        store = OffsetStore(log, ManualClock(), num_partitions=1, replication_factor=1, fence=_Deposed())
        with pytest.raises(NotCoordinator):
            await store.commit("g", {("t", 0): CommittedOffset(7)})
        assert store.committed("g", ("t", 0)) is None

    asyncio.run(scenario())


def test_a_deposed_transaction_coordinator_goes_no_further_than_its_write():
    async def scenario() -> None:
        log = InMemoryLog()
        offsets = OffsetStore(log, ManualClock(), num_partitions=1, replication_factor=1)
        groups = GroupCoordinator(log, offsets, ManualClock())
        txns = TransactionCoordinator(log, log, groups, offsets, ManualClock(), num_partitions=1,
                                      replication_factor=1, producer_ids=InMemoryProducerIdBlocks(),
                                      fence=_Deposed())
        with pytest.raises(NotCoordinator):
            await txns.init_producer_id("app")

    asyncio.run(scenario())
