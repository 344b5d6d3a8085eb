"""Delivery guarantees follow from when a consumer commits, shown with crashes.

* Committed offsets survive ``kill -9`` of the broker: v2 and /v1 commits are both
  back after the restart, and a new member resumes right after them.
* A consumer process killed -9 between its two steps: committing before processing
  (at-most-once) loses the batch in flight, processing before committing
  (at-least-once) delivers it twice -- and nothing else is lost or repeated.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from integration.support import wait_until

from .conftest import QUICK_GROUPS
from .support import V1Member, V2Consumer, committed_v1, records_until, unique

pytestmark = [pytest.mark.integration, pytest.mark.fault]

CONSUMER = Path(__file__).with_name("crashing_consumer.py")
#: Failure bound for the restarted consumer (it waits for the dead member's session).
CONSUMER_TIMEOUT_S = 120.0


def test_committed_offsets_survive_kill_9(broker_factory: Any, make_topic: Any) -> None:
    broker = broker_factory(env=QUICK_GROUPS)
    topic = make_topic(2, broker=broker)
    for p in range(2):
        resp = broker.rest.produce_binary(topic, [{"value": b"%d-%d" % (p, i)} for i in range(5)], partition=p)
        assert resp.status_code == 200, resp.text
    v2_group, v1_group = unique("v2-durable"), unique("v1-durable")

    consumer = V2Consumer(broker.url, v2_group, "c", **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    assert consumer.subscribe([topic]).status_code == 204
    records_until(consumer, lambda seen: len(seen) >= 10, "all ten records")
    assert consumer.commit([(topic, 0, 1), (topic, 1, 3)]).status_code == 200
    consumer.close()
    standalone = V1Member(broker.url, v1_group, [topic])
    assert standalone.commit({(topic, 0): 5, (topic, 1): 0}, generation_id=-1).status_code == 200
    standalone.close()

    broker.kill9()
    broker.restart()

    tps = [(topic, 0), (topic, 1)]
    assert committed_v1(broker.url, v2_group, tps) == {(topic, 0): 2, (topic, 1): 4}
    assert committed_v1(broker.url, v1_group, tps) == {(topic, 0): 5, (topic, 1): 0}
    resumed = V2Consumer(broker.url, v2_group, "after-restart", **{"auto.offset.reset": "none"})
    assert resumed.subscribe([topic]).status_code == 204
    assert resumed.committed(tps) == {(topic, 0): 2, (topic, 1): 4}
    read = records_until(resumed, lambda seen: len(seen) >= 4, "the four records after the commits")
    assert sorted((r["partition"], r["offset"]) for r in read) == [(0, 2), (0, 3), (0, 4), (1, 4)]
    assert resumed.delete().status_code == 204
    resumed.close()


def _consumer(url: str, group: str, topic: str, mode: str, processed: Path, *extra: str) -> list[str]:
    return [sys.executable, str(CONSUMER), url, group, topic, mode, str(processed), "--batch", "10", *extra]


@pytest.mark.parametrize("mode", ["at-most-once", "at-least-once"])
def test_a_consumer_killed_between_commit_and_processing(
    groups_broker: Any, make_topic: Any, tmp_path: Path, mode: str
) -> None:
    topic = make_topic(1, broker=groups_broker)
    resp = groups_broker.rest.produce_binary(topic, [{"value": b"r%d" % i} for i in range(40)], partition=0)
    assert resp.status_code == 200, resp.text
    group = unique(mode)
    processed, marker = tmp_path / "processed", tmp_path / "between"

    crashing = subprocess.Popen(
        _consumer(groups_broker.url, group, topic, mode, processed, "--crash-batch", "2", "--marker", str(marker)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        wait_until(lambda: marker.exists() or crashing.poll() is not None, "the consumer to reach batch 2")
        assert crashing.poll() is None, crashing.communicate()[0].decode(errors="replace")
    finally:
        os.killpg(crashing.pid, signal.SIGKILL)
        crashing.communicate()

    restarted = subprocess.run(
        _consumer(groups_broker.url, group, topic, mode, processed, "--until", "40"),
        capture_output=True, timeout=CONSUMER_TIMEOUT_S,
    )
    assert restarted.returncode == 0, restarted.stderr.decode(errors="replace")

    offsets = [int(line) for line in processed.read_text().split()]
    if mode == "at-most-once":
        # Batch 2 (20..29) was committed, then the process died: nobody ever processes it.
        assert offsets == list(range(0, 20)) + list(range(30, 40))
    else:
        # Batch 2 was processed, then the process died before committing: it comes again.
        assert offsets == list(range(0, 30)) + list(range(20, 40))
    assert committed_v1(groups_broker.url, group, [(topic, 0)]) == {(topic, 0): 40}
