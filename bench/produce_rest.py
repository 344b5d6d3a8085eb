"""Benchmark 1: REST produce (Confluent v2 binary) against the bare FastAPI endpoint.

Both servers get the same body (100-byte random values, batches of 1, 100, 1000) from
wrk with 8 connections, baseline and laketail alternating ``repeats`` times (median
kept, every run in ``details.runs``); laketail's topic has 4 partitions and is produced with acks=1
and acks=all. The baseline parses the body with orjson and base64-decodes every value
(``POST /produce`` of :mod:`bench.baseline_app`). records/s = requests/s x batch.

Load-generator evidence: wrk against ``GET /static`` and ``POST /sink`` (the largest
body, read and dropped), and the CPU share the wrk process used in every run.
"""

from __future__ import annotations

from bench import bodies, wrk
from bench.context import Context
from bench.figures import AT_LEAST, Figure
from bench.procs import LaketailServer

BENCH = "1 REST produce"
TOPIC = "bench-rest"


def cpu_per_request(r: wrk.WrkResult) -> float | None:
    """Server CPU milliseconds per request: what one request costs, whatever the load."""
    return None if r.server_cpu is None else 1000 * r.server_cpu / r.requests_per_s


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    base = ctx.baseline()

    def drive(url: str, body: bytes | None, pid: int, method: str = "POST") -> wrk.WrkResult:
        return wrk.run(url, duration_s=p.seconds, warmup_s=p.warmup_s, workdir=ctx.workdir,
                       method=method, body=body, content_type=bodies.V2_BINARY if body else None,
                       connections=p.connections, server_pid=pid)

    largest = bodies.v2_binary(bodies.values(max(p.batches), p.value_bytes))
    ctx.status("wrk against GET /static")
    static = drive(base.url + "/static", None, base.pid, method="GET")
    ctx.status("wrk against POST /sink")
    sink = drive(base.url + "/sink", largest, base.pid)
    loadgen = {"static_rps": static.requests_per_s, "static_wrk_cpu": static.wrk_cpu,
               f"sink_rps_batch_{max(p.batches)}": sink.requests_per_s, "sink_wrk_cpu": sink.wrk_cpu}

    def figure(broker: LaketailServer, suffix: str, batch: int, acks: str) -> Figure:
        body = bodies.v2_binary(bodies.values(batch, p.value_bytes))
        ctx.status(f"baseline and laketail acks={acks}, batch {batch}{suffix} (x{p.repeats})")
        url = f"{broker.url}/topics/{TOPIC}?acks={acks}"
        b, r, spread = wrk.interleaved(lambda: drive(base.url + "/produce", body, base.pid),
                                       lambda: drive(url, body, broker.pid), p.repeats)
        fig = Figure(
            BENCH, f"acks={acks}, batch {batch}{suffix}", r.requests_per_s * batch, "records/s",
            f"bare FastAPI parse+b64 (batch {batch})", b.requests_per_s * batch,
            AT_LEAST(0.7) if batch >= 100 else None,
            details={"laketail": r.as_dict(), "baseline": b.as_dict(), "runs": spread,
                     "body_bytes": len(body), "loadgen": loadgen,
                     "cpu_ms_per_request": cpu_per_request(r),
                     "baseline_cpu_ms_per_request": cpu_per_request(b)},
        )
        ctx.explain(fig, broker.pid, p.seconds, lambda: drive(url, body, broker.pid))
        return fig

    figures: list[Figure] = []
    broker = ctx.laketail("rest")
    broker.create_topic(TOPIC, 4)
    figures += [figure(broker, "", batch, acks) for batch in p.batches for acks in ("1", "all")]
    ctx.stop(broker)
    if p.request_processes > 1:  # the same broker split into request processes (issue 18)
        split = ctx.laketail("rest-processes", processes=p.request_processes)
        split.create_topic(TOPIC, 4)
        suffix = f", {p.request_processes} request processes"
        figures += [figure(split, suffix, batch, acks) for batch in p.batches if batch >= 100
                    for acks in ("1", "all")]
        ctx.stop(split)
    best = max((f.details["laketail"]["requests_per_s"] for f in figures), default=0.0)
    wrk_cpu = max([static.wrk_cpu, sink.wrk_cpu] + [f.details["laketail"]["wrk_cpu"] for f in figures])
    figures.append(Figure(
        BENCH, f"load generator: wrk on GET /static (wrk CPU at most {wrk_cpu:.2f} cores in any run)",
        static.requests_per_s, "requests/s", "laketail's best produce requests/s", best, None,
        details={"static": static.as_dict(), "sink": sink.as_dict(), "max_wrk_cpu": wrk_cpu},
    ))
    return figures
