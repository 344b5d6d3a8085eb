"""What a view follower costs the gateway. Without laketail's jar (the pinned file-list
views): over a topic whose table does not move and whose views pin no bound, its passes
send no request (one stat of the Delta log each); a new table version, or an undecided
transaction, has it ask again. With the jar, named topics get no follower at all, and
one following every topic asks only for the topic list. Counted on the follower's own
``SparkGateway`` (every request it sends, retries included)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from laketail.spark import jvm, register_topics
from laketail.spark import sql as sql_module
from tests.spark.support import Txn, produce, wait_tiered, wait_until


def _values(spark: Any, view: str) -> list[bytes]:
    return [bytes(r.value) for r in spark.sql(f"SELECT value FROM `{view}` ORDER BY offset").collect()]


def _after_passes(follower: Any, n: int) -> None:
    """Until ``n`` more passes have begun (so ``n - 1`` have ended)."""
    start = follower.passes
    wait_until(lambda: follower.passes >= start + n, f"{n} follower passes", timeout_s=120)


def test_an_idle_topic_costs_the_follower_no_request(
    spark: Any, broker: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_module.jvm, "attach", lambda spark: False)
    # The periodic re-ask (deleted topics) is not what this counts; under load a few
    # passes could span its 5 s.
    monkeypatch.setattr(sql_module, "RECHECK_S", 3600.0)
    topic = make_topic()
    produce(broker.url, topic, 0, [b"a"])
    wait_tiered(broker.url, topic)
    register_topics(spark, broker.url, [topic], interval_s=0.05)
    follower = sql_module._FOLLOWERS[id(spark)]
    assert follower.live is False
    gateway = follower._views.gateway

    _after_passes(follower, 2)
    idle = gateway.requests
    _after_passes(follower, 20)
    assert gateway.requests == idle, "the follower asked the gateway about an unchanged topic"

    # The table moves: the next pass asks (once), and the views show the record.
    produce(broker.url, topic, 0, [b"b"])
    wait_tiered(broker.url, topic)
    wait_until(lambda: gateway.requests > idle, "the follower to ask about the moved table")
    wait_until(lambda: _values(spark, topic) == [b"a", b"b"], "the views to show the new record")
    _after_passes(follower, 3)
    idle = gateway.requests
    _after_passes(follower, 20)
    assert gateway.requests == idle

    # An undecided transaction in the table: its bound rests on the gateway's last stable
    # offset, so every pass asks.
    txn = Txn(broker.url, f"{topic}-open")
    txn.produce(topic, 0, [b"t"])
    produce(broker.url, topic, 0, [b"after-open"])
    wait_tiered(broker.url, topic)
    wait_until(lambda: follower._views.asked[topic].bounded, "the follower to pin the open transaction's bound")
    asking = gateway.requests
    _after_passes(follower, 6)
    assert gateway.requests - asking >= 4
    assert _values(spark, topic) == [b"a", b"b"]  # nothing at or past the bound

    txn.end(commit=True)
    wait_tiered(broker.url, topic)
    wait_until(lambda: _values(spark, topic) == [b"a", b"b", b"t", b"after-open"],
               "the committed transaction to show")
    _after_passes(follower, 3)
    idle = gateway.requests
    _after_passes(follower, 20)
    assert gateway.requests == idle, "the follower kept asking after the transaction ended"


def test_a_deleted_topic_is_noticed_though_its_table_stands_still(
    spark: Any, broker: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the jar, a followed topic that pins no bound is asked about only every
    ``RECHECK_S``: its deletion is noticed then, and its views dropped."""
    monkeypatch.setattr(sql_module.jvm, "attach", lambda spark: False)
    monkeypatch.setattr(sql_module, "RECHECK_S", 0.5)
    topic = make_topic()
    produce(broker.url, topic, 0, [b"a"])
    wait_tiered(broker.url, topic)
    register_topics(spark, broker.url, [topic], interval_s=0.05)
    assert spark.catalog.tableExists(f"`{topic}`") and spark.catalog.tableExists(f"`{topic}_all`")
    cluster = httpx.get(f"{broker.url}/v3/clusters", timeout=30).json()["data"][0]["cluster_id"]
    resp = httpx.delete(f"{broker.url}/v3/clusters/{cluster}/topics/{topic}", timeout=60)
    assert resp.status_code == 204, resp.text
    wait_until(lambda: not spark.catalog.tableExists(f"`{topic}`"), "the deleted topic's view to be dropped")
    assert not spark.catalog.tableExists(f"`{topic}_all`")


@pytest.mark.skipif(jvm.jar() is None, reason="the laketail jar is not built (no javac)")
def test_with_the_jar_a_follower_only_follows_the_topic_list(
    spark: Any, few_topics_broker: Any, make_topic: Any
) -> None:
    """Named topics: no follower. Every topic: a follower that makes views for a topic
    created later and drops a deleted one's, asking only for the topic list."""
    broker = few_topics_broker  # every topic followed: a broker with few (tests/spark/conftest.py)
    named = make_topic(broker=broker)
    register_topics(spark, broker.url, [named])
    assert id(spark) not in sql_module._FOLLOWERS
    register_topics(spark, broker.url, interval_s=0.05)
    follower = sql_module._FOLLOWERS[id(spark)]
    assert follower.live is True
    gateway = follower._views.gateway
    _after_passes(follower, 2)
    before, passes = gateway.requests, follower.passes
    _after_passes(follower, 20)
    assert gateway.requests - before <= follower.passes - passes + 1  # one topic list a pass

    topic = make_topic(broker=broker)
    produce(broker.url, topic, 0, [b"a"])
    wait_tiered(broker.url, topic)
    wait_until(lambda: spark.catalog.tableExists(f"`{topic}`"), "the follower to make the new topic's views")
    assert _values(spark, topic) == [b"a"] and _values(spark, f"{topic}_all") == [b"a"]
    cluster = httpx.get(f"{broker.url}/v3/clusters", timeout=30).json()["data"][0]["cluster_id"]
    resp = httpx.delete(f"{broker.url}/v3/clusters/{cluster}/topics/{topic}", timeout=60)
    assert resp.status_code == 204, resp.text
    wait_until(lambda: not spark.catalog.tableExists(f"`{topic}`"), "the deleted topic's view to be dropped")
    assert not spark.catalog.tableExists(f"`{topic}_all`")
