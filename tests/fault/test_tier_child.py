"""The tier child (issue 18): each broker tiers in a child process of its own.

Real brokers, real ``kill -9``: a killed child is restarted and the table loses and
duplicates nothing while the broker keeps serving; a broker killed with ``kill -9``
takes its child with it and starts again on the same data.
"""

from __future__ import annotations

import os
import signal

import pytest
from conftest import WITH_TIER_CHILD

from tests.integration.support import (
    child_processes,
    process_alive,
    prom_sample,
    read_table,
    table_offsets,
    wait_for_table,
    wait_until,
)


def _tier_child(broker, not_in: set[int] = frozenset()) -> int:
    """The broker's one tier child (polled until it runs), other than ``not_in``."""

    def one() -> int | None:
        kids = [k for k in child_processes(broker.proc.pid, b"laketail.storage.tier_child") if k not in not_in]
        return kids[0] if len(kids) == 1 else None

    return wait_until(one, f"a tier child of broker {broker.proc.pid} other than {sorted(not_in)}")


def _produce(rest, topic: str, partition: int, n: int, tag: str) -> None:
    resp = rest.produce_binary(topic, [{"value": f"{tag}-{i}".encode()} for i in range(n)], partition=partition)
    assert resp.status_code == 200, resp.text
    assert all(o.get("error_code") is None for o in resp.json()["offsets"]), resp.text


@pytest.mark.fault
def test_a_killed_tier_child_is_restarted_and_the_table_loses_and_duplicates_nothing(broker_factory, make_topic):
    broker = broker_factory(env=WITH_TIER_CHILD)
    topic = make_topic(2, broker=broker)
    rest = broker.rest
    killed: set[int] = set()
    ends = {0: 0, 1: 0}
    for round_ in range(4):
        child = _tier_child(broker, killed)
        for p in (0, 1):  # records waiting to be tiered when the child dies
            _produce(rest, topic, p, 30, f"r{round_}")
            ends[p] += 30
        os.kill(child, signal.SIGKILL)
        killed.add(child)
        for p in (0, 1):  # the broker serves produce and fetch while its child is dead
            _produce(rest, topic, p, 20, f"after{round_}")
            ends[p] += 20
            fetched = rest.fetch_range(topic, p, 0, ends[p])
            assert [r["offset"] for r in fetched] == list(range(ends[p]))
    replacement = _tier_child(broker, killed)
    assert replacement not in killed
    assert prom_sample(rest.http.get("/metrics").text, "laketail_tier_child_restarts_total") == 4
    table = wait_for_table(broker.data_dir / "topics" / topic, ends)
    assert table_offsets(table) == {p: list(range(end)) for p, end in ends.items()}  # unique and contiguous


@pytest.mark.fault
def test_a_broker_killed_with_kill_9_takes_its_tier_child_along_and_starts_again(broker_factory, make_topic):
    broker = broker_factory(env=WITH_TIER_CHILD)
    topic = make_topic(1, broker=broker)
    _produce(broker.rest, topic, 0, 200, "before")
    child = _tier_child(broker)
    os.kill(broker.proc.pid, signal.SIGKILL)  # the broker alone, not its process group
    broker.proc.wait()
    wait_until(lambda: not process_alive(child), f"the tier child {child} to die with its broker")
    broker.restart()
    child = _tier_child(broker)
    _produce(broker.rest, topic, 0, 100, "after")
    assert broker.stop() is not None  # SIGTERM: a clean shutdown, its last pass through the child
    wait_until(lambda: not process_alive(child), f"the tier child {child} to exit with its broker")
    assert table_offsets(read_table(broker.data_dir / "topics" / topic)) == {0: list(range(300))}
