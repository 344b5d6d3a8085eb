"""Exactly-once pipeline: read a topic, transform, write another topic (a template).

    spark-submit jobs/eos_pipeline.py --servers URLS --source IN --sink OUT --checkpoint DIR
    laketail jobs run eos_pipeline --servers URLS --source IN --sink OUT --checkpoint DIR

``readStream.format("laketail")`` from ``--source`` (read_committed, offsets kept in
the checkpoint and, with ``--group-id``, committed to that consumer group so lag tools
see the pipeline) -> :func:`transform` (pure: edit it to make the pipeline yours) ->
``writeStream.format("laketail")`` into ``--sink``. The sink writes each micro-batch in
one transaction whose commit names the batch, so a batch Spark replays after a crash
is not written twice: every input record lands in the sink exactly once for
read_committed readers, however often the driver dies and restarts from the
checkpoint.

``--available-now`` processes what is there and stops (a batch run of the same
pipeline); otherwise the query runs until stopped, every ``--trigger-interval-s``.
"""

from __future__ import annotations

import sys
from typing import Sequence

from laketail.jobs.common import base_parser, fail, parse_args, report, spark_security_options, spark_session


def transform(records):
    """The pipeline's logic, pure over the source's DataFrame (Kafka's columns: ``key``,
    ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``, ...) returning the
    sink's columns (``key``, ``value``, optionally ``headers`` / ``partition``).

    The template upper-cases each value (as UTF-8 text) and keeps its key, so a record
    goes to the sink partition its key picks."""
    from pyspark.sql import functions as F

    return records.select(
        F.col("key"),
        F.upper(F.col("value").cast("string")).cast("binary").alias("value"),
    )


def build_query(spark, args):
    """The streaming query: source -> :func:`transform` -> sink (not started)."""
    reader = (
        spark.readStream.format("laketail")
        .option("laketail.servers", args.servers)
        .options(**spark_security_options(args.security))
        .option("subscribe", args.source)
        .option("startingOffsets", args.starting_offsets)
        .option("isolation.level", "read_committed")
    )
    if args.group_id:
        reader = reader.option("groupId", args.group_id)
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    writer = (
        transform(reader.load())
        .writeStream.format("laketail")
        .option("laketail.servers", args.servers)
        .options(**spark_security_options(args.security))
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .queryName(args.query_name)
    )
    if args.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{args.trigger_interval_s} seconds")


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("eos_pipeline", "Read a topic, transform, write a topic, exactly once.")
    parser.add_argument("--source", required=True, help="the topic to read")
    parser.add_argument("--sink", required=True, help="the topic to write")
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="the query's checkpoint (offsets and the sink's batch ids)")
    parser.add_argument("--group-id", help="commit each finished batch's offsets to this consumer group")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest, latest or JSON [earliest]")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--trigger-interval-s", type=float, default=1.0)
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--query-name", default="laketail_eos_pipeline")
    args = parse_args(parser, argv)
    if not args.servers:
        return fail("--servers (or $LAKETAIL_SERVERS) is required")
    spark, owned = spark_session("laketail-eos-pipeline")
    try:
        from laketail.spark import register

        register(spark)
        query = build_query(spark, args).start()
        report({"job": "eos_pipeline", "topic": args.source, "sink": args.sink, "query": query.id, "started": True})
        query.awaitTermination()
        progress = query.lastProgress or {}
        report({"job": "eos_pipeline", "topic": args.source, "sink": args.sink, "batch": progress.get("batchId"),
                "stopped": True})
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # the job's boundary: one line for the operator, Spark's trace is in its log
        return fail(f"{args.source} -> {args.sink}: {type(exc).__name__}: {exc}")
    finally:
        if owned:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
