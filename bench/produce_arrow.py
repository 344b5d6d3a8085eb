"""Benchmark 2: Arrow IPC produce MB/s against sequential writes with fdatasync.

laketail gets ``POST /v1/topics/{t}/records`` (``application/vnd.apache.arrow.stream``,
acks=all, which is acks=1 with one replica) from wrk, every request the same Arrow
stream of 1,000 values of 1,000 random bytes (about 1 MB). The baseline writes those
same bytes to a file on the same disk (the broker's data root), one ``os.write`` plus
``os.fdatasync`` per body, for as long; the two alternate ``repeats`` times and each
side's median is kept. MB/s counts request-body bytes on both sides.
"""

from __future__ import annotations

import os
import time

from bench import bodies, wrk
from bench.context import Context
from bench.figures import AT_LEAST, Figure

BENCH = "2 Arrow IPC produce"
TOPIC = "bench-arrow"


def fdatasync_mb_s(path: os.PathLike, body: bytes, seconds: float) -> tuple[float, int]:
    """MB/s of write(body) + fdatasync, appended sequentially for ``seconds``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        writes = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
            writes += 1
        elapsed = time.monotonic() - started
    finally:
        os.close(fd)
        os.unlink(path)
    return writes * len(body) / elapsed / 1e6, writes


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    broker = ctx.laketail("arrow")
    broker.create_topic(TOPIC, 4)
    body = bodies.arrow_stream(bodies.values(p.arrow_records, p.arrow_value_bytes))
    url = f"{broker.url}/v1/topics/{TOPIC}/records?acks=all"

    def drive() -> wrk.WrkResult:
        return wrk.run(url, duration_s=p.seconds, warmup_s=p.warmup_s, workdir=ctx.workdir,
                       method="POST", body=body, content_type=bodies.ARROW_STREAM,
                       connections=p.arrow_connections, server_pid=broker.pid)

    bases: list[tuple[float, int]] = []
    runs: list[wrk.WrkResult] = []
    for i in range(max(1, p.repeats)):
        ctx.status(f"write + fdatasync, then laketail Arrow produce ({i + 1}/{p.repeats})")
        bases.append(fdatasync_mb_s(broker.data / "fdatasync.bin", body, p.seconds))
        runs.append(drive())
    base_mb_s, writes = sorted(bases)[len(bases) // 2]
    r = wrk.median(runs)
    fig = Figure(
        BENCH, f"{p.arrow_records} x {p.arrow_value_bytes} B per request", r.requests_per_s * len(body) / 1e6,
        "MB/s", f"write+fdatasync of the same {len(body) / 1e6:.2f} MB", base_mb_s, AT_LEAST(0.5),
        details={"laketail": r.as_dict(), "body_bytes": len(body), "baseline_writes": writes,
                 "runs": {"baseline_mb_s": [round(b[0], 1) for b in bases],
                          "laketail_mb_s": [round(x.requests_per_s * len(body) / 1e6, 1) for x in runs]},
                 "records_per_s": r.requests_per_s * p.arrow_records},
    )
    ctx.explain(fig, broker.pid, p.seconds, drive)
    ctx.stop(broker)
    return [fig]
