"""Issue 18: how REST produce grows from one core to two.

Two brokers of the same code, one pinned to CPU 0 (``taskset -c 0``, its threads and
its tier child alike) and one free to use every CPU, take turns under the load of
benchmark 1 (v2 binary, 100-byte values, batch 1000 by default, acks=1, 4 partitions,
wrk -c8; wrk itself is not pinned). Each window prints records/s, the broker's CPU in
cores and per request, and the load average (the machine may be shared).

``.venv/bin/python -m bench.cores [rounds] [batch] [fsync]``: ``fsync`` gives the topic
``flush.messages=1`` (an fsync per group commit, laketail's default until issue 18)
instead of Kafka's default (none), so that the disk's fsync latency joins the bounds.
Not part of ``make bench``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench import bodies, wrk
from bench.procs import LaketailServer


class PinnedBroker(LaketailServer):
    """A bench broker started under ``taskset -c <cpus>`` (``None``: not pinned)."""

    def __init__(self, workdir: Path, cpus: str | None) -> None:
        super().__init__(workdir)
        self.cpus = cpus
        self.fsync = True

    def command(self) -> list[str]:
        pin = ["taskset", "-c", self.cpus] if self.cpus is not None else []
        return pin + super().command()  # taskset execs the broker: same pid


def window(broker: PinnedBroker, workdir: Path, batch: int, seconds: int) -> dict:
    body = bodies.v2_binary(bodies.values(batch, 100))
    r = wrk.run(f"{broker.url}/topics/cores?acks=1", duration_s=seconds, warmup_s=1, workdir=workdir,
                method="POST", body=body, content_type=bodies.V2_BINARY, connections=8,
                server_pid=broker.pid)
    return {"cpus": broker.cpus or "all", "batch": batch, "fsync": broker.fsync,
            "records_per_s": round(r.requests_per_s * batch),
            "broker_cores": r.server_cpu and round(r.server_cpu, 2),
            "cpu_ms_per_request": r.server_cpu and round(1000 * r.server_cpu / r.requests_per_s, 3),
            "wrk_cores": round(r.wrk_cpu, 2), "load": [round(x, 1) for x in os.getloadavg()]}


#: An fsync at every group commit (the default is Kafka's: none).
FSYNC = {"flush.messages": "1"}


def main(rounds: int, batch: int, fsync: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="laketail-cores-"))
    brokers = [PinnedBroker(root / "one", "0").start(), PinnedBroker(root / "all", None).start()]
    try:
        for b in brokers:
            b.fsync = fsync
            b.create_topic("cores", 4, FSYNC if fsync else None)
        for _ in range(rounds):
            for b in brokers:
                print(json.dumps(window(b, root, batch, 8)), flush=True)
    finally:
        for b in brokers:
            b.stop()
        shutil.rmtree(root, ignore_errors=True)  # gigabytes of segments and Parquet


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 3, int(args[1]) if len(args) > 1 else 1000, "fsync" in args[2:])
