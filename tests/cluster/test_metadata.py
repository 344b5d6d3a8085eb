"""Replica assignment and the cluster image's JSON form (laketail.cluster.metadata)."""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from laketail.cluster.metadata import (
    NO_LEADER,
    BrokerRegistration,
    ClusterImage,
    PartitionRegistration,
    assign_replicas,
)


@st.composite
def assignments(draw):
    live = draw(st.lists(st.integers(0, 1_000), min_size=1, max_size=9, unique=True))
    rf = draw(st.integers(1, len(live)))
    partitions = draw(st.integers(0, 60))
    start = draw(st.integers(0, 10_000))
    return partitions, rf, live, start


@given(assignments())
def test_every_partition_gets_rf_distinct_live_brokers(case):
    partitions, rf, live, start = case
    out = assign_replicas(partitions, rf, live, start)
    assert len(out) == partitions
    for replicas in out:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf, replicas
        assert set(replicas) <= set(live)


@given(assignments())
def test_leaders_are_spread_evenly_over_the_live_brokers(case):
    partitions, rf, live, start = case
    out = assign_replicas(partitions, rf, live, start)
    led = Counter(replicas[0] for replicas in out)
    counts = [led.get(b, 0) for b in live]
    assert max(counts) - min(counts) <= 1, (counts, out)


@given(assignments())
def test_the_assignment_does_not_depend_on_the_order_of_the_live_list(case):
    partitions, rf, live, start = case
    reversed_live = sorted(live, reverse=True)
    assert assign_replicas(partitions, rf, live, start) == assign_replicas(partitions, rf, reversed_live, start)


def test_successive_topics_start_their_leaders_where_the_last_left_off():
    live = [3, 1, 2]
    assert assign_replicas(3, 2, live) == [[1, 2], [2, 3], [3, 1]]
    assert [r[0] for r in assign_replicas(2, 1, live, start=1)] == [2, 3]


def test_the_cluster_image_survives_json():
    image = ClusterImage(
        version=(3 << 32) + 7,
        controller_id=2,
        controller_epoch=3,
        brokers={
            1: BrokerRegistration(1, "http://127.0.0.1:9001", "a1", True, 10),
            2: BrokerRegistration(2, "http://127.0.0.1:9002", "b7", False, 20),
        },
        topics={"orders": {"name": "orders", "partitions": 2, "replication_factor": 2}},
        partitions={
            ("orders", 0): PartitionRegistration("orders", 0, [1, 2], 1, 4, [1, 2], 9),
            ("orders", 1): PartitionRegistration("orders", 1, [2, 1], NO_LEADER, 5, [2], 11),
        },
    )
    again = ClusterImage.from_json(json.loads(json.dumps(image.to_json())))
    assert again == image
    assert again.live_brokers() == [1]
    assert not again.partitions[("orders", 1)].online
