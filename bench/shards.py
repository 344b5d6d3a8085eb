"""Issue 18: REST produce from one request process to two, on one core and on two.

Four brokers of the same code take turns under benchmark 1's load (v2 binary, 100-byte
values, ``batch`` records per request, acks=1, a 4-partition topic, wrk -c8 on
``POST /topics/{t}``, wrk itself not pinned), with the bare FastAPI endpoint of
benchmark 1 (:mod:`bench.baseline_app`, one process, not pinned) between them:

* ``1 process, CPU 0``: ``serve`` under ``taskset -c 0`` (its threads, children and
  tier child alike);
* ``2 processes, CPU 0``: ``serve --processes 2`` under ``taskset -c 0``: what the
  split costs when it gains no core;
* ``1 process, all CPUs`` and ``2 processes, all CPUs``.

Each window records records/s, the CPU of the request processes (the first and the
ones it started) and of their tier children in cores and per request, how wrk's eight
connections fell on the processes (the kernel's ``SO_REUSEPORT`` hash), wrk's CPU and
the load average. The summary gives each configuration's median window, its ratio to
the bare endpoint's median, and the growth from one core to two; :func:`predict`
turns the two-process figures into what 8 and 16 cores would give, and says on what
that rests. Results go to ``results/<date>-shards.json``.

``.venv/bin/python -m bench.shards [rounds] [batch] [fsync]`` (default 3 rounds,
batch 100): ``fsync`` gives the topic ``flush.messages=1`` instead of Kafka's default.
Not part of ``make bench``: it runs about a minute per round.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import bodies, wrk
from bench.cores import FSYNC
from bench.procs import BaselineServer, LaketailServer, children, cpu_seconds, own_cpu_seconds

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "shards"
SECONDS = 6


class ShardedBroker(LaketailServer):
    """``serve --processes N``, under ``taskset -c <cpus>`` unless ``cpus`` is None."""

    def __init__(self, workdir: Path, processes: int, cpus: str | None) -> None:
        super().__init__(workdir, processes=processes)
        self.cpus = cpus
        self.label = f"{processes} process{'es' if processes > 1 else ''}, " + (
            f"CPU {cpus}" if cpus is not None else "all CPUs")

    def command(self) -> list[str]:
        pin = ["taskset", "-c", self.cpus] if self.cpus is not None else []
        return pin + super().command() + ["--no-maintenance"]

    def request_pids(self) -> list[int]:
        return [self.pid, *children(self.pid, b"--request-process")]


def _tier_cpu(broker: ShardedBroker) -> float:
    """CPU seconds so far of the tier children of every request process."""
    total = 0.0
    for pid in broker.request_pids():
        for kid in children(pid, b"laketail.storage.tier_child"):
            try:
                total += own_cpu_seconds(kid)
            except OSError:
                pass
    return total


def _connections(broker: ShardedBroker) -> list[int]:
    """Established client connections on the broker's port held by each request process."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == broker.port and cols[3] == "01":  # local port, ESTABLISHED
                inodes.add(cols[9])
    counts = []
    for pid in broker.request_pids():
        n = 0
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                n += link.startswith("socket:[") and link[8:-1] in inodes
        except OSError:
            pass
        counts.append(n)
    return counts


def window(broker: ShardedBroker, root: Path, body: bytes, batch: int) -> dict:
    spread: list[int] = []

    def sample() -> None:
        spread[:] = _connections(broker)

    before, tier_before, started = cpu_seconds(broker.pid), _tier_cpu(broker), time.monotonic()
    timer = threading.Timer(2.0 + SECONDS / 2, sample)  # after the warm-up, while wrk runs
    timer.start()
    r = wrk.run(f"{broker.url}/topics/{TOPIC}?acks=1", duration_s=SECONDS, warmup_s=2, workdir=root,
                method="POST", body=body, content_type=bodies.V2_BINARY, connections=8)
    timer.join()
    wall = time.monotonic() - started
    after, tier_after = cpu_seconds(broker.pid), _tier_cpu(broker)
    cores = (after - before) / wall
    return {"config": broker.label, "records_per_s": round(r.requests_per_s * batch),
            "request_cores": round(cores, 2), "tier_cores": round((tier_after - tier_before) / wall, 2),
            "cpu_ms_per_request": round(1000 * cores / r.requests_per_s, 3),
            "connections_per_process": spread, "p99_ms": round(r.p99_ms, 1),
            "wrk_cores": round(r.wrk_cpu, 2), "load": [round(x, 1) for x in os.getloadavg()]}


def baseline_window(base: BaselineServer, root: Path, body: bytes, batch: int) -> dict:
    r = wrk.run(base.url + "/produce", duration_s=SECONDS, warmup_s=2, workdir=root, method="POST", body=body,
                content_type=bodies.V2_BINARY, connections=8, server_pid=base.pid)
    return {"config": "bare endpoint", "records_per_s": round(r.requests_per_s * batch),
            "request_cores": round(r.server_cpu or 0.0, 2),
            "cpu_ms_per_request": round(1000 * (r.server_cpu or 0.0) / r.requests_per_s, 3),
            "wrk_cores": round(r.wrk_cpu, 2), "load": [round(x, 1) for x in os.getloadavg()]}


def predict(medians: dict[str, dict]) -> dict:
    """8 and 16 cores from the two-process windows: throughput grows with processes as
    long as each one gets a core of its own and wrk, the kernel's network work and the
    tier children take the rest; per process it stays at what one process did with a
    core to itself. The efficiency of the step from one core to two (two processes
    against twice one pinned process) is carried on to each doubling."""
    one = medians["1 process, CPU 0"]["records_per_s"]
    two = medians["2 processes, all CPUs"]["records_per_s"]
    efficiency = two / (2 * one) if one else 0.0
    return {"one_core_records_per_s": one, "two_cores_records_per_s": two,
            "growth_1_to_2_cores": round(two / one, 2) if one else None,
            "efficiency_per_doubling": round(efficiency, 2),
            "predicted_8_cores": round(one * 8 * efficiency ** 2),
            "predicted_16_cores": round(one * 16 * efficiency ** 3)}


def main(rounds: int, batch: int, fsync: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="laketail-shards-"))
    body = bodies.v2_binary(bodies.values(batch, 100))
    base = BaselineServer(root / "baseline").start()
    brokers = [ShardedBroker(root / "p1-cpu0", 1, "0"), ShardedBroker(root / "p2-cpu0", 2, "0"),
               ShardedBroker(root / "p1-all", 1, None), ShardedBroker(root / "p2-all", 2, None)]
    windows: list[dict] = []
    try:
        for b in brokers:
            b.start()
            b.create_topic(TOPIC, 4, FSYNC if fsync else None)
        for _ in range(rounds):
            for w in [baseline_window(base, root, body, batch)] + [window(b, root, body, batch) for b in brokers]:
                print(json.dumps(w), flush=True)
                windows.append(w)
    finally:
        for b in brokers:
            b.stop()
        base.stop()
        shutil.rmtree(root, ignore_errors=True)  # gigabytes of segments and Parquet
    medians = {}
    for label in dict.fromkeys(w["config"] for w in windows):
        mine = sorted((w for w in windows if w["config"] == label), key=lambda w: w["records_per_s"])
        medians[label] = mine[len(mine) // 2]
    bare = medians["bare endpoint"]["records_per_s"]
    summary = {label: {"records_per_s": m["records_per_s"], "ratio_to_bare": round(m["records_per_s"] / bare, 2),
                       "cpu_ms_per_request": m["cpu_ms_per_request"]} for label, m in medians.items()}
    result = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ"), "batch": batch, "fsync": fsync,
              "rounds": rounds, "cpus": os.cpu_count(), "windows": windows, "medians": summary,
              "prediction": predict(medians)}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{result['when']}-shards.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"medians": summary, "prediction": result["prediction"]}, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 3, int(args[1]) if len(args) > 1 else 100, "fsync" in args[2:])
