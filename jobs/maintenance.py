"""Maintenance application: retention, file compaction and key compaction as one
long-running Structured Streaming query driven by the topics' table commits.

    spark-submit jobs/maintenance.py --data ROOT [--servers URLS] [--topic T ...]
    laketail jobs run maintenance --data ROOT ...            # streaming, runs until stopped
    laketail jobs run maintenance --data ROOT --once ...     # one pass (cron, Airflow)

The query's source (``laketail_table_commits``, :class:`TableCommits`) has one offset
per maintained topic: its Delta table's version. A micro-batch runs when a topic's
table has a new commit (the tierer's, or an outside writer's) -- checked every
``--interval-s`` -- and holds the topics that moved. For each, ``foreachBatch`` runs
retention (:func:`laketail.maintenance.runs.run_retention`) and then compaction
(:func:`laketail.maintenance.runs.run_compaction`: key compaction of
``cleanup.policy=compact`` topics, then runs of small files), every rewrite Spark work on executors whatever its size
(:func:`laketail.jobs.compaction.spark_rewriter`): key compaction's latest offset per key
is a Spark aggregation and its survivors are written per chunk of input
(:mod:`laketail.jobs.key_compaction`), so a partition larger than one executor's memory
compacts; there is no in-process path below some size here.
Progress: Spark's UI (jobs per rewrite) and the query's progress events; one report
line per topic and step on stdout. Maintenance's own commits move the versions too: the
next batch finds nothing left to do and commits nothing more.

Without ``--topic``, every user topic is maintained, topics created while the
application runs included (the source lists the topic tables at each look). The broker's
scheduler (:mod:`laketail.maintenance.scheduler`) runs this application as one
long-lived child: one JVM for the broker's life, restarted if it dies.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Iterator, Sequence

from laketail.jobs.common import base_parser, fail, parse_args, plan_time_ms, report, run_query, spark_session
from laketail.jobs.compaction import spark_rewriter
from laketail.maintenance.file_compaction import DEFAULT_TARGET_FILE_BYTES
from laketail.maintenance.runs import (
    DEFAULT_VACUUM_AFTER_MS,
    CompactionResult,
    RetentionResult,
    run_compaction,
    run_retention,
)
from laketail.maintenance.table_commit import MaintenanceConflict
from laketail.maintenance.topics import MaintainedTopic, maintained_topics
from laketail.storage import object_store

try:  # the data source needs pyspark; --help and --once without Spark do not
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
except ImportError:  # pragma: no cover - pyspark is a dependency
    DataSource = DataSourceStreamReader = InputPartition = object  # type: ignore[misc,assignment]

log = logging.getLogger("laketail.jobs.maintenance")


def table_versions(root: str, topics: Sequence[str] | None) -> dict[str, int]:
    """Each topic's Delta table version now (topics without a table yet are left out).
    ``topics`` None: every topic table under the root but the internal ones (``__``),
    looked up each time, so topics created while the application runs are maintained."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from laketail.storage.table_reader import TableReader

    reader = TableReader(root)
    if topics is None:
        base = os.path.dirname(reader.table_uri("x"))
        topics = [n for n in object_store.list_folders(base) if not n.startswith("__")]
    out = {}
    for topic in topics:
        try:
            out[topic] = int(DeltaTable(reader.table_uri(topic)).version())
        except TableNotFoundError:
            continue  # no table yet (nothing tiered), or deleted
        except Exception as exc:  # noqa: BLE001 - one unreadable table must not stop the others
            log.warning("maintenance: the table of topic %s is unreadable, left out this round: %s: %s",
                        topic, type(exc).__name__, exc)
            continue
    return out


class _Moved(InputPartition):  # type: ignore[misc]
    def __init__(self, topic: str, version: int) -> None:
        self.topic = topic
        self.version = version


class TableCommits(DataSource):  # type: ignore[misc]
    """``format("laketail_table_commits")``: a row ``(topic, version)`` per topic whose
    table has a new version; options ``data`` (the data root) and ``topics``
    (comma-separated; empty: every user topic's table, new ones included)."""

    @classmethod
    def name(cls) -> str:
        return "laketail_table_commits"

    def schema(self) -> str:
        return "topic STRING, version BIGINT"

    def streamReader(self, schema: Any) -> "_CommitsReader":
        topics = [t for t in str(self.options.get("topics", "")).split(",") if t]
        return _CommitsReader(str(self.options["data"]), topics)


class _CommitsReader(DataSourceStreamReader):  # type: ignore[misc]
    """The stream reader of ``laketail_table_commits``: one row per topic whose table moved.

    Offsets are ``{topic: table version}``; a micro-batch holds the topics whose version
    changed since the last one (every topic in the first), which the maintenance query
    then retains and compacts. Runs in the Spark driver.
    """

    def __init__(self, root: str, topics: list[str]) -> None:
        self.root = root
        self.topics = topics or None

    def initialOffset(self) -> dict:
        return {}  # every topic's first version seen is new: the first batch maintains all

    # Spark's pre-4.2 signature, on purpose: Spark inspects it and, finding no parameters,
    # calls it without a start or a read limit (no admission control: every new version).
    def latestOffset(self) -> dict:  # type: ignore[override]
        return {t: v for t, v in table_versions(self.root, self.topics).items()}

    def partitions(self, start: dict, end: dict) -> list:
        return [_Moved(t, int(v)) for t, v in sorted(end.items()) if start.get(t) != v]

    def read(self, partition: Any) -> Iterator[tuple]:
        yield (partition.topic, partition.version)

    def commit(self, end: dict) -> None:
        pass


def maintain(root: str, topic: MaintainedTopic, args: Any, rewriter: Any) -> None:
    """Retention, then compaction, of one topic; a report line per step."""
    for step in ("retention", "compaction"):
        result: RetentionResult | CompactionResult
        try:
            if step == "retention":
                result = run_retention(root, topic, plan_time_ms(args), vacuum_after_ms=args.vacuum_after_ms)
            else:
                result = run_compaction(
                    root, topic, plan_time_ms(args), target_file_bytes=args.target_file_bytes,
                    min_files=args.min_files, rewriter=rewriter, vacuum_after_ms=args.vacuum_after_ms,
                )
        except MaintenanceConflict as exc:  # an outside commit won: the next batch tries again
            report({"job": step, "topic": topic.name, "conflict": exc.message})
            continue
        report(result.summary())


def default_checkpoint(root: str) -> str:
    """``ROOT/_system/checkpoints/maintenance``; on an object-store root, where Spark's
    JVM cannot write without hadoop-aws, ``./laketail-checkpoints/maintenance`` in the
    working directory: the checkpoint only remembers which table versions were
    maintained, and an application that starts without it maintains every table once
    more, which changes nothing that is already compact."""
    if object_store.is_remote(root):
        return os.path.abspath(os.path.join("laketail-checkpoints", "maintenance"))
    return f"{root.rstrip('/')}/_system/checkpoints/maintenance"


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("maintenance", "Retention and compaction as one Structured Streaming application.")
    parser.add_argument("--once", action="store_true", help="one pass over every topic, then exit")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="the streaming query's checkpoint [default: ROOT/_system/checkpoints/maintenance; "
                             "./laketail-checkpoints/maintenance when ROOT is an object store]")
    parser.add_argument("--interval-s", type=float, default=60.0, help="seconds between looks at the tables [60]")
    parser.add_argument("--max-rounds", type=int, default=0,
                        help="stop once at least this many micro-batches ran (one more may start) [0: never]")
    parser.add_argument("--target-file-bytes", type=int, default=DEFAULT_TARGET_FILE_BYTES,
                        help="merge adjacent files up to this size [default: 128 MiB]")
    parser.add_argument("--min-files", type=int, default=2, help="merge runs of at least this many files [2]")
    parser.add_argument("--vacuum-after-ms", type=int, default=DEFAULT_VACUUM_AFTER_MS,
                        help="delete removed files this long after their removal [1 hour]")
    args = parse_args(parser, argv)
    if not args.data:
        return fail("--data (or $LAKETAIL_DATA) is required: the jobs read and commit the tables directly")
    spark, owned = spark_session("laketail-maintenance")
    rewriter = spark_rewriter(lambda: spark, args.target_file_bytes)
    try:
        topics = {t.name: t for t in maintained_topics(args.data, args.servers, args.topics, security=args.security)}
        if args.once:
            for topic in topics.values():
                maintain(args.data, topic, args, rewriter)
            return 0
        spark.dataSource.register(TableCommits)
        done = {"batches": 0}

        def each(frame: Any, batch_id: int) -> None:
            moved = sorted({r.topic for r in frame.collect()})
            current = {} if not moved else {
                t.name: t for t in maintained_topics(args.data, args.servers, args.topics, security=args.security)}
            for name in moved:
                if name in current:
                    maintain(args.data, current[name], args, rewriter)
            done["batches"] += 1
            report({"job": "maintenance", "batch_id": batch_id, "topics": moved})

        checkpoint = args.checkpoint or default_checkpoint(args.data)
        writer = (spark.readStream.format("laketail_table_commits").option("data", args.data)
                  .option("topics", ",".join(sorted(topics)) if args.topics else "").load()
                  .writeStream.foreachBatch(each).option("checkpointLocation", checkpoint))
        error = run_query(writer, "laketail-maintenance", args.interval_s, done, args.max_rounds)
        return fail(f"maintenance query failed: {error}") if error is not None else 0
    except Exception as exc:  # the job's boundary: one line for the operator, Spark's trace is in its log
        return fail(f"{type(exc).__name__}: {exc}")
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
