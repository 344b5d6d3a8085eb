"""``spark.readStream.format("laketail")``: micro-batches pick up records produced while
the query runs, respect maxOffsetsPerTrigger, and commit to ``groupId``."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx

from tests.spark.support import produce, wait_until


def test_a_stream_picks_up_records_produced_while_it_runs(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    group = f"{topic}-g"
    produce(broker.url, topic, 0, [b"early-0", b"early-1"])
    name = f"mem_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("laketail").option("laketail.servers", broker.url)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("groupId", group).load()
             .writeStream.format("memory").queryName(name).trigger(processingTime="500 milliseconds").start())
    try:
        def values() -> list[bytes]:
            return sorted(bytes(r.value) for r in spark.sql(f"SELECT value FROM {name}").collect())

        wait_until(lambda: len(values()) >= 2, "the records produced before the query started")
        later = {0: [f"late-0-{i}".encode() for i in range(5)], 1: [f"late-1-{i}".encode() for i in range(7)]}
        for partition, batch in later.items():
            produce(broker.url, topic, partition, batch)
        expected = sorted([b"early-0", b"early-1"] + later[0] + later[1])
        wait_until(lambda: values() == expected, "the records produced while the query runs")

        def caught_up() -> bool:
            resp = httpx.get(f"{broker.url}{broker.rest.v3(f'/consumer-groups/{group}/lags')}", timeout=60)
            if resp.status_code != 200:
                return False
            lags = {(d["topic_name"], d["partition_id"]): d for d in resp.json()["data"]}
            return (lags.get((topic, 0), {}).get("current_offset") == 7
                    and lags.get((topic, 1), {}).get("current_offset") == 7
                    and all(d["lag"] == 0 for d in lags.values()))

        wait_until(caught_up, "the group's committed offsets to reach the end (lag 0)")
        assert values() == expected  # nothing read twice
    finally:
        query.stop()


def test_max_offsets_per_trigger_bounds_each_batch(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    produce(broker.url, topic, 0, [f"a{i}".encode() for i in range(12)])
    produce(broker.url, topic, 1, [f"b{i}".encode() for i in range(8)])
    sizes: list[int] = []
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def each(batch: Any, batch_id: int) -> None:
        rows = batch.select("partition", "offset").collect()
        with lock:
            sizes.append(len(rows))
            seen.extend((r.partition, r.offset) for r in rows)

    query = (spark.readStream.format("laketail").option("laketail.servers", broker.url)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "6")
             .load().writeStream.foreachBatch(each).trigger(availableNow=True).start())
    query.awaitTermination(600)
    assert query.exception() is None
    assert sorted(seen) == [(0, o) for o in range(12)] + [(1, o) for o in range(8)]
    assert max(sizes) <= 7 and len([s for s in sizes if s]) >= 3, sizes
