"""Benchmark 3: fetch from the hot tier and from the Delta tier, against a bare
endpoint that returns the same pre-encoded bytes.

Two topics of one partition get the same 100-byte records. One keeps its hot segments
(reads come from the hot log); the other has small segments and ``local.retention.ms=0``
so that, once tiered, its early segments leave local disk and reads of offset 0 come
from the Delta table (checked: the oldest hot segment starts past the records read).
wrk reads each topic from the start like a consumer, ``max_records`` records per
response (offsets 0, m, 2m, ... through the 40 m records, then again), as v2 JSON
(Redpanda's shape, binary embedded format) and as an Arrow IPC stream (``/v1``); each
wrk thread is one such consumer. The baseline serves the bytes laketail answered for
offset 0 (``GET /blob/{name}``); the two alternate ``repeats`` times and each side's
median run is kept. With ``request_processes`` above 1 the four figures are measured
again on the broker split into that many request processes. The 40 m records fit
laketail's block cache, so after the first pass every block is read decoded: the figure
is what fetches from decoded blocks cost (a second group reading what a first read, the
next fetches from one block); the first read of a block adds one decode of it, which
this figure does not isolate.
"""

from __future__ import annotations

import time

import httpx

from bench import bodies, wrk
from bench.context import Context
from bench.figures import AT_LEAST, Figure
from bench.procs import ServerError
from bench.produce_rest import cpu_per_request

BENCH = "3 Fetch"

FORMATS = {
    "v2 JSON": ("/topics/{t}/partitions/0/records", bodies.V2_BINARY),
    "Arrow IPC": ("/v1/topics/{t}/partitions/0/records", bodies.ARROW_STREAM),
}


def fill(broker, topic: str, records: int, value_bytes: int) -> None:
    chunk = 5000
    for start in range(0, records, chunk):
        body = bodies.arrow_stream(bodies.values(min(chunk, records - start), value_bytes))
        r = httpx.post(f"{broker.url}/v1/topics/{topic}/records?acks=all", content=body,
                       headers={"content-type": bodies.ARROW_STREAM}, timeout=60)
        if r.status_code != 200:
            raise ServerError(f"filling {topic}: {r.status_code} {r.text[:200]}")


def wait_until(ctx: Context, what: str, check, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise ServerError(f"timed out waiting for {what}")
        ctx.status(f"waiting for {what}")
        time.sleep(0.2)


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    figures = measure(ctx, ctx.laketail("fetch"), "")
    if p.request_processes > 1:  # the same broker split into request processes (issue 18)
        figures += measure(ctx, ctx.laketail("fetch-processes", processes=p.request_processes),
                           f", {p.request_processes} request processes")
    return figures


def measure(ctx: Context, broker, suffix: str) -> list[Figure]:
    """Fill both topics on ``broker`` and measure the four figures against the bare
    endpoint. With request processes, each topic's one partition is led by one process
    and the kernel spreads wrk's connections over all of them: the others read the
    leader's segments (or the table) from disk (``storage/sibling_log.py``)."""
    p = ctx.params
    base = ctx.baseline()
    m = p.fetch_records
    total = 40 * m
    tiers = {
        "hot": ("bench-fetch-hot", {}),
        "Delta": ("bench-fetch-delta", {"segment.bytes": str(256 * 1024), "local.retention.ms": "0",
                                        "table.flush.interval.ms": "100"}),
    }
    for topic, configs in tiers.values():
        broker.create_topic(topic, 1, configs)
        ctx.status(f"filling {topic}{suffix}")
        fill(broker, topic, total, p.value_bytes)
    delta_topic = tiers["Delta"][0]
    wait_until(ctx, "the Delta tier to hold the first records",
               lambda: broker.hot_start_offset(delta_topic, 0) >= m)
    if broker.hot_start_offset(tiers["hot"][0], 0) != 0:
        raise ServerError("the hot topic lost its first segment")

    figures: list[Figure] = []
    for tier, (topic, _) in tiers.items():
        for fmt, (path, accept) in FORMATS.items():
            url = f"{broker.url}{path.format(t=topic)}?offset=0&max_records={m}"
            sample = httpx.get(url, headers={"accept": accept}, timeout=60)
            if sample.status_code != 200:
                raise ServerError(f"GET {url}: {sample.status_code} {sample.text[:200]}")
            name = f"{tier}-{fmt}".replace(" ", "")
            base.put_blob(name, sample.content, sample.headers.get("content-type", accept))

            walk = (f"{path.format(t=topic)}?offset=%d&max_records={m}", total // m, m)

            def drive(url: str, server_pid: int, accept=accept, walk=None) -> wrk.WrkResult:
                return wrk.run(url, duration_s=p.seconds, warmup_s=p.warmup_s, workdir=ctx.workdir,
                               headers={"Accept": accept}, connections=p.connections,
                               server_pid=server_pid, walk=walk)

            ctx.status(f"baseline and laketail, {tier} tier, {fmt}{suffix} (x{p.repeats})")
            b, r, spread = wrk.interleaved(lambda name=name, drive=drive: drive(f"{base.url}/blob/{name}", base.pid),
                                           lambda url=url, drive=drive, walk=walk: drive(url, broker.pid, walk=walk),
                                           p.repeats)
            fig = Figure(
                BENCH, f"{tier} tier, {fmt}, {m} records/response{suffix}", r.requests_per_s * m, "records/s",
                "bare endpoint, same bytes", b.requests_per_s * m, AT_LEAST(0.7),
                details={"laketail": r.as_dict(), "baseline": b.as_dict(), "runs": spread,
                         "response_bytes": len(sample.content),
                         "cpu_ms_per_request": cpu_per_request(r),
                         "baseline_cpu_ms_per_request": cpu_per_request(b)},
            )
            figures.append(fig)
            ctx.explain(fig, broker.pid, p.seconds,
                        lambda url=url, drive=drive, walk=walk: drive(url, broker.pid, walk=walk))
    ctx.stop(broker)
    return figures
