"""Benchmark 4: is produce latency flat as the topic's Delta table grows?

laketail: probe produce latency (one 100-byte record, acks=1, 100 requests/s) on an
empty topic, then grow the topic in stages towards ``flat_commits`` table commits and
``flat_records`` records (the issue: 5,000 and 10M under ``--full``), probing again after
each stage, each probe followed by one of an empty topic on a second, control broker
(so a change in the machine's load shows up in both). While growing, ``table.flush.interval.ms``
is lowered to its minimum (10) so that commits pile up fast, and one Arrow produce waits for the next commit, so every
commit carries records; before each probe it is back at the default 1000 ms, as in use.

The naive design (``POST /naive/{topic}`` of :mod:`bench.baseline_app`:
``write_deltalake(mode="append")`` per request) is driven back to back with the same
one-record requests for ``naive_commits`` commits; its latency is plotted beside
laketail's against the number of table commits.
"""

from __future__ import annotations

import math
import time

import httpx

from bench import bodies, client
from bench.context import Context, save_plot
from bench.delta_watch import DeltaLogWatcher
from bench.figures import AT_MOST, Figure
from bench.latency import paced_produce, produce_request
from bench.procs import ServerError
from bench.stats import pct, summary

BENCH = "4 Flatness"
TOPIC = "flat"


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    broker = ctx.laketail("flatness")
    control = ctx.laketail("flatness-control")
    broker.create_topic(TOPIC, 1)
    control.create_topic(TOPIC, 1)
    watcher = DeltaLogWatcher(broker.table_path(TOPIC)).start()
    produce_url = f"{broker.url}/v1/topics/{TOPIC}/records?acks=1"
    records = 0
    points: list[dict] = []
    controls: list[dict] = []

    def probe(server, label: str, into: list[dict]) -> dict:
        ctx.status(f"probing produce latency ({label})")
        path = f"/topics/{TOPIC}?acks=1"
        client.run(paced_produce(server.url, path, p.flat_rate, 5.0, p.value_bytes))  # warm-up
        commits = watcher.next_version
        res = client.run(paced_produce(server.url, path, p.flat_rate, p.flat_window_s, p.value_bytes))
        s = summary(res.latencies_ms())
        s.update(commits=commits, records=records, errors=res.errors, error_examples=res.error_examples,
                 label=label)
        into.append(s)
        return s

    def wait_commit(after: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while watcher.next_version <= after:
            if time.monotonic() > deadline:
                raise ServerError(f"no table commit after version {after} within {timeout_s:.0f}s")
            time.sleep(0.002)

    try:
        empty = probe(broker, "empty", points)
        probe(control, "control, at the start", controls)
        for stage in range(1, p.flat_stages + 1):
            goal_commits = math.ceil(p.flat_commits * stage / p.flat_stages)
            goal_records = math.ceil(p.flat_records * stage / p.flat_stages)
            broker.alter_configs(TOPIC, {"table.flush.interval.ms": "10"})
            with httpx.Client(timeout=120) as http:
                while watcher.next_version < goal_commits or records < goal_records:
                    left_commits = max(1, goal_commits - watcher.next_version)
                    k = max(1, math.ceil(max(0, goal_records - records) / left_commits))
                    k = min(k, 50_000)
                    before = watcher.next_version
                    r = http.post(produce_url, content=bodies.arrow_stream(bodies.values(k, p.value_bytes)),
                                  headers={"content-type": bodies.ARROW_STREAM})
                    if r.status_code != 200:
                        raise ServerError(f"growing {TOPIC}: {r.status_code} {r.text[:200]}")
                    records += k
                    wait_commit(before)
                    ctx.status(f"stage {stage}/{p.flat_stages}: {watcher.next_version} commits, "
                               f"{records:,} records")
            broker.alter_configs(TOPIC, {"table.flush.interval.ms": "1000"})
            ctx.wait(3, "letting the tierer settle")
            last = probe(broker, f"stage {stage}", points)
            beside = probe(control, f"control, stage {stage}", controls)
        naive = run_naive(ctx)
    finally:
        watcher.stop()
        ctx.stop(broker)
        ctx.stop(control)

    details = {"points": points, "controls": controls, "naive": naive["summary"],
               "grown_vs_control": {"p50": last["p50_ms"] / beside["p50_ms"],
                                    "p99": last["p99_ms"] / beside["p99_ms"]}}
    grown = f"after {last['commits']:,} commits, {last['records']:,} records"
    figures = [
        Figure(BENCH, f"produce p50 {grown}", last["p50_ms"], "ms", "p50 on the empty topic",
               empty["p50_ms"], AT_MOST(1.2), details=details),
        Figure(BENCH, f"produce p99 {grown}", last["p99_ms"], "ms", "p99 on the empty topic",
               empty["p99_ms"], AT_MOST(1.2), details=details),
        Figure(BENCH, f"produce p50 {grown}, vs an empty topic measured just after", last["p50_ms"], "ms",
               "p50 on an empty topic (control broker), same moment", beside["p50_ms"], AT_MOST(1.2),
               details=details),
        Figure(BENCH, f"produce p99 {grown}, vs an empty topic measured just after", last["p99_ms"], "ms",
               "p99 on an empty topic (control broker), same moment", beside["p99_ms"], AT_MOST(1.2),
               details=details),
    ]
    buckets = naive["buckets"]
    if len(buckets) >= 2:
        figures.append(Figure(
            BENCH, f"naive write_deltalake per request: p50 at {buckets[-1]['commits']} commits",
            buckets[-1]["p50_ms"], "ms", "naive p50 over its first commits", buckets[0]["p50_ms"], None,
            details={"buckets": buckets},
        ))
    plot(ctx, points, controls, buckets)
    return figures


def run_naive(ctx: Context) -> dict:
    """Back-to-back one-record requests, each a Delta commit of its own."""
    p = ctx.params
    base = ctx.baseline()
    latencies: list[float] = []
    make = produce_request(f"/naive/{TOPIC}-{ctx.stamp}", p.value_bytes)
    chunk = max(1, p.naive_commits // 20)

    async def drive() -> None:
        while len(latencies) < p.naive_commits:
            n = min(chunk, p.naive_commits - len(latencies))
            _, _, got = await client.closed_loop(base.url, 3600, 1, make, max_requests=n)
            latencies.extend(got)
            ctx.status(f"naive design: {len(latencies)}/{p.naive_commits} commits")

    client.run(drive())
    size = max(10, p.naive_commits // 20)
    buckets = []
    for start in range(0, len(latencies), size):
        part = latencies[start:start + size]
        buckets.append({"commits": start + len(part), "p50_ms": pct(part, 50), "p99_ms": pct(part, 99)})
    return {"summary": summary(latencies), "buckets": buckets}


def plot(ctx: Context, points: list[dict], controls: list[dict], buckets: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [pt["commits"] for pt in points]
    ax.plot(xs, [pt["p50_ms"] for pt in points], "o-", color="tab:blue", label="laketail p50")
    ax.plot(xs, [pt["p99_ms"] for pt in points], "s--", color="tab:blue", label="laketail p99")
    if len(controls) == len(points):
        ax.plot(xs, [c["p50_ms"] for c in controls], "o:", color="tab:gray", label="empty control topic p50")
        ax.plot(xs, [c["p99_ms"] for c in controls], "s:", color="tab:gray", label="empty control topic p99")
    if buckets:
        bx = [b["commits"] for b in buckets]
        ax.plot(bx, [b["p50_ms"] for b in buckets], "o-", color="tab:red", label="naive (commit per request) p50")
        ax.plot(bx, [b["p99_ms"] for b in buckets], "s--", color="tab:red", label="naive p99")
    ax.set_xlabel("table commits")
    ax.set_ylabel("produce latency (ms)")
    ax.set_yscale("log")
    ax.set_title("Produce latency as the topic's Delta table grows (1 record, acks=1)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, fontsize=8)
    save_plot(ctx, fig, "flatness")
