"""Run by tests/spark/test_sql_own_session.py in a fresh Python process: the path users
take, a SparkSession they built themselves without laketail's jar in ``spark.jars``.

``python own_session_job.py <gateway url> <topic>`` registers the topic's views (so
``register_topics`` runs ``ADD JAR`` and sets the context class loader of this thread and
of the follower's), commits a transaction so that the follower thread makes ``<topic>``
again over the JVM relation, stops the follower, produces more records, waits until they
are tiered and queries the views again. Prints one JSON document with what it saw."""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import SparkSession

from laketail.spark import register_topics, stop_following
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
    out["first"] = _values(spark, topic)
    txn = Txn(url, f"{topic}-own")
    txn.produce(topic, 0, [b"in-txn"])
    txn.end(commit=True)
    wait_tiered(url, topic)
    # Only the follower's thread makes <topic> again (its transactional part moved).
    def with_txn() -> list[str] | None:
        values = _values(spark, topic)
        return values if "in-txn" in values else None

    out["after_txn"] = wait_until(with_txn, "the follower to show the transaction")
    stop_following(spark)
    produce(url, topic, 0, [b"later-1", b"later-2"])
    wait_tiered(url, topic)
    time.sleep(0.3)  # had a follower survived, it would have had its turn by now
    out["later"] = _values(spark, topic)
    out["later_all"] = spark.sql(f"SELECT count(*) AS n FROM `{topic}_all`").collect()[0].n
    out["plan"] = _plan(spark, topic)
    out["plan_all"] = _plan(spark, f"{topic}_all")
    spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
