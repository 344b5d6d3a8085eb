"""Benchmark 9 (issue 7): acks=all on three replicas against acks=1 on one.

Two setups run side by side on fresh data roots:

* the baseline, one broker (``python -m laketail.cli serve``, as every benchmark)
  with a topic of replication factor 1, produced with acks=1;
* a cluster of three brokers sharing one data root, each with its own hot-log
  directory and port (``serve --broker-id N --data ROOT --log-dir DIR
  --no-maintenance``), with a topic of replication factor 3 and
  ``min.insync.replicas=2``, produced with acks=all.

Both topics have three partitions, so each cluster broker leads one. The load is
benchmark 1's: wrk, Confluent v2 binary bodies of 100 records of 100 random bytes, 8
connections in all, here one wrk per partition (``POST /topics/{t}/partitions/{p}``
to the partition's leader, as a Kafka client sends to leaders; 3 + 3 + 2
connections), all at once; records/s is the sum. Baseline and cluster alternate
``repeats`` times, each side's median kept. Target: the cluster at least 0.5x the
single broker.

For information: the cluster with acks=1; acks=all through one broker (``POST
/topics/{t}``, which forwards what it does not lead); and in ``details``, each
setup's latency one request at a time (the floor without queueing: for acks=all,
the followers' fetch round trips) and every broker's CPU during the runs.
"""

from __future__ import annotations

import concurrent.futures
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from bench import bodies, stats, wrk
from bench.context import Context, save_plot
from bench.figures import AT_LEAST, Figure
from bench.procs import LaketailServer, ServerError

BENCH = "9 Replication"
TOPIC = "bench-repl"
PARTITIONS = 3
BROKERS = 3
BATCH = 100


class ClusterBroker(LaketailServer):
    """One broker of a cluster: its own id, port and hot-log directory, the shared
    data root ``data``."""

    def __init__(self, workdir: Path, data: Path, broker_id: int) -> None:
        super().__init__(workdir)
        self.name = f"broker-{broker_id}"
        self.log_path = workdir / f"{self.name}.log"
        self.data = data
        self.broker_id = broker_id

    def command(self) -> list[str]:
        return super().command() + [
            "--broker-id", str(self.broker_id), "--log-dir", str(self.workdir / "hot"),
            "--advertised-url", self.url, "--no-maintenance",
        ]

    def hot_dir(self, topic: str, partition: int) -> Path:
        return self.workdir / "hot" / f"{topic}-{partition}"


def start_cluster(ctx: Context, root: Path, stack: ExitStack) -> list[ClusterBroker]:
    """Three brokers on ``root/data``, each stopped when ``stack`` closes."""
    data = root / "data"
    brokers = []
    for n in range(BROKERS):
        broker = ClusterBroker(root / f"broker-{n}", data, n)
        ctx.status(f"starting cluster broker {n}")
        broker.start()
        stack.callback(broker.stop)
        brokers.append(broker)
    _wait(lambda: sorted(httpx.get(brokers[0].url + "/brokers", timeout=5).json().get("brokers", []))
          == list(range(BROKERS)), "the cluster to list all three brokers", ctx)
    return brokers


def partition_leaders(url: str, topic: str) -> dict[int, int] | None:
    """Partition -> leader id once every partition has a leader and a full ISR."""
    r = httpx.get(f"{url}/topics/{topic}/partitions", timeout=5)
    if r.status_code != 200:
        return None
    out = {}
    for p in r.json():
        replicas = p.get("replicas", [])
        if p["leader"] < 0 or len(replicas) < BROKERS or not all(x.get("in_sync") for x in replicas):
            return None
        out[p["partition"]] = p["leader"]
    return out if len(out) == PARTITIONS else None


def _wait(condition, what: str, ctx: Context, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ctx.status(f"waiting for {what}")
        try:
            value = condition()
        except (httpx.HTTPError, ValueError):
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise ServerError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def drive(targets: list[tuple[str, int]], body: bytes, seconds: float, warmup_s: float, workdir: Path,
          connections: int) -> dict:
    """One wrk per ``(url, server pid)``, all at once, ``connections`` split between
    them (3, 3, 2 for 8 over three); the summed records/s and each wrk's result."""
    shares = [connections // len(targets) + (1 if i < connections % len(targets) else 0)
              for i in range(len(targets))]
    with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
        results = list(pool.map(lambda t, c: wrk.run(
            t[0], duration_s=seconds, warmup_s=warmup_s, workdir=workdir, method="POST", body=body,
            content_type=bodies.V2_BINARY, connections=max(1, c), threads=1, server_pid=t[1]),
            targets, shares))
    return {"records_per_s": sum(r.requests_per_s for r in results) * BATCH,
            "p99_ms": max(r.p99_ms for r in results),
            "wrk": [r.as_dict() for r in results]}


def sequential_latency(url: str, body: bytes, requests: int = 30) -> dict:
    """One request at a time on one connection, milliseconds: the path's floor without
    queueing (for acks=all, the replication round trips)."""
    samples = []
    with httpx.Client(timeout=60) as client:
        for _ in range(requests):
            started = time.perf_counter()
            r = client.post(url, content=body, headers={"Content-Type": bodies.V2_BINARY})
            samples.append(1000 * (time.perf_counter() - started))
            if r.status_code != 200:
                raise ServerError(f"{url}: {r.status_code} {r.text[:200]}")
    return stats.summary(samples[3:])


def interleaved(base, other, repeats: int) -> tuple[dict, dict, dict]:
    bs, os_ = [], []
    for _ in range(max(1, repeats)):
        bs.append(base())
        os_.append(other())

    def median(runs: list[dict]) -> dict:
        return sorted(runs, key=lambda r: r["records_per_s"])[len(runs) // 2]

    spread = {"baseline_records_per_s": [round(r["records_per_s"]) for r in bs],
              "laketail_records_per_s": [round(r["records_per_s"]) for r in os_]}
    return median(bs), median(os_), spread


def run(ctx: Context) -> list[Figure]:
    with ExitStack() as stack:
        return _run(ctx, stack)


def _run(ctx: Context, stack: ExitStack) -> list[Figure]:
    p = ctx.params
    single = ctx.laketail("replication-single")
    stack.callback(ctx.stop, single)
    single.create_topic(TOPIC, PARTITIONS)
    cluster = start_cluster(ctx, ctx.workdir / "laketail-cluster", stack)
    by_id = {b.broker_id: b for b in cluster}
    body_doc = {"topic_name": TOPIC, "partitions_count": PARTITIONS, "replication_factor": BROKERS,
                "configs": [{"name": "min.insync.replicas", "value": "2"}]}
    r = httpx.post(f"{cluster[0].url}/v3/clusters/{cluster[0].cluster_id}/topics", json=body_doc, timeout=60)
    if r.status_code >= 300:
        raise ServerError(f"create {TOPIC} (RF {BROKERS}): {r.status_code} {r.text[:300]}")
    leaders = _wait(lambda: partition_leaders(cluster[0].url, TOPIC), "leaders and full ISRs", ctx)
    body = bodies.v2_binary(bodies.values(BATCH, p.value_bytes))

    def load(targets: list[tuple[str, int]]):
        return lambda: drive(targets, body, p.seconds, p.warmup_s, ctx.workdir, p.connections)

    def to_leaders(acks: str) -> list[tuple[str, int]]:
        return [(f"{by_id[leaders[q]].url}/topics/{TOPIC}/partitions/{q}?acks={acks}", by_id[leaders[q]].pid)
                for q in range(PARTITIONS)]

    single_targets = [(f"{single.url}/topics/{TOPIC}/partitions/{q}?acks=1", single.pid) for q in range(PARTITIONS)]
    ctx.status(f"one broker acks=1 and three brokers acks=all (x{p.repeats})")
    base, repl, spread = interleaved(load(single_targets), load(to_leaders("all")), p.repeats)
    details = {"leaders": leaders, "partitions": PARTITIONS, "batch": BATCH, "value_bytes": p.value_bytes,
               "connections": p.connections, "min_insync_replicas": 2, "runs": spread,
               "laketail": repl, "baseline": base,
               "cluster_cpu": [w["server_cpu"] for w in repl["wrk"]],
               "single_cpu": base["wrk"][0]["server_cpu"]}
    main = Figure(BENCH, "acks=all, RF 3, min.insync.replicas 2, batch 100 (to leaders)", repl["records_per_s"],
                  "records/s", "one broker, RF 1, acks=1", base["records_per_s"], AT_LEAST(0.5), details=details)
    ctx.status("one request at a time: latency floors")
    floors = {"single_acks_1": sequential_latency(single_targets[0][0], body),
              "cluster_acks_1": sequential_latency(to_leaders("1")[0][0], body),
              "cluster_acks_all": sequential_latency(to_leaders("all")[0][0], body)}
    main.details["sequential_latency_ms"] = floors
    ctx.status("three brokers acks=1; acks=all through one broker")
    acks1 = load(to_leaders("1"))()
    one_door = load([(f"{cluster[0].url}/topics/{TOPIC}?acks=all", cluster[0].pid)])()
    extra = [
        Figure(BENCH, "acks=1, RF 3 (leader only), batch 100 (to leaders)", acks1["records_per_s"], "records/s",
               "one broker, RF 1, acks=1", base["records_per_s"], None, details={"laketail": acks1}),
        Figure(BENCH, "acks=all, RF 3, all load through broker 0 (forwards to leaders)",
               one_door["records_per_s"], "records/s", "one broker, RF 1, acks=1", base["records_per_s"], None,
               details={"laketail": one_door}),
    ]
    ctx.explain(main, by_id[leaders[0]].pid, p.seconds, load(to_leaders("all")))
    figures = [main, *extra]
    plot(ctx, figures)
    return figures


def plot(ctx: Context, figures: list[Figure]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = figures[0]
    names = ["1 broker\nRF 1, acks=1", "3 brokers\nRF 3, acks=all", "3 brokers\nRF 3, acks=1",
             "3 brokers, acks=all\nvia one broker"]
    values = [main.baseline] + [f.value for f in figures]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(names, [v / 1000 for v in values], color=["tab:grey", "tab:blue", "tab:cyan", "tab:purple"])
    runs = main.details["runs"]
    for i, key in ((0, "baseline_records_per_s"), (1, "laketail_records_per_s")):
        ax.scatter([i] * len(runs[key]), [v / 1000 for v in runs[key]], color="black", s=12, zorder=3)
    ax.axhline(main.baseline * 0.5 / 1000, color="tab:red", linestyle=":", label="target: 0.5x one broker")
    ax.set_ylabel("thousand records/s (median; dots: every run)")
    ax.set_title("Replication: v2 binary produce, 100 x 100 B per request, 8 connections")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    save_plot(ctx, fig, "replication")
