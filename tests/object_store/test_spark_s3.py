"""``spark.read.format("laketail")`` over a topic whose table is in a bucket (moto on
127.0.0.1). Spark's S3 file system classes (hadoop-aws) are not on this machine's
classpath, so the jar's plan cannot open the table and hands the whole read to the Python
source: planning through delta-rs, files read by pyarrow's S3 file system in the Python
workers. The workers take the bucket's settings (``AWS_*``) from the session's executor
environment, as a cluster's executors take theirs."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from deltalake import DeltaTable

from tests.integration.support import TIER_DEADLINE_S, wait_until
from tests.object_store.conftest import Bucket, S3Server

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def s3_spark(s3_server: S3Server) -> Iterator[Any]:
    """The test run's SparkSession, its Python workers given the S3 server's environment.
    A session started before the bucket's environment was set (by tests/spark earlier in
    the run) has a JVM, and so workers, without it; a Python data source's workers also
    take the executor environment as of the source's registration, so the environment is
    added there and the source registered again. (A session started by this fixture
    inherits the environment anyway: the test passes without the update then.)"""
    from laketail.spark import register
    from laketail.spark.session import local_session

    spark = local_session("laketail-tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    environment = spark.sparkContext.environment
    before = dict(environment)
    environment.update(s3_server.env)
    register(spark)
    try:
        yield spark
    finally:
        environment.clear()
        environment.update(before)
        register(spark)


def test_spark_reads_a_topic_whose_table_is_in_a_bucket(bucket: Bucket, s3_broker_factory, s3_spark) -> None:
    broker = s3_broker_factory(bucket.uri("spark-root"))
    topic = "clicks"
    resp = broker.rest.create_topic(topic, 2, configs={"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text
    produced = {p: [f"click-{p}-{i}".encode() for i in range(12 + p)] for p in range(2)}
    for p, values in produced.items():
        resp = broker.rest.produce_binary(topic, [{"value": v} for v in values], partition=p)
        assert resp.status_code == 200, resp.text
    uri = broker.table_uri(topic)
    total = sum(len(v) for v in produced.values())
    wait_until(lambda: DeltaTable(uri).to_pyarrow_table(columns=["offset"]).num_rows == total,
               f"{total} records in {uri}", TIER_DEADLINE_S, 0.2)

    frame = (s3_spark.read.format("laketail").option("laketail.servers", broker.url)
             .option("subscribe", topic).load())
    rows = sorted(frame.select("partition", "offset", "value").collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.partition, r.offset, bytes(r.value)) for r in rows] == [
        (p, i, v) for p, values in produced.items() for i, v in enumerate(values)]


def test_maintenance_application_compacts_a_topic_in_a_bucket(bucket: Bucket, s3_broker_factory, s3_spark,
                                                              tmp_path, monkeypatch) -> None:
    """The maintenance application (Structured Streaming over the tables' commits) on a
    bucket root: it key-compacts a ``cleanup.policy=compact`` topic with its rewrites in
    Python workers, commits through delta-rs, and keeps its checkpoint on local disk."""
    from laketail.jobs.maintenance import main

    root = bucket.uri("maint")
    broker = s3_broker_factory(root)
    topic = "ledger"
    resp = broker.rest.create_topic(topic, 1, configs={"table.flush.interval.ms": "100", "cleanup.policy": "compact",
                                                       "min.compaction.lag.ms": "0"})
    assert resp.status_code in (200, 201), resp.text
    uri = broker.table_uri(topic)
    latest: dict[bytes, bytes] = {}
    for batch in range(3):  # one tier commit, one file, per batch
        records = [{"key": f"k{i}".encode(), "value": f"v{batch}-{i}".encode()} for i in range(3)]
        resp = broker.rest.produce_binary(topic, records, partition=0)
        assert resp.status_code == 200, resp.text
        latest |= {r["key"]: r["value"] for r in records}
        wait_until(lambda n=3 * (batch + 1): DeltaTable(uri).to_pyarrow_table(columns=["offset"]).num_rows == n,
                   f"batch {batch} in {uri}", TIER_DEADLINE_S, 0.2)
    files_before = len(DeltaTable(uri).file_uris())
    assert files_before >= 3

    monkeypatch.chdir(tmp_path)
    assert main(["--data", root, "--servers", broker.url, "--topic", topic, "--max-rounds", "1",
                 "--interval-s", "1"]) == 0

    table = DeltaTable(uri)
    rows = table.to_pyarrow_table(columns=["key", "value"]).to_pylist()
    assert {r["key"]: r["value"] for r in rows} == latest and len(rows) == len(latest)
    assert len(table.file_uris()) < files_before
    assert (tmp_path / "laketail-checkpoints" / "maintenance").is_dir()
