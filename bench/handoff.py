"""Issue 41: what the local hand-off between request processes costs per request.

Two parts, each a ratio or a cost measured in this run on this machine:

* ``micro``: a keyed request of ``batch`` records over 4 partitions, two of them led by
  the sibling (murmur2 as the broker partitions them). Its two frames are handed over a
  real Unix socket (:mod:`laketail.handoff`) to a server in the same event loop whose
  append does nothing, so what is timed is the hand-off alone: encoding, the socket,
  decoding, the answer, both sides' CPU together. Sequentially (latency) and with 8 in
  flight (CPU per request: ``time.process_time`` over the requests).
* ``wrk`` (optional, ``--wrk``): keyed v2 binary produce, ``batch`` records over 4
  partitions, 100-byte values, acks=1, wrk with 8 connections, against ``laketail serve
  --processes 2`` of this code, the same of another checkout's interpreter (``--before
  PYTHON``: its keyed records were forwarded over HTTP), and ``--processes 1``.

``.venv/bin/python -m bench.handoff [--batch 100] [--wrk] [--before /work/main/.venv/bin/python]``.
Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
import pyarrow as pa

from bench import bodies, wrk
from bench.procs import LaketailServer, Server, live_members
from laketail.handoff import Append, HandoffClient, HandoffServer, decode_handoff, encode_handoff, socket_path
from laketail.partitioner import partition_for_key
from laketail.records import CREATE_TIME, TIMESTAMP_TYPE, build_frame_batch, null_headers

PARTITIONS = 4
SIBLINGS = (2, 3)  # the partitions the other process leads


def _keyed(batch: int) -> tuple[list[bytes], list[bytes]]:
    keys = [f"key-{i}".encode() for i in range(batch)]
    return keys, bodies.values(batch, 100)


def sibling_appends(batch: int) -> list[Append]:
    """The appends a keyed request of ``batch`` records hands to the sibling."""
    keys, vals = _keyed(batch)
    out = []
    for p in SIBLINGS:
        rows = [i for i, k in enumerate(keys) if partition_for_key(k, PARTITIONS) == p]
        n = len(rows)
        frame = build_frame_batch(timestamps_us=pa.repeat(pa.scalar(1_000_000, TIMESTAMP_TYPE), n),
                                  keys=pa.array([keys[i] for i in rows], pa.binary()),
                                  values=pa.array([vals[i] for i in rows], pa.binary()),
                                  headers=null_headers(n), timestamp_type=CREATE_TIME)
        out.append(Append(p, frame))
    return out


def micro(batch: int, requests: int) -> dict:
    appends = sibling_appends(batch)
    raw = encode_handoff(1, "bench", appends, "1", None)
    started = time.process_time()  # CPU time: a shared machine's waits are not the codec's
    for _ in range(requests):
        decode_handoff(encode_handoff(1, "bench", appends, "1", None)[4:])
    codec_us = (time.process_time() - started) / requests * 1e6

    async def run() -> dict:
        async def wait_leads(topic: str, partition: int) -> None:
            return None

        async def append(*_) -> int:
            return 0

        with tempfile.TemporaryDirectory() as tmp:
            server = HandoffServer(socket_path(Path(tmp), 1), wait_leads, append)
            await server.start()
            client = HandoffClient(Path(tmp), timeout_s=30)
            try:
                await client.send(1, "bench", appends, "1")  # connect
                t0 = time.perf_counter()
                for _ in range(requests):
                    await client.send(1, "bench", appends, "1")
                sequential_us = (time.perf_counter() - t0) / requests * 1e6

                async def sender(n: int) -> None:
                    for _ in range(n):
                        await client.send(1, "bench", appends, "1")

                cpu0, t0 = time.process_time(), time.perf_counter()
                await asyncio.gather(*(sender(requests // 8) for _ in range(8)))
                done = 8 * (requests // 8)
                cpu_us = (time.process_time() - cpu0) / done * 1e6
                wall_us = (time.perf_counter() - t0) / done * 1e6
            finally:
                await client.close()
                await server.close()
        return {"sequential_us_per_request": round(sequential_us, 1),
                "cpu_us_per_request_8_in_flight": round(cpu_us, 1),
                "wall_us_per_request_8_in_flight": round(wall_us, 1)}

    result = {"batch": batch, "records_handed": sum(a.frame.num_rows for a in appends), "handoff_bytes": len(raw),
              "encode_decode_cpu_us": round(codec_us, 1)}
    result.update(asyncio.run(run()))
    return result


class _Checkout(LaketailServer):
    """A bench broker run by another checkout's interpreter (its own laketail)."""

    def __init__(self, workdir: Path, processes: int, python: str) -> None:
        super().__init__(workdir, processes=processes)
        self.python = python

    def command(self) -> list[str]:
        return [self.python, *super().command()[1:]]

    def start(self, timeout_s: float = 90.0) -> "_Checkout":
        """Started once every request process is listed, whatever ids its code gives them."""
        Server.start(self, timeout_s)
        deadline = time.monotonic() + timeout_s
        while len(live_members(self.data)) != self.processes:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"not all {self.processes} request processes registered")
            time.sleep(0.2)
        self.cluster_id = httpx.get(self.url + "/v3/clusters").json()["data"][0]["cluster_id"]
        return self


def keyed_body(batch: int) -> bytes:
    keys, vals = _keyed(batch)
    return orjson.dumps({"records": [{"key": base64.b64encode(k).decode(), "value": base64.b64encode(v).decode()}
                                     for k, v in zip(keys, vals)]})


def wrk_runs(batch: int, seconds: int, before: str | None) -> list[dict]:
    root = Path(tempfile.mkdtemp(prefix="laketail-handoff-"))
    body = keyed_body(batch)
    rows = []
    cases: list[tuple[str, int, str]] = [("this code, --processes 2", 2, sys.executable),
                                         ("this code, --processes 1", 1, sys.executable)]
    if before:
        cases.insert(1, (f"{before}, --processes 2", 2, before))
    for i, (name, processes, python) in enumerate(cases):
        broker = _Checkout(root / f"b{i}", processes, python).start()
        try:
            broker.create_topic("keyed", PARTITIONS)
            r = wrk.run(f"{broker.url}/topics/keyed?acks=1", duration_s=seconds, warmup_s=2, workdir=root,
                        method="POST", body=body, content_type=bodies.V2_BINARY, connections=8,
                        server_pid=broker.pid)
            metrics = ""
            if processes > 1:
                metrics = " ".join(line for line in httpx.get(broker.url + "/metrics").text.splitlines()
                                   if line.startswith(("laketail_request_process_handoffs_total",
                                                       "laketail_produce_forwards_http_total")))
            rows.append({"server": name, "records_per_s": round(r.requests_per_s * batch),
                         "p50_ms": round(r.p50_ms, 2), "server_cores": r.server_cpu and round(r.server_cpu, 2),
                         "cpu_ms_per_request": r.server_cpu and round(1000 * r.server_cpu / r.requests_per_s, 3),
                         "load": [round(x, 1) for x in os.getloadavg()], "counters_one_process": metrics})
        finally:
            broker.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--wrk", action="store_true")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--before", metavar="PYTHON", help="another checkout's interpreter to compare with")
    args = parser.parse_args()
    out: dict = {"micro": micro(args.batch, args.requests), "load": [round(x, 1) for x in os.getloadavg()]}
    print(json.dumps(out, indent=1), flush=True)
    if args.wrk:
        print(json.dumps(wrk_runs(args.batch, args.seconds, args.before), indent=1))


if __name__ == "__main__":
    main()
