"""Spark's source and sink ride out a broker kill -9 (issue 35).

The gateway client retries a request nobody answers, or that a broker answers with a
retriable error, until ``default.api.timeout.ms`` (60 s, Kafka's name and default) has
passed; before, it gave up after three passes in about 1.2 s, so every broker restart
ended every query. The streaming test kills the only broker under a running
``format("laketail")`` -> exactly-once sink query and starts it again: the query goes
on, and the output holds every input record once.
"""

from __future__ import annotations

import base64
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from laketail.errors import UnknownTopicOrPartition
from laketail.spark.gateway import GatewayUnavailable, SparkGateway
from tests.spark.support import produce, wait_until


def restart_later(broker: Any, after_s: float) -> threading.Thread:
    """Start the killed ``broker`` again on its port after ``after_s`` seconds."""
    thread = threading.Timer(after_s, broker.start)
    thread.start()
    return thread


@pytest.mark.fault
def test_a_request_rides_out_a_broker_restart(broker_factory: Any, make_topic: Any) -> None:
    broker = broker_factory()
    topic = make_topic(partitions=1, broker=broker)
    gateway = SparkGateway((broker.url,))
    broker.kill9()
    restart = restart_later(broker, 3.0)
    try:
        table = gateway.table(topic)  # sent while the broker is down
    finally:
        restart.join()
    assert table.topic == topic and set(table.partitions) == {0}
    assert gateway.requests > 3  # more than the three passes the old client made


@pytest.mark.fault
def test_the_budget_is_default_api_timeout_ms_and_the_error_names_it(broker_factory: Any) -> None:
    broker = broker_factory()
    url = broker.url
    broker.kill9()
    gateway = SparkGateway((url,), api_timeout_ms=400)
    with pytest.raises(GatewayUnavailable, match=r"default\.api\.timeout\.ms=400") as caught:
        gateway.topics()
    assert "Connect" in str(caught.value)  # the cause, at the top: nobody listens there


def test_an_error_that_is_the_answer_is_not_retried(broker: Any) -> None:
    gateway = SparkGateway((broker.url,))
    with pytest.raises(UnknownTopicOrPartition):
        gateway.table(f"missing-{uuid.uuid4().hex[:8]}")
    assert gateway.requests == 1


def committed_values(url: str, topic: str, partitions: int) -> list[bytes]:
    """Every value a read_committed consumer sees in ``topic``."""
    out: list[bytes] = []
    with httpx.Client(base_url=url, timeout=60) as http:
        for p in range(partitions):
            end = http.get(f"/topics/{topic}/partitions/{p}/offsets",
                           params={"isolation_level": "read_committed"}).json()["end_offset"]
            offset = 0
            while offset < end:
                resp = http.get(f"/topics/{topic}/partitions/{p}/records",
                                params={"offset": offset, "isolation_level": "read_committed"},
                                headers={"Accept": "application/vnd.kafka.binary.v2+json"})
                assert resp.status_code == 200, resp.text
                batch = resp.json()
                if not batch:
                    break
                out.extend(base64.b64decode(r["value"]) for r in batch if r["offset"] < end)
                offset = batch[-1]["offset"] + 1
    return sorted(out)


@pytest.mark.fault
def test_a_streaming_query_goes_on_through_a_broker_kill(
    spark: Any, broker_factory: Any, make_topic: Any, tmp_path: Path
) -> None:
    broker = broker_factory()
    source = make_topic(partitions=2, broker=broker)
    sink = make_topic(partitions=2, broker=broker)
    before = [f"before-{i}".encode() for i in range(20)]
    after = [f"after-{i}".encode() for i in range(20)]
    produce(broker.url, source, 0, before[:10])
    produce(broker.url, source, 1, before[10:])
    query = (spark.readStream.format("laketail").option("laketail.servers", broker.url)
             .option("subscribe", source).option("startingOffsets", "earliest").option("groupId", f"{source}-g")
             .load().selectExpr("key", "value", "partition")
             .writeStream.format("laketail").option("laketail.servers", broker.url).option("topic", sink)
             .option("checkpointLocation", f"file:{tmp_path / 'checkpoint'}")
             .trigger(processingTime="500 milliseconds").start())
    try:
        wait_until(lambda: committed_values(broker.url, sink, 2) == sorted(before), "the first records in the sink",
                   timeout_s=300)
        broker.kill9()  # under the running query: its next batches find nobody
        restart_later(broker, 5.0).join()
        assert query.isActive, f"the query ended while the broker was down: {query.exception()}"
        produce(broker.url, source, 0, after[:10])
        produce(broker.url, source, 1, after[10:])
        wait_until(lambda: len(committed_values(broker.url, sink, 2)) >= 40 or not query.isActive,
                   "the records produced after the restart in the sink", timeout_s=300)
        assert query.isActive and query.exception() is None, query.exception()
        assert committed_values(broker.url, sink, 2) == sorted(before + after)  # each once
    finally:
        query.stop()
