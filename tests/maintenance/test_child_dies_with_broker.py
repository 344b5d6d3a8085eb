"""Issue 16: a broker killed with ``kill -9`` takes its maintenance child along.

A real broker process (``laketail serve`` with maintenance on) whose maintenance child
is a shell standing in for spark-submit's JVM (:mod:`serve_with_child`): the child
``exec``s, as spark-submit's script execs java, and leaves a worker that holds the read
end of a pipe from it, as the JVM's pyspark daemon holds its stdin. Only the broker's
pid gets the SIGKILL (not its process group, and the child has a group of its own):
the child must die by ``PR_SET_PDEATHSIG``, the worker by EOF.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from conftest import BrokerProcess
from integration.support import process_alive, wait_until

pytestmark = pytest.mark.fault

LAUNCHER = Path(__file__).with_name("serve_with_child.py")


def _pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text else None


class BrokerWithShellChild(BrokerProcess):
    @property
    def argv(self) -> list[str]:
        argv = super().argv
        argv[1:3] = [str(LAUNCHER)]  # "-m laketail.cli" -> the launcher, same arguments
        return [a for a in argv if a != "--no-maintenance"]


def test_a_broker_killed_with_kill_9_takes_its_maintenance_child_and_its_worker_along(tmp_path):
    work = tmp_path / "child"
    work.mkdir()
    child_cmd = (
        f"mkfifo {work}/pipe; cat {work}/pipe > /dev/null & echo $! > {work}/worker.pid; "
        f"exec 3> {work}/pipe; echo $$ > {work}/child.pid; exec sleep 3600"
    )
    broker = BrokerWithShellChild(tmp_path / "data", env={
        "LAKETAIL_MAINTENANCE_INTERVAL_MS": "200",
        "LAKETAIL_TEST_MAINTENANCE_CHILD": child_cmd,
    })
    broker.start()
    try:
        child = wait_until(lambda: _pid(work / "child.pid"), "the maintenance child to start")
        worker = wait_until(lambda: _pid(work / "worker.pid"), "the child's worker to start")
        assert process_alive(child) and process_alive(worker)
        assert os.getpgid(child) == child != os.getpgid(broker.proc.pid)  # a process group of its own
        # the child exec'd (its pid is written just before), as spark-submit execs java
        wait_until(lambda: Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0].endswith(b"sleep"),
                   f"the maintenance child {child} to exec sleep")

        os.kill(broker.proc.pid, signal.SIGKILL)  # the broker alone: no cleanup runs
        broker.proc.wait()
        wait_until(lambda: not process_alive(child), f"the maintenance child {child} to die with its broker")
        wait_until(lambda: not process_alive(worker), f"the child's worker {worker} to end on EOF")
    finally:
        for pid in (_pid(work / "child.pid"), _pid(work / "worker.pid")):
            if pid is not None and process_alive(pid):  # the fix is missing: leave nothing behind
                os.kill(pid, signal.SIGKILL)
        broker.stop()

