"""``df.write`` / ``df.writeStream`` ``.format("laketail")``: exactly once through batch
transactions; a replayed batch id writes nothing twice; a failed write shows nothing."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import functions as F

from laketail.partitioner import partition_for_key
from laketail.spark.options import checkpoint_sink_id
from tests.spark.support import produce, read, wait_until


def written(spark: Any, url: str, topic: str, isolation: str = "read_committed") -> list[tuple]:
    return read(spark, url, topic, **{"isolation.level": isolation})


def test_a_batch_write_lands_once_and_a_replayed_batch_id_is_a_no_op(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=3)
    rows = [(f"k{i}".encode(), f"v{i}", [("h", f"{i}".encode())]) for i in range(40)]
    frame = spark.createDataFrame(rows, "key binary, value string, headers array<struct<key:string,value:binary>>")
    sink = f"batch-{uuid.uuid4().hex[:8]}"

    def write() -> None:
        (frame.repartition(2).write.format("laketail").option("laketail.servers", broker.url).option("topic", topic)
         .option("sinkId", sink).option("batchId", "5").mode("append").save())

    write()
    got = written(spark, broker.url, topic)
    assert sorted(v for *_, v in got) == sorted(f"v{i}".encode() for i in range(40))
    for partition, _, key, _ in got:  # keyed records go where Kafka's partitioner puts them
        assert partition == partition_for_key(key, 3)
    headers = (spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic)
               .option("includeHeaders", "true").load().select("value", "headers").collect())
    assert all([(h.key, bytes(h.value)) for h in r.headers] == [("h", bytes(r.value)[1:])] for r in headers)

    write()  # the same sink and batch id again: committed before, so nothing is added
    assert len(written(spark, broker.url, topic)) == 40
    assert len(written(spark, broker.url, topic, "read_uncommitted")) == 80  # written, then aborted
    assert httpx.get(f"{broker.url}/v1/sinks/{sink}", timeout=60).json()["committed_batch"] == 5


def test_topic_and_partition_columns(spark: Any, broker: Any, make_topic: Any) -> None:
    first, second = make_topic(partitions=2), make_topic(partitions=2)
    frame = spark.createDataFrame(
        [(first, 1, None, b"to-first-1"), (second, 0, b"k", b"to-second-0"), (second, None, None, b"anywhere")],
        "topic string, partition int, key binary, value binary",
    )
    frame.write.format("laketail").option("laketail.servers", broker.url).mode("append").save()
    assert [(p, v) for p, _, _, v in written(spark, broker.url, first)] == [(1, b"to-first-1")]
    assert sorted(v for *_, v in written(spark, broker.url, second)) == [b"anywhere", b"to-second-0"]


def test_a_write_to_a_missing_topic_creates_it(spark: Any, broker: Any) -> None:
    """auto.create.topics.enable (Kafka's default): the sink's metadata request creates
    the topic with num.partitions, as Kafka's producer under Spark's Kafka sink would."""
    topic = f"sink-auto-{uuid.uuid4().hex[:8]}"
    frame = spark.createDataFrame([(b"one",), (b"two",)], "value binary")
    frame.write.format("laketail").option("laketail.servers", broker.url).option("topic", topic).mode("append").save()
    assert sorted(v for *_, v in written(spark, broker.url, topic)) == [b"one", b"two"]


def test_a_failed_write_shows_nothing(spark: Any, broker: Any, topic: str) -> None:
    frame = spark.range(0, 30, numPartitions=1).select(
        F.when(F.col("id") == 25, F.raise_error(F.lit("boom"))).otherwise(F.col("id").cast("string")).alias("value")
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
    try:
        with pytest.raises(Exception, match="boom"):
            (frame.write.format("laketail").option("laketail.servers", broker.url).option("topic", topic)
             .mode("append").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    produce(broker.url, topic, 0, [b"after"])  # readable once the failed write's session ended
    wait_until(lambda: [v for *_, v in written(spark, broker.url, topic)] == [b"after"],
               "the aborted write to stay invisible")


def _stream(spark: Any, url: str, source: str, sink: str, checkpoint: Path) -> None:
    query = (spark.readStream.format("laketail").option("laketail.servers", url).option("subscribe", source)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10").load()
             .select("key", F.upper(F.col("value").cast("string")).alias("value"))
             .writeStream.format("laketail").option("laketail.servers", url).option("topic", sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()


def test_a_stream_writes_exactly_once_and_a_replayed_batch_is_a_no_op(
    spark: Any, broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    source, sink = make_topic(partitions=2), make_topic(partitions=2)
    for partition in (0, 1):
        produce(broker.url, source, partition, [f"p{partition}-{i}".encode() for i in range(12)],
                keys=[f"key{i}".encode() for i in range(12)])
    expected = sorted(f"P{p}-{i}".encode() for p in (0, 1) for i in range(12))
    checkpoint = tmp_path / "checkpoint"
    _stream(spark, broker.url, source, sink, checkpoint)
    assert sorted(v for *_, v in written(spark, broker.url, sink)) == expected
    sink_id = checkpoint_sink_id(str(checkpoint))
    last = httpx.get(f"{broker.url}/v1/sinks/{sink_id}", timeout=60).json()["committed_batch"]
    assert last >= 2  # 24 offsets at 10 per trigger

    # A driver that died after the sink committed batch `last` but before Spark logged
    # it: Spark runs the batch again on restart; the sink's commit is then a no-op.
    for name in (str(last), f".{last}.crc"):
        path = checkpoint / "commits" / name
        if path.exists():
            os.unlink(path)
    before = len(written(spark, broker.url, sink, "read_uncommitted"))
    _stream(spark, broker.url, source, sink, checkpoint)
    assert sorted(v for *_, v in written(spark, broker.url, sink)) == expected
    assert len(written(spark, broker.url, sink, "read_uncommitted")) > before  # the replay wrote, then aborted
    assert httpx.get(f"{broker.url}/v1/sinks/{sink_id}", timeout=60).json()["committed_batch"] == last
    offsets = json.loads((checkpoint / "commits" / str(last)).read_text().splitlines()[-1])
    assert offsets is not None


def test_rows_without_a_value_or_a_topic_are_refused(spark: Any, broker: Any, topic: str) -> None:
    def writer(ddl: str, row: tuple) -> Any:
        return spark.createDataFrame([row], ddl).write.format("laketail").option("laketail.servers", broker.url)

    with pytest.raises(Exception, match="needs a 'value' column"):
        writer("key binary", (b"k",)).option("topic", topic).mode("append").save()
    with pytest.raises(Exception, match="needs a 'topic' column or the 'topic' option"):
        writer("value binary", (b"v",)).mode("append").save()
