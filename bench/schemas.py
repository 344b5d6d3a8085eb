"""Benchmark 14: schemas and typed columns (issue 42) against the same broker without them.

Three figures, each against a baseline measured in the same run:

* **Avro produce with validation.** wrk posts the same v2 binary body (``batch`` records,
  each an Avro ``Order`` in Confluent's wire format: magic byte, schema id, about 60
  bytes of payload) to a topic with ``confluent.value.schema.validation=true`` and to a
  topic without it, on one broker, alternating ``repeats`` times (medians kept). Target:
  at least 0.5x. For information, the REST Proxy's own Avro embedded format (v2
  ``application/vnd.kafka.avro.v2+json`` with ``value_schema_id``: the proxy encodes each
  record's JSON, then validation reads it) against the same binary baseline.
* **Spark over typed columns.** A topic with ``laketail.table.mode=value_schema_latest``
  and a JSON Schema under ``<topic>-value`` gets ``schema_records`` JSON values (no wire
  prefix, so ``from_json(CAST(value AS STRING))`` reads the very same bytes), tiered with
  ``value_struct``. On its ``register_topics`` view, ``SELECT region, sum(amount) ...
  GROUP BY region`` over ``value_struct`` against the same query over ``from_json`` of the
  raw value, alternating (one discarded warm-up each), results compared. Target: at
  least 3x the records/s. JSON Schema, not Avro: ``from_avro`` lives in the
  ``spark-avro`` package, whose jar is not in pyspark's distribution and which this
  machine cannot download.
* **Tier delay with typed columns.** One broker, two one-partition topics produced the
  same framed Avro batches at the same paced rate (``tier_rate`` records/s each, in turns
  from one loop), one with ``laketail.table.mode=value_schema_id_prefix`` (the tier pass
  decodes every value into ``value_struct``), one without. Every 100 ms the run reads each
  topic's ``/v1/topics/<t>/table`` and counts the records not yet in the table
  (high watermark - tiered offset). Figure: the mean backlog of the typed topic against
  the plain one's. Target: at most 1.5x.

``details`` keep every run, the body sizes, the backlog's p95 and maximum, and the CPU
of the broker during the wrk runs.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import threading
import time

import httpx
import numpy as np
import orjson

from bench import bodies, wrk
from bench.context import Context
from bench.figures import AT_LEAST, AT_MOST, Figure
from bench.procs import LaketailServer
from bench.spark_reads import SparkCpu, alternate

BENCH = "14 schemas"
REGISTRY = "application/vnd.schemaregistry.v1+json"
AVRO_V2 = "application/vnd.kafka.avro.v2+json"
ORDER_AVRO = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}, {"name": "region", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "note", "type": "string"}]}
ORDER_JSON = {"type": "object", "properties": {
    "id": {"type": "string"}, "region": {"type": "string"}, "amount": {"type": "number"},
    "note": {"type": "string"}}, "required": ["id", "region", "amount"]}
REGIONS = 16
TYPED_QUERY = ("SELECT value_struct.region AS region, sum(value_struct.amount) AS amount "
               "FROM {view} GROUP BY value_struct.region")
JSON_QUERY = ("SELECT j.region AS region, sum(j.amount) AS amount FROM (SELECT from_json(CAST(value AS STRING), "
              "'id STRING, region STRING, amount DOUBLE, note STRING') AS j FROM {view}) GROUP BY j.region")


def register(broker: LaketailServer, subject: str, schema: dict, schema_type: str = "AVRO") -> int:
    body = {"schema": json.dumps(schema)} | ({} if schema_type == "AVRO" else {"schemaType": schema_type})
    r = httpx.post(f"{broker.url}/subjects/{subject}/versions", content=json.dumps(body),
                   headers={"Content-Type": REGISTRY}, timeout=60)
    if r.status_code != 200:
        raise RuntimeError(f"register {subject}: {r.status_code} {r.text[:300]}")
    return int(r.json()["id"])


def orders(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"id": f"o-{seed}-{i:08d}", "region": f"r-{int(rng.integers(REGIONS)):02d}",
             "amount": round(float(rng.uniform(1, 500)), 2), "note": os.urandom(12).hex()} for i in range(n)]


def avro_values(schema_id: int, records: list[dict]) -> list[bytes]:
    from laketail.schemas import wire

    codec = wire.codec("AVRO", json.dumps(ORDER_AVRO))
    return [wire.frame(schema_id, codec.encode(r)) for r in records]


# -- a: Avro produce with validation ---------------------------------------------------------------


def produce_figures(ctx: Context) -> list[Figure]:
    p = ctx.params
    batch = 100
    broker = ctx.laketail("schemas-produce")
    try:
        broker.create_topic("bench-avro-checked", 4, {"confluent.value.schema.validation": "true"})
        broker.create_topic("bench-avro-plain", 4)
        schema_id = register(broker, "bench-avro-checked-value", ORDER_AVRO)
        records = orders(batch)
        body = bodies.v2_binary(avro_values(schema_id, records))
        embedded = orjson.dumps({"value_schema_id": schema_id, "records": [{"value": r} for r in records]})

        def drive(topic: str, content: bytes, content_type: str) -> wrk.WrkResult:
            return wrk.run(f"{broker.url}/topics/{topic}?acks=1", duration_s=p.seconds, warmup_s=p.warmup_s,
                           workdir=ctx.workdir, method="POST", body=content, content_type=content_type,
                           connections=p.connections, server_pid=broker.pid)

        # a refused body would make wrk count error answers as throughput: check both first
        for topic, content, kind in (("bench-avro-checked", body, bodies.V2_BINARY),
                                     ("bench-avro-checked", embedded, AVRO_V2)):
            r = httpx.post(f"{broker.url}/topics/{topic}", content=content, headers={"Content-Type": kind},
                           timeout=60)
            if r.status_code != 200 or any(o.get("error_code") for o in r.json()["offsets"]):
                raise RuntimeError(f"{kind} to {topic}: {r.status_code} {r.text[:300]}")
        ctx.status(f"Avro produce: validated vs plain topic, batch {batch} (x{p.repeats})")
        b, r, spread = wrk.interleaved(lambda: drive("bench-avro-plain", body, bodies.V2_BINARY),
                                       lambda: drive("bench-avro-checked", body, bodies.V2_BINARY), p.repeats)
        checked = Figure(
            BENCH, f"v2 binary of framed Avro, batch {batch}, confluent.value.schema.validation=true",
            r.requests_per_s * batch, "records/s", "the same bytes to a topic without validation",
            b.requests_per_s * batch, AT_LEAST(0.5),
            details={"laketail": r.as_dict(), "baseline": b.as_dict(), "runs": spread, "body_bytes": len(body),
                     "value_bytes": len(avro_values(schema_id, records[:1])[0])},
        )
        ctx.status(f"Avro embedded format vs binary, batch {batch} (x{p.repeats})")
        b2, r2, spread2 = wrk.interleaved(lambda: drive("bench-avro-plain", body, bodies.V2_BINARY),
                                          lambda: drive("bench-avro-checked", embedded, AVRO_V2), p.repeats)
        proxy = Figure(
            BENCH, f"v2 Avro embedded format (value_schema_id), batch {batch}, validated",
            r2.requests_per_s * batch, "records/s", "v2 binary of the same records, no validation",
            b2.requests_per_s * batch, None,
            details={"laketail": r2.as_dict(), "baseline": b2.as_dict(), "runs": spread2,
                     "body_bytes": len(embedded)},
        )
        return [checked, proxy]
    finally:
        ctx.stop(broker)


# -- b: Spark over value_struct vs from_json ------------------------------------------------------


def _arrow_body(values: list[bytes]) -> bytes:
    return bodies.arrow_stream(values)


def spark_figure(ctx: Context) -> Figure:
    p = ctx.params
    records = p.schema_records
    topic = "bench_typed"
    broker = ctx.laketail("schemas-spark")
    spark = None
    try:
        broker.create_topic(topic, 2, {"laketail.table.mode": "value_schema_latest"})
        register(broker, f"{topic}-value", ORDER_JSON, "JSON")
        started = time.monotonic()
        step = 50_000

        def send(i: int) -> None:
            values = [orjson.dumps(o) for o in orders(min(step, records - i), seed=i)]
            r = httpx.post(f"{broker.url}/v1/topics/{topic}/partitions/{(i // step) % 2}/records?acks=1",
                           content=_arrow_body(values), headers={"Content-Type": bodies.ARROW_STREAM}, timeout=300)
            if r.status_code != 200:
                raise RuntimeError(f"produce to {topic}: {r.status_code} {r.text[:300]}")

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(send, range(0, records, step)))
        produce_s = time.monotonic() - started
        while True:
            doc = httpx.get(f"{broker.url}/v1/topics/{topic}/table", timeout=60).json()
            if all(q["tiered_offset"] == q["high_watermark"] for q in doc["partitions"]):
                break
            ctx.status(f"waiting for the typed table: {sum(q['tiered_offset'] for q in doc['partitions']):,}"
                       f"/{records:,}")
            time.sleep(1.0)
        tier_s = time.monotonic() - started

        ctx.status("starting Spark (local[2])")
        from laketail.spark import register_topics
        from laketail.spark.session import local_session

        spark = local_session("laketail-bench-schemas", master="local[2]", conf={"spark.driver.memory": "2g"})
        cpu = SparkCpu(int(spark.sparkContext._jvm.ProcessHandle.current().pid()))
        register_topics(spark, broker.url, [topic])

        def rows(query: str) -> list[tuple]:
            return sorted((r.region, round(r.amount, 4)) for r in spark.sql(query.format(view=topic)).collect())

        ctx.status(f"GROUP BY region: from_json vs value_struct (x{p.repeats})")
        bs, ls, b_rows, l_rows, usage = alternate(lambda: rows(JSON_QUERY), lambda: rows(TYPED_QUERY),
                                                  p.repeats, cpu)
        return Figure(
            BENCH, f"Spark sum(value_struct.amount) GROUP BY over {records:,} records",
            records / statistics.median(ls), "records/s", "the same query over from_json of the raw value",
            records / statistics.median(bs), AT_LEAST(3.0),
            details={"typed_query": TYPED_QUERY, "json_query": JSON_QUERY, "same_result": b_rows == l_rows,
                     "groups": len(l_rows), "runs": {"from_json_s": [round(x, 3) for x in bs],
                                                     "value_struct_s": [round(x, 3) for x in ls]},
                     "cpu": usage, "produce_s": round(produce_s, 1), "tiered_after_s": round(tier_s, 1),
                     "format": "JSON Schema, value_schema_latest (from_avro needs spark-avro, not available)"},
        )
    finally:
        if spark is not None:
            spark.stop()
        ctx.stop(broker)


# -- c: tier delay with typed columns ------------------------------------------------------------


def _backlog(client: httpx.Client, url: str, topic: str) -> int:
    doc = client.get(f"{url}/v1/topics/{topic}/table", timeout=30).json()
    return sum(q["high_watermark"] - q["tiered_offset"] for q in doc["partitions"])


def tier_delay_figure(ctx: Context) -> Figure:
    p = ctx.params
    batch = 100
    broker = ctx.laketail("schemas-tier")
    try:
        broker.create_topic("bench-tier-typed", 1, {"laketail.table.mode": "value_schema_id_prefix"})
        broker.create_topic("bench-tier-plain", 1)
        schema_id = register(broker, "bench-tier-typed-value", ORDER_AVRO)
        bodies_ = [bodies.v2_binary(avro_values(schema_id, orders(batch, seed=s))) for s in range(8)]
        seconds = max(10.0, 3 * p.seconds)
        interval = batch / p.tier_rate
        samples: dict[str, list[int]] = {"bench-tier-typed": [], "bench-tier-plain": []}
        stop = threading.Event()

        def sample() -> None:
            with httpx.Client() as client:
                while not stop.wait(0.1):
                    for topic, seen in samples.items():
                        seen.append(_backlog(client, broker.url, topic))

        sampler = threading.Thread(target=sample, name="backlog-sampler")
        ctx.status(f"tier delay: typed vs plain, {p.tier_rate:,.0f} records/s each for {seconds:.0f} s")
        sent = 0
        late = 0
        with httpx.Client(headers={"Content-Type": bodies.V2_BINARY}) as client:
            sampler.start()
            try:
                begin = time.monotonic()
                while (now := time.monotonic()) - begin < seconds:
                    due = begin + sent * interval
                    if now < due:
                        time.sleep(due - now)
                    elif now - due > interval:
                        late += 1
                    body = bodies_[sent % len(bodies_)]
                    for topic in samples:
                        r = client.post(f"{broker.url}/topics/{topic}?acks=1", content=body, timeout=60)
                        if r.status_code != 200:
                            raise RuntimeError(f"produce to {topic}: {r.status_code} {r.text[:300]}")
                    sent += 1
            finally:
                stop.set()
                sampler.join()
        typed, plain = samples["bench-tier-typed"], samples["bench-tier-plain"]
        undecoded = [line for line in httpx.get(f"{broker.url}/metrics", timeout=30).text.splitlines()
                     if line.startswith("laketail_table_values_undecoded_total{")]

        def summary(xs: list[int]) -> dict:
            return {"mean": round(statistics.fmean(xs), 1), "p95": float(np.percentile(xs, 95)), "max": max(xs),
                    "samples": len(xs)}

        return Figure(
            BENCH, f"tier delay: records not yet in the table, typed (Avro value_struct) at "
                   f"{p.tier_rate:,.0f} records/s", statistics.fmean(typed), "records (mean)",
            "the same records to a topic without typed columns", statistics.fmean(plain), AT_MOST(1.5),
            details={"typed": summary(typed), "plain": summary(plain), "seconds": seconds,
                     "records_per_topic": sent * batch, "late_batches": late, "undecoded_metric": undecoded,
                     "table_flush_interval_ms": 1000},
        )
    finally:
        ctx.stop(broker)


def run(ctx: Context) -> list[Figure]:
    figures = produce_figures(ctx)
    figures.append(spark_figure(ctx))
    figures.append(tier_delay_figure(ctx))
    return figures


__all__ = ["run"]
