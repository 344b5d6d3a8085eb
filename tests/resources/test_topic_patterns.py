"""Subscription patterns are matched by RE2 in linear time, with Kafka's full-match
semantics; what RE2 cannot match in linear time is refused (issue 14, section 3)."""

from __future__ import annotations

import pytest
from conftest import V2
from groups.support import V2Consumer, unique
from integration.support import wait_until

from laketail.client import Consumer, KafkaException
from laketail.errors import InvalidRequest
from laketail.spark.options import Subscription
from laketail.topic_pattern import TopicPattern


def test_a_backtracking_pattern_answers_at_once():
    # Python's re needs about 2**64 steps for this; RE2 is linear in the name
    assert not TopicPattern("(a+)+b").fullmatch("a" * 64)
    assert TopicPattern("(a+)+b").fullmatch("a" * 64 + "b")


@pytest.mark.parametrize("pattern, topic, matches", [
    ("orders", "orders", True),
    ("orders", "orders-eu", False),  # the whole name, as Java's matches()
    ("orders.*", "orders-eu", True),
    ("(?i)ORDERS-(eu|us)", "orders-us", True),
    (r"logs-\d{4}", "logs-2026", True),
    (r"logs-\d{4}", "logs-20266", False),
])
def test_full_match_semantics(pattern, topic, matches):
    assert TopicPattern(pattern).fullmatch(topic) is matches
    assert Subscription(pattern=pattern).matches(topic) is matches


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?=a)a", "(?<!x)a", "a++", "(?>a)", "(unclosed"])
def test_what_re2_cannot_match_in_linear_time_is_refused(pattern):
    with pytest.raises(InvalidRequest):
        TopicPattern(pattern)


def test_v2_subscription_refuses_a_backreference_and_keeps_nothing(broker, make_topic):
    topic = make_topic(partitions=1)
    consumer = V2Consumer(broker.url, unique("re2"))
    try:
        resp = consumer.subscribe(pattern=r"(" + topic[:3] + r")\1.*")
        assert resp.status_code == 400, resp.text
        assert resp.json()["message"].startswith("INVALID_REQUEST")
        got = consumer.http.get(consumer.path + "/subscription", headers={"Accept": V2})
        assert got.status_code == 200 and got.json() == {"topics": []}

        assert consumer.subscribe(pattern=f"({topic[:4]}+)+{topic[4:]}").status_code == 204
        wait_until(lambda: consumer.assignments() == [(topic, 0)], "the pattern's topic assigned")
    finally:
        consumer.delete()
        consumer.close()


def test_python_client_refuses_a_backreference_at_subscribe(broker):
    consumer = Consumer({"bootstrap.servers": broker.url, "group.id": unique("re2-client")})
    try:
        with pytest.raises(KafkaException) as caught:
            consumer.subscribe([r"^(ab)\1"])
        assert "_INVALID_ARG" in str(caught.value)
    finally:
        consumer.close()
