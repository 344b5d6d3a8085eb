"""Benchmark 8: broker RSS under sustained produce.

A fresh broker gets ``memory_rate`` requests/s of ``memory_batch`` 100-byte records
(v2 binary, acks=1, 4 partitions; tiering into Delta runs as usual) for
``memory_seconds`` (the issue's 10 minutes under ``--full``). RSS is read from
/proc every second. The figure is RSS at the end against RSS at minute 1 (at half the
run when the run is shorter than two minutes); the target is at most 1.2x.
"""

from __future__ import annotations

import asyncio
import time

from bench import bodies, client
from bench.context import Context, save_plot
from bench.figures import AT_MOST, Figure

BENCH = "8 Memory"


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    broker = ctx.laketail("memory")
    broker.create_topic("bench-mem", 4)
    body = bodies.v2_binary(bodies.values(p.memory_batch, p.value_bytes))
    samples: list[tuple[float, int]] = []
    started = time.monotonic()

    def make(i: int):
        return "POST", "/topics/bench-mem?acks=1", body, {"Content-Type": bodies.V2_BINARY}

    async def sample_rss(stop: asyncio.Event) -> None:
        while not stop.is_set():
            samples.append((time.monotonic() - started, broker.rss_bytes()))
            ctx.status(f"sustained produce: {samples[-1][0]:.0f}/{p.memory_seconds:.0f}s, "
                       f"RSS {samples[-1][1] / 2**20:.0f} MiB")
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass

    async def drive():
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_rss(stop))
        try:
            return await client.paced(broker.url, p.memory_rate, p.memory_seconds, make)
        finally:
            stop.set()
            await sampler

    result = client.run(drive())
    reference_s = 60.0 if p.memory_seconds >= 120 else p.memory_seconds / 2
    at_ref = next(rss for t, rss in samples if t >= reference_s)
    at_end = samples[-1][1]
    fig = Figure(
        BENCH, f"RSS after {samples[-1][0]:.0f}s of {p.memory_rate * p.memory_batch:,.0f} records/s",
        at_end / 2**20, "MiB", f"RSS at {reference_s:.0f}s", at_ref / 2**20, AT_MOST(1.2),
        details={"rss_mib": [(round(t, 1), round(r / 2**20, 1)) for t, r in samples],
                 "requests": len(result.samples), "errors": result.errors,
                 "latency_p99_ms": sorted(result.latencies_ms())[int(0.99 * len(result.latencies_ms())) - 1]
                 if result.latencies_ms() else None},
    )
    plot(ctx, samples, reference_s)
    ctx.stop(broker)
    return [fig]


def plot(ctx: Context, samples: list[tuple[float, int]], reference_s: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([t for t, _ in samples], [r / 2**20 for _, r in samples], color="tab:blue")
    ax.axvline(reference_s, color="grey", linestyle=":", label=f"reference ({reference_s:.0f}s)")
    ax.set_xlabel("seconds of sustained produce")
    ax.set_ylabel("broker RSS (MiB)")
    ax.set_title("Broker memory under sustained produce")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save_plot(ctx, fig, "memory")
