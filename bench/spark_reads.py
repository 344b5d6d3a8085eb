"""Benchmark 6: Spark over a topic against Spark over the same Parquet files.

A fresh broker gets a 4-partition topic of ``spark_records`` records (10M by default;
``--spark-records`` for quick runs): 100-byte random values, keys drawn from 1,000
distinct ones, produced as 100,000-record Arrow IPC requests, then tiered into its
Delta table (the run waits until every partition's ``tiered_offset`` is its high
watermark). Spark runs in this process, ``local[2]``, built by
:func:`laketail.spark.session.local_session`. The baseline is ``spark.read.parquet`` of
the very files the table's Delta log lists (``DeltaTable.file_uris()``, with
``basePath`` so ``partition`` comes from the paths, as in the views).

Figures (each side's median of ``repeats`` runs, baseline and laketail alternating,
after one discarded warm-up of each; results compared for equality):

* ``register_topics``: ``SELECT key, count(*), sum(length(value)) ... GROUP BY key``
  on the topic's committed view against the same query on a view of
  ``spark.read.parquet``; both views exist before timing (registration costs are in
  ``details``). With laketail's jar built (``details.live_views``) the view is over
  ``format("laketail_table")``, whose file index replays the Delta log at every query,
  transactions and last stable offsets computed by Spark in the same query (fresh per
  query); without it, the follower's pinned Parquet views. Target: at most
  1.1x the time.
* ``format("laketail")`` batch read: a checksum over every column (count, key and
  value lengths, offsets, partitions, timestamps) against the same checksum over
  ``spark.read.parquet``; records/s. Target: at least 0.5x.
* the streaming source: ``readStream.format("laketail")`` to the ``noop`` sink with
  ``trigger(availableNow=True)``; records/s (all records, query start to end), with
  the batch ``format("laketail")`` read of the same run as its reference. No target.

Evidence in ``details``: every run's wall time and the CPU seconds of Spark's JVM and,
apart, of the Python processes under it (:class:`SparkCpu`); the time of a
``format("laketail")`` read of 4 records (``fixed_cost_s``, what a query costs
whatever its size); the time to register the views.

When the ``format("laketail")`` read misses, it runs again while ``py-spy`` samples
Spark's Python workers (the data source's code runs there), and the top frames go to
the figure's ``details.profile``.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa

from bench import bodies, profile
from bench.bootstrap import venv_bin
from bench.context import Context, save_plot
from bench.figures import AT_LEAST, AT_MOST, Figure
from bench.procs import LaketailServer

_CLK_TCK = os.sysconf("SC_CLK_TCK")

BENCH = "6 Spark"
TOPIC = "bench_spark"
PARTITIONS = 4
KEYS = 1000
REQUEST_RECORDS = 100_000

AGGREGATION = "SELECT key, count(*) AS records, sum(length(value)) AS value_bytes FROM {view} GROUP BY key"
#: Every column of the source's rows goes into the checksum, so nothing is pruned away;
#: the Parquet side has no topic column and counts its constant length per row instead.
SOURCE_CHECKSUM = ("count(*) AS records", "sum(length(key)) AS key_bytes", "sum(length(value)) AS value_bytes",
                   "sum(offset) AS offsets", "sum(partition) AS partitions", "max(timestamp) AS last_ts",
                   "sum(timestampType) AS ts_types", "sum(length(topic)) AS topic_chars")
PARQUET_CHECKSUM = SOURCE_CHECKSUM[:6] + ("sum(timestamp_type) AS ts_types",
                                          f"count(*) * length('{TOPIC}') AS topic_chars")


# -- the topic ----------------------------------------------------------------------------------


def _request_body(rng: np.random.Generator, records: int, value_bytes: int, keys: pa.Array) -> bytes:
    """``records`` random values of ``value_bytes`` with keys from ``keys``, as Arrow IPC."""
    data = pa.py_buffer(os.urandom(records * value_bytes))
    offsets = pa.py_buffer(np.arange(0, (records + 1) * value_bytes, value_bytes, dtype=np.int32).tobytes())
    values = pa.Array.from_buffers(pa.binary(), records, [None, offsets, data])
    key_column = keys.take(pa.array(rng.integers(0, len(keys), records)))
    table = pa.table({"key": key_column, "value": values})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def build_topic(ctx: Context, broker: LaketailServer, records: int, value_bytes: int) -> dict:
    """Produce ``records`` to ``TOPIC`` (partitions in turn) and wait until they are in
    the Delta table; what it took, for ``details``."""
    broker.create_topic(TOPIC, PARTITIONS)
    keys = pa.array([f"key-{i:04d}".encode() for i in range(KEYS)], pa.binary())
    sizes = [min(REQUEST_RECORDS, records - i) for i in range(0, records, REQUEST_RECORDS)]
    produced = 0
    started = time.monotonic()

    def send(i: int, size: int) -> int:
        body = _request_body(np.random.default_rng(i), size, value_bytes, keys)
        r = httpx.post(f"{broker.url}/v1/topics/{TOPIC}/partitions/{i % PARTITIONS}/records?acks=1",
                       content=body, headers={"Content-Type": bodies.ARROW_STREAM}, timeout=300)
        if r.status_code != 200:
            raise RuntimeError(f"produce to {TOPIC}: {r.status_code} {r.text[:300]}")
        return size

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for size in pool.map(send, range(len(sizes)), sizes):
            produced += size
            ctx.status(f"producing {produced:,}/{records:,} records")
    produce_s = time.monotonic() - started
    while True:
        doc = httpx.get(f"{broker.url}/v1/topics/{TOPIC}/table", timeout=60).json()
        tiered = sum(p["tiered_offset"] for p in doc["partitions"])
        if all(p["tiered_offset"] == p["high_watermark"] for p in doc["partitions"]):
            break
        ctx.status(f"waiting for the table: {tiered:,}/{records:,} records tiered")
        time.sleep(1.0)
    return {"records": records, "value_bytes": value_bytes, "keys": KEYS, "partitions": PARTITIONS,
            "produce_s": round(produce_s, 1), "produce_records_per_s": round(records / produce_s),
            "tiered_after_s": round(time.monotonic() - started, 1), "table_uri": doc["uri"],
            "table_version": doc["version"]}


# -- timing ---------------------------------------------------------------------------------------


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


class SparkCpu:
    """CPU seconds of Spark's JVM and, apart, of the Python processes under it (the
    data source's workers): who did the work, whatever else ran on the machine."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid = jvm_pid
        self.runs: list[dict] = []

    def _now(self) -> tuple[float, float]:
        children: dict[int, list[int]] = {}
        stats: dict[int, list[str]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                stats[int(entry.name)] = fields
                children.setdefault(int(fields[1]), []).append(int(entry.name))
        jvm = stats.get(self.jvm_pid)
        if jvm is None:
            return 0.0, 0.0
        # utime + stime of each process, plus cutime + cstime of reaped children.
        own = lambda f: (int(f[11]) + int(f[12])) / _CLK_TCK  # noqa: E731
        reaped = lambda f: (int(f[13]) + int(f[14])) / _CLK_TCK  # noqa: E731
        python = reaped(jvm)
        stack = list(children.get(self.jvm_pid, []))
        while stack:
            pid = stack.pop()
            python += own(stats[pid]) + reaped(stats[pid])
            stack.extend(children.get(pid, []))
        return own(jvm), python

    def measure(self, fn) -> tuple[float, object]:
        jvm0, py0 = self._now()
        seconds, result = timed(fn)
        jvm1, py1 = self._now()
        self.runs.append({"wall_s": round(seconds, 3), "jvm_cpu_s": round(jvm1 - jvm0, 2),
                          "python_cpu_s": round(py1 - py0, 2)})
        return seconds, result


def alternate(base, laketail, repeats: int, cpu: SparkCpu) -> tuple[list[float], list[float], object, object, dict]:
    """One discarded warm-up of each, then ``repeats`` alternating runs; all times,
    each side's last result and the CPU each run took."""
    base()
    laketail()
    bs, ls = [], []
    b_out = l_out = None
    usage: dict[str, list[dict]] = {"baseline": [], "laketail": []}
    for _ in range(max(1, repeats)):
        t, b_out = cpu.measure(base)
        usage["baseline"].append(cpu.runs[-1])
        bs.append(t)
        t, l_out = cpu.measure(laketail)
        usage["laketail"].append(cpu.runs[-1])
        ls.append(t)
    return bs, ls, b_out, l_out, usage


def _rows(frame) -> list[tuple]:
    return sorted(tuple(bytes(v) if isinstance(v, (bytes, bytearray)) else v for v in row) for row in frame.collect())


# -- profiling Spark's Python workers ---------------------------------------------------------------


def python_workers_root(jvm_pid: int) -> int | None:
    """The ``pyspark.daemon`` process Spark forks its tasks' Python workers from, if running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        # Spark starts a daemon per kind of Python work; tasks run under "pyspark.worker".
        args = [c for c in cmd if c]
        if ppid == jvm_pid and b"pyspark.daemon" in args and args[-1] == b"pyspark.worker":
            return int(entry.name)
    return None


def profile_workers(ctx: Context, jvm_pid: int, name: str, rerun) -> dict:
    """Run ``rerun`` while py-spy samples Spark's Python workers; the top frames."""
    spy = venv_bin("py-spy")
    root = python_workers_root(jvm_pid)
    if spy is None or root is None:
        return {"error": "py-spy is not installed" if spy is None else "no pyspark.daemon process found"}
    out = ctx.results_dir / "profiles" / f"{ctx.stamp}-6-spark-{name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([spy, "record", "--pid", str(root), "--subprocesses", "--format", "raw",
                             "--rate", "97", "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    summary: dict = {}
    try:
        time.sleep(1.0)
        summary["rerun_s"] = round(timed(rerun)[0], 2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if out.exists():
        summary.update(profile.top_frames(out, 20))
        summary["collapsed"] = str(out)
    else:
        summary["error"] = (err or b"").decode(errors="replace")[-500:]
    return summary


# -- the benchmark --------------------------------------------------------------------------------


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    records = p.spark_records
    broker = ctx.laketail("spark")
    ctx.status(f"producing {records:,} records")
    topic = build_topic(ctx, broker, records, p.value_bytes)

    ctx.status("starting Spark (local[2])")
    from deltalake import DeltaTable

    from laketail.spark import jvm, register_topics
    from laketail.spark.session import local_session

    spark = local_session("laketail-bench", master="local[2]", conf={"spark.driver.memory": "2g"})
    jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    cpu = SparkCpu(jvm_pid)
    try:
        uri = topic["table_uri"]
        files = DeltaTable(uri).file_uris()
        # Each view is made twice: the first of anything in a session pays the JVM's warm-up.
        register_s = [timed(lambda: register_topics(spark, broker.url, [TOPIC]))[0] for _ in range(2)]
        baseline_view_s = [timed(lambda: spark.read.option("basePath", uri).parquet(*files)
                                 .createOrReplaceTempView("bench_parquet"))[0] for _ in range(2)]
        plan = spark.sql(AGGREGATION.format(view=TOPIC))._jdf.queryExecution().executedPlan().toString()
        details = {"topic": topic, "files": len(files), "register_topics_s": _round(register_s),
                   "live_views": "TopicFileIndex" in plan, "jar_built": jvm.jar() is not None,
                   "baseline_view_s": _round(baseline_view_s), "spark_master": "local[2]"}

        # 1. the aggregation through register_topics against plain Parquet
        ctx.status(f"GROUP BY key: Parquet and register_topics view (x{p.repeats})")
        bs, ls, b_rows, l_rows, usage = alternate(
            lambda: _rows(spark.sql(AGGREGATION.format(view="bench_parquet"))),
            lambda: _rows(spark.sql(AGGREGATION.format(view=TOPIC))), p.repeats, cpu)
        agg = Figure(
            BENCH, f"register_topics view: GROUP BY key over {records:,} records (s)", statistics.median(ls), "s",
            "spark.read.parquet of the same files, same query", statistics.median(bs), AT_MOST(1.1),
            details={**details, "query": AGGREGATION, "runs": {"baseline_s": _round(bs), "laketail_s": _round(ls)},
                     "same_result": b_rows == l_rows, "groups": len(l_rows), "cpu": usage},
        )

        # 2. format("laketail") batch read against the native Parquet read
        def source():  # a new reader each time: option() changes a reader in place
            return (spark.read.format("laketail").option("laketail.servers", broker.url)
                    .option("subscribe", TOPIC).option("startingOffsets", "earliest"))

        parquet = spark.read.option("basePath", uri).parquet(*files)

        def laketail_read():
            return source().load().selectExpr(*SOURCE_CHECKSUM).collect()[0]

        def parquet_read():
            return parquet.selectExpr(*PARQUET_CHECKSUM).collect()[0]

        ctx.status(f"full read: Parquet and format('laketail') (x{p.repeats})")
        bs2, ls2, b_sum, l_sum, usage2 = alternate(parquet_read, laketail_read, p.repeats, cpu)
        ends = {TOPIC: {str(q): 1 for q in range(PARTITIONS)}}
        fixed_s = [timed(lambda: source().option("endingOffsets", json.dumps(ends)).load()
                         .selectExpr(*SOURCE_CHECKSUM).collect())[0] for _ in range(3)]
        read = Figure(
            BENCH, f"format('laketail') batch read, checksum of every column ({records:,} records)",
            records / statistics.median(ls2), "records/s", "spark.read.parquet of the same files, same checksum",
            records / statistics.median(bs2), AT_LEAST(0.5),
            details={"runs": {"baseline_s": _round(bs2), "laketail_s": _round(ls2)},
                     "laketail_checksum": _plain(l_sum.asDict()), "parquet_checksum": _plain(b_sum.asDict()),
                     "same_checksum": l_sum.asDict() == b_sum.asDict(),
                     "laketail_s": statistics.median(ls2), "baseline_s": statistics.median(bs2), "cpu": usage2,
                     "fixed_cost_s": _round(fixed_s)},
        )
        if read.passed is False and p.profile:
            ctx.status("profiling format('laketail') in Spark's Python workers")
            read.details["profile"] = profile_workers(ctx, jvm_pid, "format-laketail", laketail_read)

        # 3. the streaming source, availableNow, to the noop sink
        ctx.status("readStream.format('laketail'), availableNow")
        streams = []
        for i in range(max(1, p.repeats)):
            streams.append(_stream_once(spark, broker.url, ctx.workdir / f"spark-checkpoint-{i}"))
        stream_s = statistics.median(s["seconds"] for s in streams)
        stream = Figure(
            BENCH, "readStream.format('laketail'), availableNow, noop sink", records / stream_s, "records/s",
            "format('laketail') batch read, same run", read.value, None,
            details={"runs": streams, "parquet_records_per_s": read.baseline},
        )
        figures = [agg, read, stream]
        plot(ctx, figures)
        return figures
    finally:
        spark.stop()
        ctx.stop(broker)


def _stream_once(spark, url: str, checkpoint: Path) -> dict:
    shutil.rmtree(checkpoint, ignore_errors=True)
    frame = (spark.readStream.format("laketail").option("laketail.servers", url)
             .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())
    started = time.perf_counter()
    query = (frame.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(checkpoint)).start())
    query.awaitTermination()
    seconds = time.perf_counter() - started
    progress = query.recentProgress
    rows = sum(int(p.get("numInputRows", 0)) for p in progress)
    return {"seconds": round(seconds, 2), "rows": rows, "batches": len(progress),
            "processed_rows_per_s": [round(p.get("processedRowsPerSecond") or 0) for p in progress]}


def _round(xs: list[float]) -> list[float]:
    return [round(x, 3) for x in xs]


def _plain(d: dict) -> dict:
    return {k: (str(v) if not isinstance(v, (int, float)) or isinstance(v, bool) else v) for k, v in d.items()}


def plot(ctx: Context, figures: list[Figure]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg, read, stream = figures
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    runs = agg.details["runs"]
    labels = ["Parquet", "register_topics view"]
    left.bar(labels, [agg.baseline, agg.value], color=["tab:grey", "tab:blue"])
    for i, key in enumerate(("baseline_s", "laketail_s")):
        left.scatter([i] * len(runs[key]), runs[key], color="black", s=12, zorder=3)
    left.axhline(agg.baseline * 1.1, color="tab:red", linestyle=":", label="target: 1.1x Parquet")
    left.set_ylabel("seconds (median; dots: every run)")
    left.set_title(f"GROUP BY key, {agg.details['topic']['records']:,} records")
    left.legend()
    left.grid(True, axis="y", alpha=0.3)
    names = ["Parquet\n(checksum)", "format('laketail')\n(checksum)", "readStream\navailableNow"]
    values = [read.baseline / 1e6, read.value / 1e6, stream.value / 1e6]
    right.bar(names, values, color=["tab:grey", "tab:blue", "tab:cyan"])
    right.axhline(read.baseline * 0.5 / 1e6, color="tab:red", linestyle=":", label="target: 0.5x Parquet")
    right.set_ylabel("million records/s (median)")
    right.set_title("Full reads of every column")
    right.legend()
    right.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Spark over a laketail topic vs the same Parquet files (local[2])")
    save_plot(ctx, fig, "spark")
