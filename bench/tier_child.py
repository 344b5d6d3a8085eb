"""Issue 18 (a): the tier child against in-process tiering, on the same code.

Two measurements, each alternating a broker with ``laketail.tierer.process=false``
(tiering in a worker thread of the broker, as before issue 18) and one with the
default (tiering in the broker's tier child):

* CPU under REST produce (v2 binary, batch 100, acks=1, wrk -c8, 10 s): the broker
  process's CPU per request, and the tier child's;
* produce p99 at 200 req/s (1 record, acks=1, 20 s windows) while the tierer commits.

``.venv/bin/python -m bench.tier_child [rounds]``; prints one JSON line per window with
the load average (the machine may be shared). Not part of ``make bench``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import bodies, client, wrk
from bench.latency import paced_produce
from bench.procs import LaketailServer, cpu_seconds
from bench.stats import summary


class Broker(LaketailServer):
    """A bench broker with the tier child on or off."""

    def __init__(self, workdir: Path, process: bool) -> None:
        super().__init__(workdir)
        self.process = process

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["LAKETAIL_TIERER_PROCESS"] = "true" if self.process else "false"
        return env

    def children(self) -> list[int]:
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self.pid:
                    out.append(int(entry))
        return out


def cpu_window(broker: Broker, workdir: Path, seconds: int) -> dict:
    body = bodies.v2_binary(bodies.values(100, 100))
    url = f"{broker.url}/topics/cpu?acks=1"
    kids = broker.children()
    c0, k0, t0 = cpu_seconds(broker.pid), sum(cpu_seconds(k) for k in kids), time.monotonic()
    r = wrk.run(url, duration_s=seconds, warmup_s=0, workdir=workdir, method="POST", body=body,
                content_type=bodies.V2_BINARY, connections=8)
    wall = time.monotonic() - t0
    c1, k1 = cpu_seconds(broker.pid), sum(cpu_seconds(k) for k in kids)
    requests = r.requests_per_s * wall
    return {"what": "cpu", "process": broker.process, "requests_per_s": round(r.requests_per_s, 1),
            "broker_cpu_ms_per_request": round(1000 * (c1 - c0) / requests, 3),
            "child_cpu_ms_per_request": round(1000 * (k1 - k0) / requests, 3)}


def latency_window(broker: Broker, seconds: int) -> dict:
    r = client.run(paced_produce(broker.url, "/topics/lat?acks=1", 200, seconds, 100))
    s = summary(r.latencies_ms())
    return {"what": "produce at 200 req/s", "process": broker.process, "errors": r.errors,
            **{k: round(v, 2) for k, v in s.items() if k.endswith("_ms")}}


def main(rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="laketail-tier-child-"))
    brokers = {p: Broker(root / str(p), p).start() for p in (False, True)}
    try:
        for b in brokers.values():
            b.create_topic("cpu", 4)
            b.create_topic("lat", 1)
        for _ in range(rounds):
            for b in brokers.values():
                print(json.dumps({**cpu_window(b, root, 10), "load": os.getloadavg()}), flush=True)
        for _ in range(rounds):
            for b in brokers.values():
                print(json.dumps({**latency_window(b, 20), "load": os.getloadavg()}), flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(root, ignore_errors=True)  # gigabytes of segments and Parquet


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
