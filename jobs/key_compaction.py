"""Key compaction computed by Spark: a partition larger than one executor's memory.

Role: the rewrite of a topic's ``"keys"`` :class:`~laketail.maintenance.rewrite.RewriteTask`
(each one partition's run of files) as Spark work, for the maintenance application and
the compaction job's Spark engine. The rule is the one of
:func:`laketail.maintenance.rewrite.compact_keys` (Kafka's log compaction):

* per key, among the non-transactional records, only the highest offset survives;
* records without a key, control rows and transactional records are kept as they are;
* a surviving tombstone (null value) older than ``delete.retention.ms`` (the task's
  ``tombstone_cutoff_us``) goes, unless a transactional record of its key survives;
* offsets never change, and the output keeps offset order.

How, in three steps, none of which holds a whole partition in one process:

1. **Decide** -- Spark reads only the columns the rule needs (offset, key, whether the
   value is null, timestamp, transactional, control, and the file each row came from)
   and computes the surviving offsets as an aggregation (``groupBy(task, key) ->
   max(offset)``, a task being one partition) joined back (semi-join), with expired
   tombstones removed by anti-joins. Spark shuffles and spills; no executor needs a
   partition's keys in memory. One aggregation covers all partitions of the topic.
2. **Chunk** -- the task's input files are cut into chunks of consecutive files of at
   most ``chunk_bytes`` (a file larger than that is a chunk of its own); Spark writes the
   surviving offsets, partitioned by their file's chunk, into the run's staging folder
   (``_survivors/chunk=<n>``; removed with the staging folder after the commit).
3. **Write** -- per chunk, one Spark task reads the chunk's survivors and its files with
   pyarrow, keeps the surviving rows and writes them with the library's writer
   (:func:`laketail.maintenance.rewrite.write_output`) into the staging folder. Values
   and headers never cross into the JVM, so the files are what the tierer would write,
   with the same statistics. A chunk where nothing survives writes nothing.

The driver gets the outputs (several per task, disjoint, in offset order) and commits them
with :func:`laketail.maintenance.table_commit.commit_rewrite` as before: one Delta commit
per topic, exactly once. Thread-safety: none needed; each call plans its own Spark jobs.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

from laketail.maintenance.rewrite import RewriteOutput, RewriteTask, write_output

#: Inside a run's staging folder: the surviving offsets Spark wrote, per chunk.
SURVIVORS_DIR = "_survivors"


def chunk_inputs(sizes: Sequence[tuple[str, int]], chunk_bytes: int) -> list[list[str]]:
    """Consecutive input files grouped into chunks of at most ``chunk_bytes`` (pure)."""
    chunks: list[list[str]] = []
    total = 0
    for path, size in sizes:
        if not chunks or total + size > chunk_bytes:
            chunks.append([])
            total = 0
        chunks[-1].append(path)
        total += size
    return chunks


def surviving_offsets(spark: Any, table_uri: str, tasks: Sequence[RewriteTask], files: Any) -> Any:
    """A DataFrame ``(chunk, offset)`` of the records of ``tasks`` that survive key
    compaction; ``files`` maps each input file's base name to its task, chunk and
    tombstone cutoff (``file, task_id, chunk, cutoff_us``)."""
    from pyspark.sql import functions as F

    paths = [f"{table_uri}/{path}" for task in tasks for path in task.inputs]
    rows = spark.read.parquet(*paths).select(
        "offset",
        "key",
        F.col("value").isNull().alias("tombstone"),
        F.unix_micros("timestamp").alias("ts"),
        F.coalesce(F.col("transactional"), F.lit(False)).alias("txn"),
        F.col("control").isNotNull().alias("is_control"),
        F.col("_metadata.file_name").alias("file"),
    ).join(F.broadcast(files), "file")
    plain = rows.filter(~F.col("txn"))
    keyed = plain.filter(F.col("key").isNotNull() & ~F.col("is_control"))
    latest = keyed.groupBy("task_id", "key").agg(F.max("offset").alias("offset"))  # one task: one partition
    kept_plain = keyed.join(latest, ["task_id", "key", "offset"], "left_semi").unionByName(
        plain.filter(F.col("key").isNull() | F.col("is_control"))
    )
    held_keys = rows.filter(F.col("txn") & F.col("key").isNotNull()).select("task_id", "key").distinct()
    expired = (
        kept_plain.filter(F.col("tombstone") & F.col("key").isNotNull() & (F.col("ts") < F.col("cutoff_us")))
        .join(held_keys, ["task_id", "key"], "left_anti")
        .select("task_id", "offset")
    )
    kept = kept_plain.join(expired, ["task_id", "offset"], "left_anti").select("chunk", "offset")
    return kept.unionByName(rows.filter(F.col("txn")).select("chunk", "offset"))


def spark_key_rewrite(
    spark: Any, table_uri: str, staging_uri: str, tasks: Sequence[RewriteTask], now_ms: int, chunk_bytes: int
) -> list[RewriteOutput]:
    """Run the ``"keys"`` tasks with Spark (module doc): one aggregation over all of
    them (grouped by task, i.e. partition, and key), then one Spark task per chunk.
    Their outputs, in task and offset order."""
    if not tasks:
        return []
    chunks: list[tuple[RewriteTask, list[str]]] = [
        (dataclasses.replace(task, rule="files"), paths)  # the survivors are written as they are
        for task in tasks
        for paths in chunk_inputs([(p, os.path.getsize(f"{table_uri}/{p}")) for p in task.inputs], chunk_bytes)
    ]
    files = spark.createDataFrame(
        [(os.path.basename(path), task.task_id, i, task.tombstone_cutoff_us)
         for i, (task, paths) in enumerate(chunks) for path in paths],
        "file STRING, task_id BIGINT, chunk INT, cutoff_us BIGINT",
    )
    survivors_uri = f"{staging_uri}/{SURVIVORS_DIR}"
    (surviving_offsets(spark, table_uri, tasks, files).repartition("chunk")
     .write.mode("overwrite").partitionBy("chunk").parquet(survivors_uri))

    def write_chunk(index: int) -> RewriteOutput | None:
        task, paths = chunks[index]
        return write_survivors(table_uri, staging_uri, task, paths, f"{survivors_uri}/chunk={index}", now_ms)

    written = spark.sparkContext.parallelize(range(len(chunks)), len(chunks)).map(write_chunk).collect()
    return sorted((output for output in written if output is not None), key=lambda o: (o.task_id, o.first_offset))


def write_survivors(
    table_uri: str, staging_uri: str, task: RewriteTask, paths: Sequence[str], survivors_uri: str, now_ms: int
) -> RewriteOutput | None:
    """One chunk on an executor: its files' rows whose offsets survive, written as one
    file; ``None`` when none survives (Spark wrote no folder for the chunk)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if not os.path.isdir(survivors_uri):
        return None
    offsets = pq.read_table(survivors_uri, columns=["offset"]).column("offset")
    pieces = [pq.read_table(f"{table_uri}/{path}") for path in paths]
    rows = pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]
    return write_output(staging_uri, task, rows.filter(pc.is_in(rows.column("offset"), value_set=offsets)), now_ms)
