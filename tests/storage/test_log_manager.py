"""The log manager's listing of a topic's partition logs: in partition order, and
still right after partitions of that topic and of others are opened and deleted."""

from __future__ import annotations

import asyncio

from laketail.clock import ManualClock
from laketail.config import TopicConfig
from laketail.storage.log_manager import LogManager


def test_partitions_lists_one_topic_in_order_through_opens_and_deletes(tmp_path):
    logs = LogManager(tmp_path, ManualClock())
    for topic, partition in [("b", 2), ("a", 1), ("b", 0), ("a", 0), ("b", 1), ("ab", 0)]:
        logs.open_partition(topic, partition, TopicConfig(), tiered_offset=0)

    def listed(topic: str) -> list[tuple[str, int]]:
        return [(plog.topic, plog.partition) for plog in logs.partitions(topic)]

    assert listed("b") == [("b", 0), ("b", 1), ("b", 2)]
    assert listed("a") == [("a", 0), ("a", 1)]
    assert listed("missing") == []

    async def delete() -> None:
        await logs.delete_partition("b", 1)
        await logs.delete_partition("a", 0)
        await logs.delete_partition("a", 1)

    asyncio.run(delete())
    assert listed("b") == [("b", 0), ("b", 2)]
    assert listed("a") == []
    assert listed("ab") == [("ab", 0)]
    assert sorted((p.topic, p.partition) for p in logs.all()) == [("ab", 0), ("b", 0), ("b", 2)]
    logs.open_partition("a", 3, TopicConfig(), tiered_offset=0)  # a topic made again after its deletion
    assert listed("a") == [("a", 3)]
