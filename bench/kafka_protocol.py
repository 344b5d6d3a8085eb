"""Benchmark 12: Kafka's binary protocol (issue 39), confluent-kafka against laketail's
Kafka listener and against the bare Kafka server (:mod:`bench.kafka_bare`).

Both servers are their own processes on this machine; the client is confluent-kafka
(librdkafka) in the benchmark's process, the same configuration for both:

* **produce**: 100-byte random values, ``acks=all``, ``linger.ms=5``, keys cycling over
  1,200 names so records spread over the topic's 12 partitions; the producer sends as
  fast as its queue takes for ``seconds``, then flushes; records/s = records delivered
  without error / (sending + flush). Bare and laketail alternate ``repeats`` times
  (median kept, every run in ``details.runs``). Target: laketail >= 0.5x the bare
  server.
* **against REST**: the same broker's v2 binary REST produce at batch 100, acks=all
  (wrk, 8 connections, as benchmark 1) against the Kafka produce figure. Target: the
  Kafka listener >= 5x REST.
* **consume from the hot tier**: a consumer assigned the 12 partitions from offset 0
  (no group) reads the first ``n`` records the produce runs left, ``n`` the smaller of
  the two servers' totals, seconds after they were written (laketail serves them from
  its hot log). Target: laketail >= 0.5x the bare server.
* **p99 produce latency at 2,000 records/s**: one record every 0.5 ms, ``acks=all``,
  ``linger.ms=5`` (librdkafka's default, as above), for ``2 x seconds``; the latency is
  librdkafka's own per message (``Message.latency()``, produce call to delivery
  report). Target: laketail <= 3x the bare server. The same at ``linger.ms=0`` (one
  request per record or two: the broker's cost per request) is reported without a
  target.

The consume from the Delta tier that issue 39 also asks for is not measured here.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from bench import bodies, wrk
from bench.context import Context
from bench.figures import AT_LEAST, AT_MOST, Figure
from bench.procs import LaketailServer, Server, free_port

BENCH = "12 Kafka protocol"
TOPIC = "bench-kafka"
REST_TOPIC = "bench-kafka-rest"
PARTITIONS = 12
KEYS = [b"key-%d" % i for i in range(1200)]
QUIET = {"log_level": 0}


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class BareKafkaServer(Server):
    name = "kafka-bare"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bench.kafka_bare", "--port", str(self.port),
                "--partitions", str(PARTITIONS)]

    def ready(self) -> bool:
        return _listening(self.port)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


class KafkaLaketailServer(LaketailServer):
    """A broker with a PLAINTEXT Kafka listener beside its HTTP one."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.kafka_port = free_port()

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "LAKETAIL_LISTENERS": f"KAFKA://127.0.0.1:{self.kafka_port}",
                "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "KAFKA:PLAINTEXT"}

    def ready(self) -> bool:
        return super().ready() and _listening(self.kafka_port)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


def produce_for(bootstrap: str, seconds: float, value_bytes: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": False, "message.timeout.ms": 120_000, **QUIET})
    value = os.urandom(value_bytes)
    counts = {"delivered": 0, "failed": 0}

    def report(err, _msg) -> None:
        counts["failed" if err is not None else "delivered"] += 1

    producer.list_topics(TOPIC, timeout=30)  # metadata (and the connection) before the clock starts
    sent = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(500):
            try:
                producer.produce(TOPIC, value, KEYS[sent % len(KEYS)], on_delivery=report)
                sent += 1
            except BufferError:  # the queue is full: let deliveries drain it
                producer.poll(0.005)
        producer.poll(0)
    left = producer.flush(180)
    elapsed = time.perf_counter() - start
    return {"records_per_s": counts["delivered"] / elapsed, "sent": sent, "elapsed_s": elapsed,
            "unflushed": left, **counts}


def consume(bootstrap: str, n: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100, **QUIET})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = errors = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < n and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                got += 1
            else:
                errors += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return {"records_per_s": got / elapsed, "records": got, "errors": errors, "elapsed_s": elapsed}


def latency_at(bootstrap: str, rate: float, seconds: float, value_bytes: int, linger_ms: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                         "enable.idempotence": False, **QUIET})
    value = os.urandom(value_bytes)
    latencies: list[float] = []
    failed = [0]

    def report(err, msg) -> None:
        if err is None:
            latencies.append(msg.latency() * 1000)
        else:
            failed[0] += 1

    producer.list_topics(TOPIC, timeout=30)
    interval = 1 / rate
    start = time.perf_counter()
    i = 0
    while (now := time.perf_counter()) < start + seconds:
        due = start + i * interval
        if now >= due:
            producer.produce(TOPIC, value, KEYS[i % len(KEYS)], on_delivery=report)
            i += 1
        producer.poll(0)
        if now < due:
            time.sleep(min(due - now, 0.0005))
    producer.flush(60)
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": ordered[-1] if ordered else float("nan"),
            "sent": i, "delivered": len(latencies), "failed": failed[0],
            "achieved_rate": i / seconds}


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    bare = BareKafkaServer(ctx.workdir / "kafka-bare")
    ctx.status("starting the bare Kafka server")
    bare.start()
    ctx._stack.callback(bare.stop)
    ctx.status("starting laketail with a Kafka listener")
    broker = KafkaLaketailServer(ctx.workdir / "laketail-kafka")
    broker.start()
    ctx._stack.callback(broker.stop)
    broker.create_topic(TOPIC, PARTITIONS)
    broker.create_topic(REST_TOPIC, PARTITIONS)

    runs: dict[str, list[dict]] = {"bare": [], "laketail": []}
    for i in range(max(1, p.repeats)):
        for side, server in (("bare", bare), ("laketail", broker)):
            ctx.status(f"produce to {side} ({i + 1}/{p.repeats})")
            runs[side].append(produce_for(server.bootstrap, p.seconds, p.value_bytes))

    def median(side: str) -> dict:
        return sorted(runs[side], key=lambda r: r["records_per_s"])[len(runs[side]) // 2]

    b, r = median("bare"), median("laketail")
    spread = {side: [round(x["records_per_s"], 1) for x in rs] for side, rs in runs.items()}
    produce = Figure(BENCH, "confluent-kafka produce, acks=all, linger.ms=5, 100 B, keyed over 12 partitions",
                     r["records_per_s"], "records/s", "the bare Kafka server, same client", b["records_per_s"],
                     AT_LEAST(0.5), details={"laketail": r, "baseline": b, "runs": spread})
    ctx.explain(produce, broker.pid, p.seconds, lambda: produce_for(broker.bootstrap, p.seconds, p.value_bytes))

    body = bodies.v2_binary(bodies.values(100, p.value_bytes))
    rest_runs = []
    for i in range(max(1, p.repeats)):
        ctx.status(f"REST produce at batch 100 ({i + 1}/{p.repeats})")
        rest_runs.append(wrk.run(f"{broker.url}/topics/{REST_TOPIC}?acks=all", duration_s=p.seconds,
                                 warmup_s=p.warmup_s, workdir=ctx.workdir, method="POST", body=body,
                                 content_type=bodies.V2_BINARY, connections=p.connections, server_pid=broker.pid))
    rest = wrk.median(rest_runs)
    versus_rest = Figure(BENCH, "Kafka produce (above) vs the same broker's REST v2 produce, batch 100, acks=all",
                         r["records_per_s"], "records/s", "laketail REST produce at batch 100 (wrk)",
                         rest.requests_per_s * 100, AT_LEAST(5),
                         details={"rest": rest.as_dict(),
                                  "rest_runs_rps": [round(x.requests_per_s, 1) for x in rest_runs]})

    total = min(sum(x["delivered"] for x in runs["bare"]), sum(x["delivered"] for x in runs["laketail"]))
    n = min(total, 500_000)
    ctx.status(f"consume {n:,} records from each")
    cb = consume(bare.bootstrap, n)
    cl = consume(broker.bootstrap, n)
    fetch = Figure(BENCH, f"confluent-kafka consume from the hot tier, {n:,} records, 12 partitions",
                   cl["records_per_s"], "records/s", "the bare Kafka server, same client", cb["records_per_s"],
                   AT_LEAST(0.5), details={"laketail": cl, "baseline": cb})
    ctx.explain(fetch, broker.pid, p.seconds, lambda: consume(broker.bootstrap, n))

    seconds = min(p.latency_seconds, 2 * p.seconds)
    latencies = []
    for linger_ms, target in ((5, AT_MOST(3)), (0, None)):
        ctx.status(f"latency at 2,000 records/s, linger.ms={linger_ms}, bare")
        lb = latency_at(bare.bootstrap, 2000.0, seconds, p.value_bytes, linger_ms)
        ctx.status(f"latency at 2,000 records/s, linger.ms={linger_ms}, laketail")
        ll = latency_at(broker.bootstrap, 2000.0, seconds, p.value_bytes, linger_ms)
        latencies.append(Figure(
            BENCH, f"produce p99 at 2,000 records/s, acks=all, linger.ms={linger_ms}", ll["p99_ms"], "ms",
            "the bare Kafka server's p99, same load", lb["p99_ms"], target,
            details={"laketail": ll, "baseline": lb,
                     "p50_ratio": ll["p50_ms"] / lb["p50_ms"] if lb["p50_ms"] else None}))
    ctx.stop(broker)
    ctx.stop(bare)
    return [produce, versus_rest, fetch, *latencies]
