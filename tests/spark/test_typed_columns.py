"""Typed columns in Spark: the SQL views of a topic with ``laketail.table.mode`` expose
``value_struct``, so ``SELECT value_struct.amount`` needs no ``from_avro``: the views
over laketail's JVM relation (live) and the file-list views alike; ``key_struct``
(``laketail.table.key.mode``) next to it the same way."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from pyspark.sql import functions as F

from laketail.schemas import wire
from laketail.spark import jvm, register_topics
from laketail.spark import sql as sql_module
from tests.schemas.test_typed_columns import (
    KEY_V1,
    KEY_V2,
    KEYED,
    ORDER_V1,
    ORDER_V2,
    TYPED,
    _produce_avro,
    _produce_keyed_avro,
)
from tests.spark.support import table_info, wait_tiered


@pytest.mark.parametrize("live", [True, False], ids=["jvm", "file-lists"])
def test_sql_views_expose_the_typed_value(spark: Any, broker: Any, make_topic: Any, monkeypatch: Any,
                                          live: bool) -> None:
    if live and jvm.jar() is None:
        pytest.skip("the laketail jar is not built (no javac)")
    topic = make_topic(configs=TYPED)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-1", "amount": 1.5}, {"id": "o-2", "amount": 2.5}])
    assert broker.rest.produce_binary(topic, [{"value": b"raw", "partition": 0}]).status_code == 200
    wait_tiered(broker.url, topic)
    if not live:
        monkeypatch.setattr(sql_module.jvm, "attach", lambda spark: False)
    register_topics(spark, broker.url, [topic], follow=False)
    rows = spark.sql(f"SELECT offset, value_struct.id, value_struct.amount FROM `{topic}` ORDER BY offset").collect()
    assert [tuple(r) for r in rows] == [(0, "o-1", 1.5), (1, "o-2", 2.5), (2, None, None)]
    total = spark.sql(f"SELECT sum(value_struct.amount) AS s FROM `{topic}_all`").collect()[0].s
    assert total == 4.0
    plan = spark.table(f"`{topic}`")._jdf.queryExecution().executedPlan().toString()
    assert ("TopicFileIndex" in plan) is live


# -- format("laketail"): the source and the exactly-once sink ------------------------------------

ORDER_TYPE = "struct<id:string,amount:double>"


def _alter(broker: Any, topic: str, name: str, value: str) -> None:
    resp = httpx.post(f"{broker.url}{broker.rest.v3(f'/topics/{topic}/configs:alter')}", timeout=60,
                      json={"data": [{"name": name, "value": value}]})
    assert resp.status_code in (200, 204), resp.text


@pytest.mark.parametrize("source", ["laketail", "laketail_python"], ids=["jar", "python"])
def test_format_laketail_reads_value_struct(spark: Any, broker: Any, make_topic: Any, source: str) -> None:
    if source == "laketail" and jvm.jar() is None:
        pytest.skip("the laketail jar is not built (no javac)")
    topic = make_topic(configs=TYPED)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-1", "amount": 1.5}, {"id": "o-2", "amount": 2.5}])
    assert broker.rest.produce_binary(topic, [{"value": b"raw", "partition": 0}]).status_code == 200
    wait_tiered(broker.url, topic)
    _alter(broker, topic, "table.flush.interval.ms", "3600000")
    # a newer version in the untiered tail: decoded by the task, fitted to the table's type
    _produce_avro(broker.rest, topic, ORDER_V2, [{"id": "o-3", "amount": 3.0, "note": {"string": "rush"}}])
    part = table_info(broker.url, topic)["partitions"][0]
    assert (part["tiered_offset"], part["high_watermark"]) == (3, 4)

    frame = spark.read.format(source).option("laketail.servers", broker.url).option("subscribe", topic).load()
    assert frame.columns[-1] == "value_struct"
    assert frame.schema["value_struct"].dataType.simpleString() == ORDER_TYPE
    rows = frame.select("offset", "value_struct.id", "value_struct.amount").orderBy("offset").collect()
    assert [tuple(r) for r in rows] == [(0, "o-1", 1.5), (1, "o-2", 2.5), (2, None, None), (3, "o-3", 3.0)]
    total = frame.groupBy("partition").agg(F.sum("value_struct.amount").alias("s")).collect()
    assert [(r.partition, r.s) for r in total] == [(0, 7.0)]
    plan = frame._jdf.queryExecution().executedPlan().toString()
    if source == "laketail":  # the tiered head by Spark's Parquet reader, the tail by the Python source
        assert "1 range by Spark's Parquet reader" in plan and "1 by the Python source" in plan, plan


def test_format_laketail_without_typed_columns_keeps_the_kafka_columns(spark: Any, broker: Any,
                                                                       make_topic: Any) -> None:
    topic = make_topic()
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-1", "amount": 1.5}])
    wait_tiered(broker.url, topic)
    frame = spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic).load()
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_the_sink_encodes_value_struct_with_the_subject_latest_schema(spark: Any, broker: Any,
                                                                       make_topic: Any) -> None:
    topic = make_topic(configs=TYPED)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-0", "amount": 0.5}])  # registers <topic>-value
    schema_id = broker.rest.http.get(f"/subjects/{topic}-value/versions/latest").json()["id"]
    frame = spark.createDataFrame([({"id": "s-1", "amount": 1.25},), ({"id": "s-2", "amount": 2.0},), (None,)],
                                  f"value_struct {ORDER_TYPE}")
    (frame.coalesce(1).write.mode("append").format("laketail").option("laketail.servers", broker.url)
     .option("topic", topic).save())
    wait_tiered(broker.url, topic)
    read = spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic).load()
    rows = read.orderBy("offset").collect()
    assert [r.value_struct.asDict() if r.value_struct else None for r in rows] == [
        {"id": "o-0", "amount": 0.5}, {"id": "s-1", "amount": 1.25}, {"id": "s-2", "amount": 2.0}, None]
    framed = [bytes(r.value) for r in rows[1:3]]
    assert all(v[:5] == wire.frame(schema_id, b"") for v in framed)  # Confluent's wire format, the latest id
    assert rows[3].value is None  # a null struct is a null value (a tombstone)


def test_the_sink_refuses_value_and_value_struct_together(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs=TYPED)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-0", "amount": 0.5}])
    frame = spark.createDataFrame([(b"x", {"id": "s-1", "amount": 1.0})], f"value binary, value_struct {ORDER_TYPE}")
    with pytest.raises(Exception, match="'value' or 'value_struct', not both"):
        (frame.write.mode("append").format("laketail").option("laketail.servers", broker.url)
         .option("topic", topic).save())
    assert table_info(broker.url, topic)["partitions"][0]["high_watermark"] == 1  # nothing written


def test_a_stream_reads_value_struct(spark: Any, broker: Any, make_topic: Any, tmp_path: Any) -> None:
    topic = make_topic(configs=TYPED)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-1", "amount": 1.5}])
    wait_tiered(broker.url, topic)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-2", "amount": 2.5}])  # tiered or not: the same rows
    name = f"typed_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("laketail").option("laketail.servers", broker.url)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .select("offset", "value_struct.id", "value_struct.amount")
             .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(600)
        assert query.exception() is None
        rows = spark.sql(f"SELECT * FROM {name} ORDER BY offset").collect()
    finally:
        query.stop()
    assert [tuple(r) for r in rows] == [(0, "o-1", 1.5), (1, "o-2", 2.5)]


# -- key_struct ------------------------------------------------------------------------------------

KEY_TYPE = "struct<region:string>"


@pytest.mark.parametrize("live", [True, False], ids=["jvm", "file-lists"])
def test_sql_views_expose_the_typed_key(spark: Any, broker: Any, make_topic: Any, monkeypatch: Any,
                                        live: bool) -> None:
    if live and jvm.jar() is None:
        pytest.skip("the laketail jar is not built (no javac)")
    topic = make_topic(configs={**TYPED, **KEYED})
    _produce_keyed_avro(broker.rest, topic, KEY_V1, ORDER_V1, [({"region": "eu"}, {"id": "o-1", "amount": 1.5}),
                                                               ({"region": "us"}, {"id": "o-2", "amount": 2.5}),
                                                               ({"region": "eu"}, {"id": "o-3", "amount": 4.0})])
    assert broker.rest.produce_binary(topic, [{"key": b"raw", "value": None, "partition": 0}]).status_code == 200
    wait_tiered(broker.url, topic)
    if not live:
        monkeypatch.setattr(sql_module.jvm, "attach", lambda spark: False)
    register_topics(spark, broker.url, [topic], follow=False)
    rows = spark.sql(f"SELECT offset, key_struct.region, value_struct.amount FROM `{topic}` ORDER BY offset").collect()
    assert [tuple(r) for r in rows] == [(0, "eu", 1.5), (1, "us", 2.5), (2, "eu", 4.0), (3, None, None)]
    totals = spark.sql(f"SELECT key_struct.region AS r, sum(value_struct.amount) AS s FROM `{topic}_all` "
                       "WHERE key_struct IS NOT NULL GROUP BY key_struct.region ORDER BY r").collect()
    assert [(t.r, t.s) for t in totals] == [("eu", 5.5), ("us", 2.5)]
    plan = spark.table(f"`{topic}`")._jdf.queryExecution().executedPlan().toString()
    assert ("TopicFileIndex" in plan) is live


@pytest.mark.parametrize("source", ["laketail", "laketail_python"], ids=["jar", "python"])
def test_format_laketail_reads_key_struct(spark: Any, broker: Any, make_topic: Any, source: str) -> None:
    if source == "laketail" and jvm.jar() is None:
        pytest.skip("the laketail jar is not built (no javac)")
    topic = make_topic(configs={**TYPED, **KEYED})
    _produce_keyed_avro(broker.rest, topic, KEY_V1, ORDER_V1, [({"region": "eu"}, {"id": "o-1", "amount": 1.5})])
    assert broker.rest.produce_binary(topic, [{"key": b"raw", "value": b"raw", "partition": 0}]).status_code == 200
    wait_tiered(broker.url, topic)
    _alter(broker, topic, "table.flush.interval.ms", "3600000")
    # a newer key version in the untiered tail: decoded by the task, fitted to the table's type
    _produce_keyed_avro(broker.rest, topic, KEY_V2, ORDER_V1, [({"region": "ap", "shard": {"int": 7}},
                                                                {"id": "o-3", "amount": 3.0})])
    part = table_info(broker.url, topic)["partitions"][0]
    assert (part["tiered_offset"], part["high_watermark"]) == (2, 3)

    frame = spark.read.format(source).option("laketail.servers", broker.url).option("subscribe", topic).load()
    assert frame.columns[-2:] == ["value_struct", "key_struct"]
    assert frame.schema["key_struct"].dataType.simpleString() == KEY_TYPE
    rows = frame.select("offset", "key_struct.region", "value_struct.id").orderBy("offset").collect()
    assert [tuple(r) for r in rows] == [(0, "eu", "o-1"), (1, None, None), (2, "ap", "o-3")]
    plan = frame._jdf.queryExecution().executedPlan().toString()
    if source == "laketail":  # the tiered head by Spark's Parquet reader, the tail by the Python source
        assert "1 range by Spark's Parquet reader" in plan and "1 by the Python source" in plan, plan


def test_format_laketail_reads_key_struct_alone(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs=KEYED)
    _produce_keyed_avro(broker.rest, topic, KEY_V1, ORDER_V1, [({"region": "eu"}, {"id": "o-1", "amount": 1.5})])
    wait_tiered(broker.url, topic)
    frame = spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic).load()
    assert frame.columns[-1] == "key_struct" and "value_struct" not in frame.columns
    assert [r.key_struct.region for r in frame.collect()] == ["eu"]


def test_the_sink_encodes_key_struct_with_the_key_subject(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(configs={**TYPED, **KEYED})
    _produce_keyed_avro(broker.rest, topic, KEY_V1, ORDER_V1, [({"region": "eu"}, {"id": "o-0", "amount": 0.5})])
    key_id = broker.rest.http.get(f"/subjects/{topic}-key/versions/latest").json()["id"]
    frame = spark.createDataFrame([({"region": "us"}, {"id": "s-1", "amount": 1.25})],
                                  f"key_struct {KEY_TYPE}, value_struct {ORDER_TYPE}")
    (frame.coalesce(1).write.mode("append").format("laketail").option("laketail.servers", broker.url)
     .option("topic", topic).save())
    wait_tiered(broker.url, topic)
    read = spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic).load()
    rows = read.orderBy("offset").collect()
    assert [(r.key_struct.region, r.value_struct.id) for r in rows] == [("eu", "o-0"), ("us", "s-1")]
    assert bytes(rows[1].key)[:5] == wire.frame(key_id, b"")  # Confluent's wire format, <topic>-key's id

    before = table_info(broker.url, topic)["partitions"][0]["high_watermark"]  # the records and a commit marker
    both = spark.createDataFrame([(b"k", {"region": "us"}, b"v")], f"key binary, key_struct {KEY_TYPE}, value binary")
    with pytest.raises(Exception, match="'key' or 'key_struct', not both"):
        (both.write.mode("append").format("laketail").option("laketail.servers", broker.url)
         .option("topic", topic).save())
    assert table_info(broker.url, topic)["partitions"][0]["high_watermark"] == before  # nothing more written
