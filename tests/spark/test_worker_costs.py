"""What a ``format("laketail")`` query costs each Spark Python worker beyond its rows
(benchmark 6's fixed cost): one gateway client per process and settings, however many
tasks and plannings it runs, and reused workers whose long-lived objects the daemon's
``gc.collect()`` after every call no longer walks."""

from __future__ import annotations

import gc
import os
from typing import Any

from laketail.spark import worker
from laketail.spark.gateway import SparkGateway, shared_client
from tests.spark.support import produce, wait_tiered

SECURITY = (("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"), ("sasl.password", "secret"))


def test_gateways_of_one_process_share_a_client_per_settings(broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    first = SparkGateway((broker.url,))
    assert first.table(topic).partitions.keys() == {0}
    first.close()  # closing a gateway leaves the process's client open for the next one
    second = SparkGateway((broker.url,))
    assert second._http is first._http and not second._http.is_closed
    assert second.table(topic).partitions.keys() == {0}
    assert SparkGateway((broker.url,), security=SECURITY)._http is not first._http
    assert SparkGateway((broker.url,), security=SECURITY)._http is shared_client(120.0, SECURITY)
    assert SparkGateway((broker.url,), timeout_s=5.0)._http is not first._http


def test_a_forked_child_makes_its_own_client() -> None:
    parent = shared_client(120.0, ())
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child answers whether it got a client of its own
        try:
            os.write(write_end, b"own" if shared_client(120.0, ()) is not parent else b"inherited")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"own"
    assert shared_client(120.0, ()) is parent


def test_settling_outside_a_spark_worker_freezes_nothing() -> None:
    assert not worker.in_reused_worker()
    frozen = gc.get_freeze_count()
    worker.settle_worker()
    assert gc.get_freeze_count() == frozen


def test_reused_workers_that_ran_laketail_hold_its_objects_frozen(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    for partition in (0, 1):
        produce(broker.url, topic, partition, [b"a", b"b"])
    wait_tiered(broker.url, topic)

    def source() -> Any:
        return spark.read.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic).load()

    assert source().count() == 4  # both of local[2]'s task workers run a laketail task
    # A Python UDF over the scan runs in a worker the pool hands out next: the ones
    # the count left idle (each ran laketail's read, and gc.freeze with it).
    from pyspark.sql.functions import udf

    def _freeze_count(_: object) -> int:  # pickled by value: the workers cannot import tests
        import gc

        return gc.get_freeze_count()

    counts = [r.n for r in source().select(udf(_freeze_count, "int", useArrow=False)("value").alias("n")).collect()]
    assert len(counts) == 4 and max(counts) > 0
