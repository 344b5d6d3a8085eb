"""Benchmark 5: latency at a fixed load of 200 requests/s, one 100-byte record each.

* produce p99 (acks=1) against the bare FastAPI endpoint's p99 at the same load;
* produce -> long-poll fetch: one consumer long-polls the partition (v2 fetch,
  ``timeout=1000``) while the producer runs; latency = arrival at the consumer minus the
  record's scheduled send time; compared with the produce p99 of the same window;
* record -> visible in the Delta table: when the first commit whose tier transaction
  covers the record's offset appeared in ``_delta_log`` (see :mod:`bench.delta_watch`),
  against ``table.flush.interval.ms`` + 500 ms.

Requests go out on a fixed schedule (:func:`bench.client.paced`), so latencies include
any queueing a stall causes.
"""

from __future__ import annotations

import asyncio
import base64
import time

import orjson

from bench import bodies, client
from bench.context import Context
from bench.delta_watch import DeltaLogWatcher
from bench.figures import AT_MOST, Figure
from bench.stats import summary

BENCH = "5 Latency"
HEADERS = {"Content-Type": bodies.V2_BINARY}


def record_value(i: int, size: int) -> bytes:
    return f"{i:012d}".encode().ljust(size, b".")


def produce_request(path: str, size: int):
    def make(i: int):
        body = b'{"records":[{"value":"%s"}]}' % base64.b64encode(record_value(i, size))
        return "POST", path, body, HEADERS
    return make


async def paced_produce(url: str, path: str, rate: float, seconds: float, size: int, on_done=None):
    return await client.paced(url, rate, seconds, produce_request(path, size), on_done=on_done)


async def long_poll(url: str, topic: str, expected: int, due: dict[int, float], size: int,
                    deadline: float) -> list[float]:
    """Consume partition 0 from offset 0 until ``expected`` records arrived; each
    record's end-to-end latency in ms."""
    host, port = client.split_url(url)
    conn = await client.Connection(host, port).open()
    offset = 0
    latencies: list[float] = []
    accept = {"Accept": bodies.V2_BINARY}
    try:
        while len(latencies) < expected and time.monotonic() < deadline:
            status, payload = await conn.request(
                "GET", f"/topics/{topic}/partitions/0/records?offset={offset}&timeout=1000&max_records=500",
                headers=accept)
            now = time.monotonic()
            if status != 200:
                raise client.HttpError(f"long poll: {status} {payload[:200]!r}")
            for rec in orjson.loads(payload):
                seq = int(base64.b64decode(rec["value"])[:12])
                if seq in due:
                    latencies.append((now - due[seq]) * 1000)
                offset = rec["offset"] + 1
    finally:
        conn.close()
    return latencies


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    base = ctx.baseline()
    broker = ctx.laketail("latency")
    broker.create_topic("lat", 1)
    broker.create_topic("lat-e2e", 1)
    flush_ms = 1000  # the topic default, table.flush.interval.ms
    rate, seconds, size = p.latency_rate, p.latency_seconds, p.value_bytes

    ctx.status(f"baseline at {rate:.0f} req/s")
    b = client.run(paced_produce(base.url, "/produce", rate, seconds, size))
    ctx.status(f"laketail produce at {rate:.0f} req/s")
    lt = client.run(paced_produce(broker.url, "/topics/lat?acks=1", rate, seconds, size))
    b_s, lt_s = summary(b.latencies_ms()), summary(lt.latencies_ms())

    figures = [Figure(
        BENCH, f"produce p99, acks=1, 1 record, {rate:.0f} req/s", lt_s["p99_ms"], "ms",
        "bare FastAPI p99 at the same load", b_s["p99_ms"], AT_MOST(3.0),
        details={"laketail": lt_s, "baseline": b_s, "errors": lt.errors + b.errors},
    )]
    ctx.explain(figures[0], broker.pid, seconds,
                lambda: client.run(paced_produce(broker.url, "/topics/lat?acks=1", rate, seconds, size)))

    ctx.status("produce + long-poll consumer + Delta log watch")
    watcher = DeltaLogWatcher(broker.table_path("lat-e2e")).start()
    due: dict[int, float] = {}
    offsets: dict[int, int] = {}
    n = int(rate * seconds)

    def on_done(i: int, sample: client.Sample) -> None:
        if sample.status == 200:
            offsets[i] = orjson.loads(sample.body)["offsets"][0]["offset"]

    def on_due(i: int, when: float) -> None:
        due[i] = when

    async def both():
        deadline = time.monotonic() + seconds + 30
        consumer = asyncio.create_task(long_poll(broker.url, "lat-e2e", n, due, size, deadline))
        produced = await client.paced(broker.url, rate, seconds, produce_request("/topics/lat-e2e?acks=1", size),
                                      on_done=on_done, on_due=on_due)
        return produced, await consumer

    try:
        produced, e2e = client.run(both())
        settle = time.monotonic() + flush_ms / 1000 + 10
        while time.monotonic() < settle and watcher.visible_at(0, max(offsets.values(), default=0)) is None:
            time.sleep(0.05)
    finally:
        watcher.stop()
    visible = []
    for i, offset in offsets.items():
        seen = watcher.visible_at(0, offset)
        if seen is not None:
            visible.append((seen - due[i]) * 1000)
    p2 = summary(produced.latencies_ms())
    e2e_s, vis_s = summary(e2e), summary(visible)
    figures.append(Figure(
        BENCH, "produce -> long-poll fetch p99", e2e_s["p99_ms"], "ms",
        "produce p99, same window", p2["p99_ms"], AT_MOST(2.0),
        details={"end_to_end": e2e_s, "produce": p2, "records": n, "received": len(e2e)},
    ))
    figures.append(Figure(
        BENCH, "record -> visible in Delta p99", vis_s["p99_ms"], "ms",
        "table.flush.interval.ms + 500 ms", flush_ms + 500.0, AT_MOST(1.0),
        details={"visible": vis_s, "records": n, "seen": len(visible), "commits": watcher.commits},
    ))
    ctx.stop(broker)
    return figures
