"""The coordinator rebalances a stable group when a subscribed topic appears (or
changes its partition count): a member that subscribed before the topic existed
gets its partitions, as Kafka's consumer does after a metadata refresh."""

import asyncio

import pytest

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import load_settings
from laketail.errors import RebalanceInProgress


def test_a_topic_created_after_the_subscription_is_assigned(tmp_path):
    clock = ManualClock()

    async def scenario():
        settings = load_settings(None, env={}, data=str(tmp_path), group_initial_rebalance_delay_ms=0,
                                 group_min_session_timeout_ms=100, offsets_topic_num_partitions=4)
        broker = Broker(settings, clock=clock)
        await broker.start()
        joined = await broker.groups.join("g", "", topics=["later"], strategies=["range"], session_timeout_ms=1000)
        assert broker.groups.sync("g", joined.generation_id, joined.member_id) == []
        broker.groups.tick()
        broker.groups.heartbeat("g", joined.generation_id, joined.member_id)  # nothing changed yet

        await broker.create_topic("later", 3)
        broker.groups.tick()
        with pytest.raises(RebalanceInProgress):
            broker.groups.heartbeat("g", joined.generation_id, joined.member_id)
        again = await broker.groups.join("g", joined.member_id, topics=["later"], strategies=["range"],
                                         session_timeout_ms=1000)
        assert again.generation_id == joined.generation_id + 1
        assert broker.groups.sync("g", again.generation_id, joined.member_id) == [("later", p) for p in range(3)]
        broker.groups.tick()
        broker.groups.heartbeat("g", again.generation_id, joined.member_id)  # stable again
        await broker.close()

    asyncio.run(scenario())
