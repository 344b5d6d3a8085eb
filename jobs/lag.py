"""Lag job: consumer lag per group, topic and partition, appended to a Delta table.

    spark-submit jobs/lag.py --servers URLS --data ROOT --streaming [--checkpoint DIR]
    laketail jobs run lag --servers URLS --data ROOT --command-config client.properties
    laketail jobs run lag --servers URLS --data ROOT --streaming
    laketail jobs run lag --servers URLS --data ROOT            # one measurement (cron)

``--streaming`` runs a Structured Streaming query (its progress in Spark's UI and in
the query's progress events):

* input: the stream of committed offsets -- ``__consumer_offsets`` read with
  ``format("laketail")`` (key ``{"group", "topic", "partition"}``, value ``{"offset",
  ...}``, a null value deleting the key) -- unioned with Spark's ``rate`` source, one
  tick per trigger, so a micro-batch runs every ``--interval-s`` even while no group
  commits: lag keeps moving while producers produce;
* state: the latest committed offset per group, topic and partition, a streaming
  aggregation (``max_by`` over the offsets topic's positions) kept in the checkpoint's
  state store, emitted whole (``complete``) to every micro-batch;
* each micro-batch (``foreachBatch``) adds the partitions the groups' members hold
  without having committed there (``/v1/groups/{g}``), the partitions' log end offsets
  (the gateway's ``/v1/topics/{t}/table``) and the first unconsumed record's timestamp, and
  appends one row per group, topic and partition to ``<ROOT>/_system/consumer_lag`` --
  exactly once: the commit carries the Delta transaction ``laketail.lag.<query>`` at
  version ``batch_id``, and a batch Spark runs again after a crash finds it there and
  writes nothing.

Without ``--streaming`` one measurement is taken through the gateway's v3 lag endpoint
(no SparkSession) and appended, for cron and Airflow.

Both modes have one set of rows, ``kafka-consumer-groups --describe``'s: a row per
partition the group has committed or one of its members is assigned. A partition
assigned but never committed has ``current_offset`` -1 (describe's ``-``) and its lag
counted from the log start offset (what the member reads first with
``auto.offset.reset=earliest``), as :func:`laketail.coordinator.lag.group_lags` counts it. Rows follow
:data:`laketail.maintenance.lag.LAG_SCHEMA`; ``SELECT`` over the table charts any
group's lag over time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from typing import Any, Sequence
from urllib.parse import quote

from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from laketail.coordinator.lag import lag_status
from laketail.errors import SaslAuthenticationFailed
from laketail.jobs.common import (
    base_parser,
    fail,
    parse_args,
    plan_time_ms,
    report,
    run_query,
    spark_security_options,
    spark_session,
)
from laketail.maintenance.lag import lag_rows, lag_table, lag_table_uri
from laketail.maintenance.topics import Gateway

OFFSETS_TOPIC = "__consumer_offsets"
log = logging.getLogger("laketail.jobs.lag")


def measure(gateway: Gateway, groups: Sequence[str] | None, now: int) -> list[dict]:
    """One measurement: lag rows of the given groups (default: every group)."""
    docs = []
    for group in groups or gateway.groups():
        docs.extend(gateway.lags(group))
    return lag_rows(docs, now)


def append(table_uri: str, rows: list[dict]) -> None:
    if rows:
        write_deltalake(table_uri, lag_table(rows), mode="append", schema_mode="merge")


# -- the streaming query ---------------------------------------------------------------------------


def query_app_id(checkpoint: str) -> str:
    """The Delta transaction id of one lag query (its checkpoint names it)."""
    return "laketail.lag." + hashlib.sha1(os.path.abspath(checkpoint).encode()).hexdigest()[:16]


def written_batch(table_uri: str, app_id: str) -> int:
    """The last micro-batch of ``app_id`` in the lag table (-1: none, or no table yet)."""
    try:
        table = DeltaTable(table_uri)
    except TableNotFoundError:
        return -1  # no table yet: nothing written
    except Exception as exc:  # noqa: BLE001 - unreadable: counted as nothing written, as before
        log.warning("lag table %s is unreadable, taken as empty: %s: %s", table_uri, type(exc).__name__, exc)
        return -1
    version = table.transaction_version(app_id)
    return -1 if version is None else int(version)


Owners = dict[tuple[str, str, int], tuple[str, str | None]]  # (group, topic, partition) -> (member, client)


def assigned_partitions(gateway: Any, groups: set[str]) -> Owners:
    """The partitions the members of ``groups`` (empty: every group) hold now, with the
    member and client holding each (``GET /v1/groups/{g}``). A group gone since it was
    listed holds nothing."""
    from laketail.errors import LaketailError

    if not groups:
        groups = {g["group_id"] for g in gateway.get_json("/v1/groups").get("groups", []) if g.get("members")}
    owners: Owners = {}
    for group in sorted(groups):
        try:
            doc = gateway.get_json(f"/v1/groups/{quote(group, safe='')}")
        except LaketailError:
            continue
        for member in doc.get("members", []):
            holder = (member["member_id"], member.get("client_id") or None)
            for tp in member.get("assignment", []):
                owners[(group, tp["topic"], int(tp["partition"]))] = holder
    return owners


def lag_of(committed: dict[tuple[str, str, int], int], gateway: Any, now_ms: int, batch_id: int,
           owners: Owners | None = None) -> list[dict]:
    """Lag rows for committed offsets and for the partitions in ``owners`` (assigned:
    -1 where nothing is committed, lag counted from the log start): log end offsets and
    the first unconsumed record's timestamp from the gateway (as
    :mod:`laketail.coordinator.lag` computes them). Partitions of topics that are gone
    are left out."""
    from laketail.errors import LaketailError

    owners = owners or {}
    wanted = dict(committed)
    for key in owners:
        wanted.setdefault(key, -1)
    tables: dict[str, Any] = {}
    rows = []
    for (group, topic, partition), offset in sorted(wanted.items()):
        if topic not in tables:
            try:
                tables[topic] = gateway.table(topic)
            except LaketailError:
                tables[topic] = None
        table = tables[topic]
        if table is None or partition not in table.partitions:
            continue
        offsets = table.partitions[partition]
        start_from = offset if offset >= 0 else offsets.log_start_offset
        lag = max(offsets.high_watermark - start_from, 0)
        time_lag = 0
        if lag > 0:
            first = max(start_from, offsets.log_start_offset)
            try:
                got = gateway.fetch(topic, partition, first, "read_uncommitted", 1)
                if got.records.num_rows:
                    ts_ms = got.records.column("timestamp")[0].value // 1000
                    time_lag = max(now_ms - ts_ms, 0)
            except LaketailError:
                pass  # deleted by retention just now: no time lag this round
        consumer_id, client_id = owners.get((group, topic, partition), (None, None))
        rows.append({
            "time": now_ms * 1000, "group_id": group, "topic": topic, "partition": partition,
            "current_offset": offset, "log_end_offset": offsets.high_watermark, "lag": lag,
            "time_lag_ms": time_lag, "consumer_id": consumer_id or None, "client_id": client_id,
            "status": lag_status(lag), "batch_id": batch_id,
        })
    return rows


def committed_offsets(spark: Any, servers: str, ticks_per_second: int, security: dict[str, str] | None = None) -> Any:
    """The streaming DataFrame of every group's latest committed offsets (complete
    mode), plus one row of nulls standing for the rate source's ticks; ``security``:
    the client properties the source calls the gateways with."""
    from pyspark.sql import functions as F

    records = (spark.readStream.format("laketail").option("laketail.servers", servers)
               .options(**spark_security_options(security or {}))
               .option("subscribe", OFFSETS_TOPIC).option("startingOffsets", "earliest")
               .option("failOnDataLoss", "false").load())
    key = F.from_json(F.col("key").cast("string"), "`group` STRING, topic STRING, `partition` INT")
    value = F.from_json(F.col("value").cast("string"), "offset BIGINT")
    commits = records.select(
        key.alias("k"), value.alias("v"), F.col("value").isNull().alias("deleted"),
        (F.col("partition").cast("bigint") * F.lit(1 << 40) + F.col("offset")).alias("position"),
    ).where(F.col("k.group").isNotNull() & F.col("k.topic").isNotNull() & F.col("k.partition").isNotNull())
    commits = commits.select(
        F.col("k.group").alias("group_id"), F.col("k.topic").alias("topic"), F.col("k.partition").alias("partition"),
        F.when(F.col("deleted"), F.lit(None)).otherwise(F.col("v.offset")).alias("committed"), "position",
    )
    ticks = (spark.readStream.format("rate").option("rowsPerSecond", str(ticks_per_second)).load()
             .select(F.lit(None).cast("string").alias("group_id"), F.lit(None).cast("string").alias("topic"),
                     F.lit(None).cast("int").alias("partition"), F.lit(None).cast("bigint").alias("committed"),
                     F.lit(None).cast("bigint").alias("position")))
    return (commits.unionByName(ticks).groupBy("group_id", "topic", "partition")
            .agg(F.max_by("committed", "position").alias("committed")))


def run_streaming(args: Any, table_uri: str) -> int:
    from laketail.spark.gateway import SparkGateway, parse_servers

    checkpoint = args.checkpoint or f"{table_uri.rstrip('/')}_checkpoint"
    app_id = query_app_id(checkpoint)
    spark, owned = spark_session("laketail-lag")
    if owned:  # the state (latest offset per group and partition) is small: few state partitions
        spark.conf.set("spark.sql.shuffle.partitions", str(args.state_partitions))
    from laketail.spark import register

    register(spark)
    gateway = SparkGateway(parse_servers(args.servers), security=tuple(sorted(args.security.items())))
    groups = set(args.groups or [])
    done = {"batches": 0}

    def each(frame: Any, batch_id: int) -> None:
        # Run the batch's plan whatever happens next: its state (the aggregation's
        # store) must be committed for Spark to go on, a replayed batch's too.
        latest = frame.collect()
        if args.max_rounds and done["batches"] >= args.max_rounds:
            return  # a batch begun while the query was being stopped
        if written_batch(table_uri, app_id) >= batch_id:
            report({"job": "lag", "batch_id": batch_id, "replayed": True, "rows": 0, "table": table_uri})
            done["batches"] += 1
            return
        committed = {
            (r.group_id, r.topic, int(r.partition)): int(r.committed)
            for r in latest
            if r.group_id is not None and r.committed is not None and (not groups or r.group_id in groups)
        }
        rows = lag_of(committed, gateway, plan_time_ms(args), batch_id, assigned_partitions(gateway, groups))
        data = lag_table(rows)
        write_deltalake(
            table_uri, data, mode="append", schema_mode="merge",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
        )
        done["batches"] += 1
        report({"job": "lag", "round": done["batches"], "batch_id": batch_id, "rows": len(rows),
                "table": table_uri, "total_lag": sum(r["lag"] for r in rows)})

    from laketail.errors import UnknownTopicOrPartition

    while True:  # no group has committed yet: __consumer_offsets comes with the first commit
        try:
            gateway.table(OFFSETS_TOPIC)
            break
        except UnknownTopicOrPartition:
            report({"job": "lag", "waiting_for": OFFSETS_TOPIC})
            time.sleep(args.interval_s)
    ticks = max(1, int(round(1.0 / args.interval_s))) if args.interval_s < 1 else 1
    writer = (committed_offsets(spark, args.servers, ticks, args.security).writeStream.outputMode("complete")
              .foreachBatch(each).option("checkpointLocation", checkpoint))
    try:
        error = run_query(writer, "laketail-lag", args.interval_s, done, args.max_rounds)
        return fail(f"lag query failed: {error}") if error is not None else 0
    finally:
        gateway.close()
        if owned:
            spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("lag", "Append consumer lag per group, topic and partition to a Delta table.")
    parser.add_argument("--group", action="append", dest="groups", metavar="GROUP",
                        help="a consumer group to measure (repeatable; default: every group)")
    parser.add_argument("--table", metavar="URI", help="the lag table [default: ROOT/_system/consumer_lag]")
    parser.add_argument("--streaming", action="store_true",
                        help="run the Structured Streaming lag query (a micro-batch every --interval-s)")
    parser.add_argument("--once", action="store_true", help="one measurement, then exit (the default)")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="the streaming query's checkpoint [default: the table's URI + '_checkpoint']")
    parser.add_argument("--interval-s", type=float, default=30.0, help="seconds between micro-batches [30]")
    parser.add_argument("--state-partitions", type=int, default=4,
                        help="shuffle (state store) partitions of a new streaming query [4]")
    parser.add_argument("--max-rounds", type=int, default=0,
                        help="with --streaming, stop once at least this many micro-batches ran [0: never]")
    args = parse_args(parser, argv)
    if not args.servers:
        return fail("--servers (or $LAKETAIL_SERVERS) is required: lag comes from a gateway")
    table_uri = args.table or (lag_table_uri(args.data) if args.data else None)
    if table_uri is None:
        return fail("--data or --table is required: where the lag table lives")
    if args.streaming and not args.once:
        try:
            return run_streaming(args, table_uri)
        except Exception as exc:  # the job's boundary: one line for the operator, Spark's trace is in its log
            return fail(f"lag table {table_uri}: {type(exc).__name__}: {exc}")
    gateway = Gateway(args.servers, security=args.security)
    try:
        started = time.monotonic()
        rows = measure(gateway, args.groups, plan_time_ms(args))
        append(table_uri, rows)
        report({"job": "lag", "round": 1, "rows": len(rows), "table": table_uri,
                "total_lag": sum(r["lag"] for r in rows), "seconds": round(time.monotonic() - started, 3)})
        return 0
    except SaslAuthenticationFailed as exc:  # 401: the gateway does not know the job's credentials
        return fail(f"the gateway refused the job's credentials ({exc}); give them with --command-config FILE "
                    "or LAKETAIL_SASL_USERNAME / LAKETAIL_SASL_PASSWORD; nothing was written")
    except Exception as exc:  # the job's boundary: one line for the operator
        return fail(f"lag table {table_uri}: {type(exc).__name__}: {exc}")
    finally:
        gateway.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
