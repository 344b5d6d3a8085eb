"""Run by tests/spark/test_sql_own_session.py in a fresh Python process: the path users
take, a SparkSession they built themselves without laketail's jar in ``spark.jars``.

``python own_session_job.py <gateway url> <topic>`` registers the topic's views (so
``register_topics`` runs ``ADD JAR`` and sets this thread's context class loader; named
topics get no follower), commits a transaction and produces more records, querying the
views after each is tiered. Then it registers every topic, so a follower starts, and
creates a topic: the follower's thread makes its views over the JVM relation (its class
loader must see the jar too). Prints one JSON document with what it saw."""

from __future__ import annotations

import json
import sys

import httpx
from pyspark.sql import SparkSession

from laketail.spark import register_topics, stop_following
from laketail.spark import sql as sql_module
from tests.spark.support import Txn, produce, wait_tiered, wait_until


def _values(spark: SparkSession, view: str) -> list[str]:
    rows = spark.sql(f"SELECT CAST(value AS STRING) AS v FROM `{view}` ORDER BY partition, offset").collect()
    return [r.v for r in rows]


def _plan(spark: SparkSession, view: str) -> str:
    return spark.table(f"`{view}`")._jdf.queryExecution().toString()


def main(url: str, topic: str) -> None:
    spark = SparkSession.builder.master("local[1]").appName("own-session").getOrCreate()
    out: dict = {"jars_conf": spark.conf.get("spark.jars", "")}
    produce(url, topic, 0, [b"before"])
    wait_tiered(url, topic)
    out["registered"] = register_topics(spark, url, [topic], interval_s=0.1)
    out["followers"] = len(sql_module._FOLLOWERS)
    out["first"] = _values(spark, topic)
    txn = Txn(url, f"{topic}-own")
    txn.produce(topic, 0, [b"in-txn"])
    txn.end(commit=True)
    wait_tiered(url, topic)
    out["after_txn"] = _values(spark, topic)  # no follower: the query computes it
    produce(url, topic, 0, [b"later-1", b"later-2"])
    wait_tiered(url, topic)
    out["later"] = _values(spark, topic)
    out["later_all"] = spark.sql(f"SELECT count(*) AS n FROM `{topic}_all`").collect()[0].n
    out["plan"] = _plan(spark, topic)
    out["plan_all"] = _plan(spark, f"{topic}_all")

    register_topics(spark, url, interval_s=0.1)  # every topic: a follower, for new ones
    created = f"{topic}-new"
    cluster = httpx.get(f"{url}/v3/clusters", timeout=30).json()["data"][0]["cluster_id"]
    resp = httpx.post(f"{url}/v3/clusters/{cluster}/topics", json={"topic_name": created, "partitions_count": 1},
                      timeout=60)
    assert resp.status_code in (200, 201), resp.text
    wait_until(lambda: spark.catalog.tableExists(f"`{created}`"), "the follower to make the new topic's views")
    out["created_count"] = spark.sql(f"SELECT count(*) AS n FROM `{created}`").collect()[0].n
    out["created_plan"] = _plan(spark, created)
    stop_following(spark)
    spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
