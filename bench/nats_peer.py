"""Benchmark 7: NATS JetStream, the peer users would pick instead, against laketail,
both driven from Python on this machine with 100-byte records.

NATS: a file-storage stream, ``js.publish`` (one message, wait for its ack) and
``js.publish_async`` (NATS's batching: many publishes in flight, acks collected), once
with NATS's default (the file store syncs every two minutes) and once with
``sync_interval: always`` (a sync per write, as laketail's ``flush.messages=1``).

laketail: one record per request (acks=all, 4 connections) and batches of 100 records
per request (v2 binary and Arrow IPC, 4 requests in flight), each request built in the
driver from the record values, as a client producer would. The target compares
laketail's best batched rate with NATS's best rate.
"""

from __future__ import annotations

import asyncio
import time

from bench import bodies, client
from bench.context import Context
from bench.figures import AT_LEAST, Figure

BENCH = "7 NATS JetStream"


async def nats_rates(url: str, seconds: float, size: int) -> dict[str, float]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="BENCH", subjects=["bench.>"], storage="file")
        payloads = bodies.values(1024, size)

        sent = 0
        end = time.monotonic() + seconds
        started = time.monotonic()
        while time.monotonic() < end:
            await js.publish("bench.sync", payloads[sent % 1024])
            sent += 1
        sync_rate = sent / (time.monotonic() - started)

        sent = 0
        started = time.monotonic()
        end = started + seconds
        while time.monotonic() < end:
            futures = [await js.publish_async("bench.async", payloads[(sent + j) % 1024]) for j in range(1000)]
            sent += len(futures)
            await asyncio.gather(*futures)
        await js.publish_async_completed()
        async_rate = sent / (time.monotonic() - started)
        return {"publish (ack each)": sync_rate, "publish_async (batched acks)": async_rate}
    finally:
        await nc.close()


def laketail_rates(broker, seconds: float, size: int, batch: int) -> dict[str, float]:
    vals = bodies.values(1024, size)

    def v2(i: int):
        chunk = [vals[(i * batch + j) % 1024] for j in range(batch)]
        return "POST", "/topics/bench-nats?acks=all", bodies.v2_binary(chunk), {"Content-Type": bodies.V2_BINARY}

    def arrow(i: int):
        chunk = [vals[(i * batch + j) % 1024] for j in range(batch)]
        return ("POST", "/v1/topics/bench-nats/records?acks=all", bodies.arrow_stream(chunk),
                {"Content-Type": bodies.ARROW_STREAM})

    def single(i: int):
        headers = {"Content-Type": bodies.V2_BINARY}
        return "POST", "/topics/bench-nats?acks=all", bodies.v2_binary([vals[i % 1024]]), headers

    out = {}
    for label, make, per in (("1 record/request", single, 1), (f"v2 JSON, {batch}/request", v2, batch),
                             (f"Arrow IPC, {batch}/request", arrow, batch)):
        n, elapsed, _ = client.run(client.closed_loop(broker.url, seconds, 4, make))
        out[label] = n * per / elapsed
    return out


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    results: dict[str, dict[str, float]] = {}
    for sync_always in (False, True):
        label = "NATS sync_interval=always" if sync_always else "NATS default sync"
        ctx.status(label)
        server = ctx.nats(sync_always)
        results[label] = client.run(nats_rates(server.url, p.nats_seconds, p.value_bytes))
        ctx.stop(server)
    broker = ctx.laketail("nats-peer")
    broker.create_topic("bench-nats", 4)
    ctx.status("laketail from Python")
    results["laketail"] = laketail_rates(broker, p.nats_seconds, p.value_bytes, 100)
    best_laketail = max(results["laketail"].items(), key=lambda kv: kv[1])
    figures = []
    for label in ("NATS default sync", "NATS sync_interval=always"):
        best_nats = max(results[label].items(), key=lambda kv: kv[1])
        fig = Figure(
            BENCH, f"laketail best ({best_laketail[0]}) vs {label}", best_laketail[1], "records/s",
            f"{label}, {best_nats[0]}", best_nats[1], AT_LEAST(1.0), details={"rates": results},
        )
        figures.append(fig)
    ctx.explain(figures[0], broker.pid, p.nats_seconds,
                lambda: laketail_rates(broker, p.nats_seconds, p.value_bytes, 100))
    ctx.stop(broker)
    return figures
