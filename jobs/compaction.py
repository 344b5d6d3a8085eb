"""Compaction job: small table files merged into target-sized ones, and key compaction.

    spark-submit jobs/compaction.py --data ROOT [--servers URLS] [--topic T ...]
    laketail jobs run compaction --data ROOT ...

Per topic (:func:`laketail.maintenance.runs.run_compaction`): plan from one snapshot of
its Delta table -- key compaction (latest record per key, tombstones kept
``delete.retention.ms``, nothing younger than ``min.compaction.lag.ms``) for
``cleanup.policy=compact`` topics, then runs of small adjacent files up to
``--target-file-bytes`` -- rewrite, and commit ``remove`` + ``add`` (``dataChange=false``)
in one delta-rs commit. Offsets never change, so consumers' positions and streams'
offsets stay valid and nothing is replayed.

Where the rewrite runs (``--engine``): ``spark`` makes each rewrite task a Spark task
whose executor reads the task's input files, applies the task's rule (the pure Arrow
functions of :mod:`laketail.maintenance.rewrite`, shared with the broker) and writes
the output with the library's writer -- rows never cross into the JVM, so the files
are byte-for-byte what the tierer would write, with the same statistics; ``local``
runs the same functions in the driver; ``auto`` (the default) goes local when a
topic's inputs total at most ``--local-max-bytes``. Under ``spark``, key compaction is
computed by Spark itself (latest offset per key as an aggregation, survivors written per
chunk: :mod:`laketail.jobs.key_compaction`), so a partition larger than one executor's
memory compacts; the maintenance application always rewrites this way.

On an object-store root (``s3://...``) every rewrite task, key compaction included, is
one Spark task running the shared Arrow functions in a Python worker, which reads and
writes the bucket through delta-rs's object store: Spark's JVM reads Parquet through
Hadoop file systems, and without hadoop-aws on the classpath it cannot open ``s3://``.
A partition's key compaction then has to fit one worker's memory. The outputs are
written into the table's partition folders (no rename on an object store) and join
the table only with the commit.
"""

from __future__ import annotations

import sys
from typing import Sequence

from laketail.jobs.common import base_parser, fail, parse_args, plan_time_ms, report, spark_session
from laketail.jobs.key_compaction import spark_key_rewrite
from laketail.maintenance.file_compaction import DEFAULT_TARGET_FILE_BYTES
from laketail.maintenance.rewrite import RewriteOutput, RewriteTask, read_inputs, rewrite_locally, write_output
from laketail.maintenance.runs import DEFAULT_VACUUM_AFTER_MS, Rewriter, run_compaction
from laketail.maintenance.table_commit import MaintenanceConflict
from laketail.maintenance.topics import maintained_topics
from laketail.storage import object_store


def run_task(table_uri: str, staging_uri: str, task: RewriteTask, now_ms: int) -> RewriteOutput | None:
    """One rewrite on an executor: read the task's input files, apply its rule, write."""
    return write_output(staging_uri, task, read_inputs(table_uri, task), now_ms)


def spark_rewriter(get_spark, chunk_bytes: int = DEFAULT_TARGET_FILE_BYTES) -> Rewriter:
    """Rewrites as Spark work whatever their size. File compaction: one Spark task per
    rewrite task (Spark schedules and retries them; a retried attempt's file stays in the
    staging folder, never committed). Key compaction: the latest offset per key computed
    by a Spark aggregation, the survivors written per chunk of at most ``chunk_bytes``
    of input (:func:`laketail.jobs.key_compaction.spark_key_rewrite`), so a partition
    larger than one executor's memory compacts."""

    def rewrite(table_uri: str, staging_uri: str, tasks: Sequence[RewriteTask], now_ms: int) -> list[RewriteOutput]:
        # The JVM's Parquet reader cannot open an object store here (no hadoop-aws): there
        # key compaction runs in the Python workers like file compaction.
        keys = [] if object_store.is_remote(table_uri) else [task for task in tasks if task.rule == "keys"]
        outputs = spark_key_rewrite(get_spark(), table_uri, staging_uri, keys, now_ms, chunk_bytes) if keys else []
        files = [task for task in tasks if task not in keys]
        if files:
            rdd = get_spark().sparkContext.parallelize(files, len(files))
            written = rdd.map(lambda task: run_task(table_uri, staging_uri, task, now_ms)).collect()
            outputs += [output for output in written if output is not None]
        return outputs

    return rewrite


def choose_rewriter(
    engine: str, local_max_bytes: int, get_spark, target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
) -> Rewriter:
    """``auto``: local for small inputs, Spark beyond ``local_max_bytes``."""
    if engine == "local":
        return rewrite_locally
    if engine == "spark":
        return spark_rewriter(get_spark, target_file_bytes)

    def auto(table_uri: str, staging_uri: str, tasks: Sequence[RewriteTask], now_ms: int) -> list[RewriteOutput]:
        total = sum(object_store.size(f"{table_uri}/{p}") for t in tasks for p in t.inputs)
        chosen = rewrite_locally if total <= local_max_bytes else spark_rewriter(get_spark, target_file_bytes)
        return chosen(table_uri, staging_uri, tasks, now_ms)

    return auto


# -- main ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("compaction", "Merge small table files; key-compact cleanup.policy=compact topics.")
    parser.add_argument("--target-file-bytes", type=int, default=DEFAULT_TARGET_FILE_BYTES,
                        help="merge adjacent files up to this size [default: 128 MiB]")
    parser.add_argument("--min-files", type=int, default=2, help="merge runs of at least this many files [2]")
    parser.add_argument("--engine", choices=("auto", "spark", "local"), default="auto",
                        help="where files are rewritten [auto: local up to --local-max-bytes]")
    parser.add_argument("--local-max-bytes", type=int, default=64 * 1024 * 1024,
                        help="largest input a rewrite runs in the driver with pyarrow under --engine auto")
    parser.add_argument("--vacuum-after-ms", type=int, default=DEFAULT_VACUUM_AFTER_MS,
                        help="delete removed files this long after their removal [1 hour]")
    parser.add_argument("--dry-run", action="store_true", help="plan and report, change nothing")
    args = parse_args(parser, argv)
    if not args.data:
        return fail("--data (or $LAKETAIL_DATA) is required: the jobs read and commit the tables directly")
    spark, owned = None, False

    def get_spark():
        nonlocal spark, owned
        if spark is None:
            spark, owned = spark_session("laketail-compaction")
        return spark

    rewriter = choose_rewriter(args.engine, args.local_max_bytes, get_spark, args.target_file_bytes)
    status = 0
    current = None  # the topic being worked on, named in a failure
    try:
        for topic in maintained_topics(args.data, args.servers, args.topics, security=args.security):
            current = topic.name
            try:
                result = run_compaction(
                    args.data, topic, plan_time_ms(args),
                    target_file_bytes=args.target_file_bytes, min_files=args.min_files, rewriter=rewriter,
                    vacuum_after_ms=args.vacuum_after_ms, dry_run=args.dry_run,
                )
            except MaintenanceConflict as exc:
                report({"job": "compaction", "topic": topic.name, "conflict": exc.message})
                continue
            report(result.summary() | {"dry_run": args.dry_run})
    except Exception as exc:  # one line for the operator; Spark's own trace is in its log
        status = fail(f"{'topic ' + current + ': ' if current else ''}{type(exc).__name__}: {exc}")
    finally:
        if owned and spark is not None:
            spark.stop()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
