"""Where Spark's Kafka source has a rule, ``format("laketail")`` follows it: a checkpoint
past the log's end (the topic was deleted and created again) fails the query under
``failOnDataLoss=true`` and goes on from what is there under ``false``; a
``startingOffsets`` / ``endingOffsets`` JSON must name every subscribed partition."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.spark.support import produce, read, wait_until


def _run_available_now(spark: Any, url: str, topic: str, checkpoint: Path, **options: str) -> tuple[Any, list]:
    """One availableNow run of a stream over ``topic`` with ``checkpoint``: the query
    (terminated) and the (offset, value) rows its batches saw."""
    seen: list[tuple[int, bytes]] = []

    def each(batch: Any, batch_id: int) -> None:
        seen.extend((r.offset, bytes(r.value)) for r in batch.select("offset", "value").collect())

    reader = (spark.readStream.format("laketail").option("laketail.servers", url)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(300)
    except Exception:
        pass  # the query's failure is read from query.exception()
    return query, sorted(seen)


def test_a_checkpoint_past_a_recreated_topic_fails_or_goes_on(
    spark: Any, broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    topic = make_topic()
    produce(broker.url, topic, 0, [f"old-{i}".encode() for i in range(10)])
    query, seen = _run_available_now(spark, broker.url, topic, tmp_path / "strict")
    assert query.exception() is None and [o for o, _ in seen] == list(range(10))
    lenient_checkpoint = tmp_path / "lenient"
    shutil.copytree(tmp_path / "strict", lenient_checkpoint)  # the same query, to restart with false

    rest = broker.rest
    assert rest.http.delete(rest.v3(f"/topics/{topic}")).status_code == 204
    wait_until(lambda: rest.create_topic(topic, 1).status_code in (200, 201), f"{topic} to be created again")
    produce(broker.url, topic, 0, [b"new-0", b"new-1", b"new-2"])

    # failOnDataLoss=true (the default): the query fails and says what moved.
    query, seen = _run_available_now(spark, broker.url, topic, tmp_path / "strict")
    error = query.exception()
    assert error is not None, f"the query processed {seen} silently"
    assert f"Partition {topic}-0's offset was changed from 10 to 3" in str(error)
    assert "failOnDataLoss" in str(error)
    assert seen == []

    # failOnDataLoss=false: it goes on from what the partition holds now.
    query, seen = _run_available_now(spark, broker.url, topic, lenient_checkpoint, failOnDataLoss="false")
    assert query.exception() is None
    assert seen == [(0, b"new-0"), (1, b"new-1"), (2, b"new-2")]


def test_offsets_json_must_name_every_subscribed_partition(spark: Any, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    produce(broker.url, topic, 0, [b"a", b"b"])
    produce(broker.url, topic, 1, [b"c"])
    partial = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="you must specify all TopicPartitions") as caught:
        read(spark, broker.url, topic, startingOffsets=partial)
    assert "INVALID_CONFIG" in str(caught.value) and f"Assigned: [{topic}-0, {topic}-1]" in str(caught.value)
    with pytest.raises(Exception, match="endingOffsets contains specific offsets, you must specify all"):
        read(spark, broker.url, topic, endingOffsets=json.dumps({topic: {"1": -1}}))
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):  # a partition not subscribed
        read(spark, broker.url, topic, startingOffsets=json.dumps({topic: {"0": 0, "1": 0, "2": 0}}))
    # A stream is held to the same rule when it starts.
    query = (spark.readStream.format("laketail").option("laketail.servers", broker.url).option("subscribe", topic)
             .option("startingOffsets", partial).load().writeStream.format("memory")
             .queryName(f"partial_{topic.replace('-', '_')}").start())
    try:
        query.awaitTermination(120)
    except Exception:
        pass
    assert "you must specify all TopicPartitions" in str(query.exception())
    # Naming every partition (-2 earliest, -1 latest) is fine.
    every = json.dumps({topic: {"0": 1, "1": -2}})
    assert [(p, o) for p, o, _, _ in read(spark, broker.url, topic, startingOffsets=every)] == [(0, 1), (1, 0)]
