"""Confluent REST Proxy v2 consumer instances against a real broker, following the
flow Confluent documents: create, subscribe, records, commit, committed offsets,
delete; then a new member of the group resumes after the commit.

v2's convention is checked on both sides: committing offset N (the last record
processed) stores N+1, which ``GET .../offsets`` shows back as stored.
"""

from __future__ import annotations

from typing import Any

import pytest
from integration.support import wait_until

from .conftest import QUICK_GROUPS
from .support import BINARY_V2, JSON_V2, V2, V2Consumer, describe_v1, error_of, records_until, unb64, unique

pytestmark = pytest.mark.integration


def _produce(broker: Any, topic: str, partition: int, values: list[bytes]) -> None:
    resp = broker.rest.produce_binary(topic, [{"value": v} for v in values], partition=partition)
    assert resp.status_code == 200, resp.text


def test_documented_consumer_flow_and_a_new_member_resumes(groups_broker: Any, make_topic: Any) -> None:
    topic = make_topic(2, broker=groups_broker)
    _produce(groups_broker, topic, 0, [b"a0", b"a1", b"a2", b"a3", b"a4"])
    _produce(groups_broker, topic, 1, [b"b0", b"b1", b"b2"])
    group = unique("flow")

    first = V2Consumer(groups_broker.url, group, "first", format="binary",
                       **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    assert first.created.headers["content-type"].startswith(V2)
    assert first.instance_id == "first"
    assert first.base_uri == f"{groups_broker.url}/consumers/{group}/instances/first"
    duplicate = first.http.post(f"/consumers/{group}", json={"name": "first"}, headers={"Content-Type": V2})
    assert error_of(duplicate) == (409, 40902)

    assert first.subscribe([topic]).status_code == 204
    subscription = first.http.get(first.path + "/subscription", headers={"Accept": V2})
    assert subscription.json() == {"topics": [topic]}

    read = records_until(first, lambda seen: len(seen) >= 8, "all eight records")
    assert len(read) == 8
    assert {(r["partition"], r["offset"], unb64(r["value"])) for r in read} == {
        (0, i, b"a%d" % i) for i in range(5)} | {(1, i, b"b%d" % i) for i in range(3)}
    assert all(r["topic"] == topic and r["key"] is None for r in read)
    response = first.records_response(timeout_ms=0)
    assert response.headers["content-type"].startswith(BINARY_V2)
    assert error_of(first.records_response(timeout_ms=0, accept=JSON_V2)) == (406, 40601)

    # Processed a0..a2 and all of partition 1: commit the last offsets processed.
    committed = first.commit([(topic, 0, 2), (topic, 1, 2)])
    assert committed.status_code == 200 and committed.json() == []
    assert first.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 3, (topic, 1): 3}

    assert first.delete().status_code == 204
    assert error_of(first.delete()) == (404, 40403)
    assert error_of(first.records_response(timeout_ms=0)) == (404, 40403)
    first.close()

    second = V2Consumer(groups_broker.url, group, "second",
                        **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    assert second.subscribe([topic]).status_code == 204
    resumed = records_until(second, lambda seen: len(seen) >= 2, "the two uncommitted records")
    assert [(r["partition"], r["offset"]) for r in resumed] == [(0, 3), (0, 4)]
    assert second.records(timeout_ms=200) == []
    assert second.commit().status_code == 200  # no body: everything consumed
    assert second.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 5, (topic, 1): 3}
    assert second.delete().status_code == 204
    second.close()


def test_json_instance_with_manual_assignment_and_positions(groups_broker: Any, make_topic: Any) -> None:
    topic = make_topic(2, broker=groups_broker)
    resp = groups_broker.rest.produce_json(topic, [{"value": {"n": i}} for i in range(4)], partition=1)
    assert resp.status_code == 200, resp.text
    group = unique("manual")
    consumer = V2Consumer(groups_broker.url, group, format="json", **{"auto.offset.reset": "latest"})
    assert consumer.instance_id.startswith("rest-consumer-")

    assert consumer.post("/assignments", {"partitions": [{"topic": topic, "partition": 1}]}).status_code == 204
    assert consumer.assignments() == [(topic, 1)]
    assert error_of(consumer.subscribe([topic])) == (409, 40903)
    assert consumer.records(timeout_ms=200, accept=JSON_V2) == []  # latest: starts at the end

    body = {"partitions": [{"topic": topic, "partition": 1}]}
    assert consumer.post("/positions/beginning", body).status_code == 204
    response = consumer.records_response(timeout_ms=1000, accept=JSON_V2)
    assert response.headers["content-type"].startswith(JSON_V2)
    assert [r["value"] for r in response.json()] == [{"n": i} for i in range(4)]
    assert error_of(consumer.records_response(timeout_ms=0, accept=BINARY_V2)) == (406, 40601)

    assert consumer.post("/positions", {"offsets": [{"topic": topic, "partition": 1, "offset": 2}]}).status_code == 204
    assert [r["offset"] for r in consumer.records(timeout_ms=1000, accept=JSON_V2)] == [2, 3]
    assert consumer.post("/positions/end", body).status_code == 204
    assert consumer.records(timeout_ms=200, accept=JSON_V2) == []
    not_assigned = consumer.post("/positions", {"offsets": [{"topic": topic, "partition": 0, "offset": 0}]})
    assert error_of(not_assigned) == (409, 40903)
    missing = consumer.post("/assignments", {"partitions": [{"topic": topic, "partition": 7}]})
    assert error_of(missing) == (404, 40402)

    assert consumer.http.delete(consumer.path + "/subscription").status_code == 204
    assert consumer.assignments() == []
    assert consumer.subscribe([topic]).status_code == 204  # fine once unassigned
    assert consumer.delete().status_code == 204
    consumer.close()


def test_topic_pattern_follows_new_topics(groups_broker: Any, make_topic: Any) -> None:
    prefix = unique("pattern").replace("-", "_")
    one = make_topic(1, broker=groups_broker, name=f"{prefix}.one")
    _produce(groups_broker, one, 0, [b"first"])
    consumer = V2Consumer(groups_broker.url, unique("pattern-group"), **{"auto.offset.reset": "earliest"})
    assert consumer.subscribe(pattern=rf"{prefix}\..*").status_code == 204
    assert [unb64(r["value"]) for r in records_until(consumer, lambda s: len(s) >= 1, "the first topic")] == [b"first"]

    two = make_topic(1, broker=groups_broker, name=f"{prefix}.two")
    make_topic(1, broker=groups_broker, name=f"{prefix}_not_matching")
    _produce(groups_broker, two, 0, [b"second"])
    later = records_until(consumer, lambda s: len(s) >= 1, "a record of the topic created later")
    assert [(r["topic"], unb64(r["value"])) for r in later] == [(two, b"second")]
    wait_until(lambda: consumer.http.get(consumer.path + "/subscription").json()["topics"] == sorted([one, two]),
               "the subscription to list both topics")
    assert consumer.delete().status_code == 204
    consumer.close()


def test_auto_offset_reset_none_and_auto_commit_on_delete(groups_broker: Any, make_topic: Any) -> None:
    topic = make_topic(1, broker=groups_broker)
    _produce(groups_broker, topic, 0, [b"x", b"y", b"z"])
    group = unique("reset")

    strict = V2Consumer(groups_broker.url, group, **{"auto.offset.reset": "none"})
    assert strict.subscribe([topic]).status_code == 204
    answer = strict.records_response(timeout_ms=1000)
    assert error_of(answer) == (409, 40907)
    assert answer.json()["message"].startswith("NO_OFFSET_FOR_PARTITION")
    assert strict.delete().status_code == 204
    strict.close()

    # auto.commit.enable=true (the default): deleting the instance commits what it read.
    eager = V2Consumer(groups_broker.url, group, **{"auto.offset.reset": "earliest"})
    assert eager.subscribe([topic]).status_code == 204
    assert len(records_until(eager, lambda s: len(s) >= 3, "three records")) == 3
    assert eager.delete().status_code == 204
    eager.close()

    again = V2Consumer(groups_broker.url, group, **{"auto.offset.reset": "none"})
    assert again.subscribe([topic]).status_code == 204
    assert again.committed([(topic, 0)]) == {(topic, 0): 3}
    assert again.records(timeout_ms=300) == []  # resumes after everything: nothing new
    _produce(groups_broker, topic, 0, [b"new"])
    assert [unb64(r["value"]) for r in records_until(again, lambda s: len(s) >= 1, "the new record")] == [b"new"]
    assert again.delete().status_code == 204
    again.close()


def test_bad_requests(groups_broker: Any, make_topic: Any) -> None:
    group = unique("bad")
    http = groups_broker.rest.http
    bad_config = http.post(f"/consumers/{group}", json={"name": "c", "auto.offset.reset": "sometimes"})
    assert error_of(bad_config) == (422, 42204)
    cbor = http.post(f"/consumers/{group}", json={"format": "cbor"})
    assert error_of(cbor) == (422, 42204)
    assert error_of(http.get(f"/consumers/{group}/instances/nobody/assignments")) == (404, 40403)
    consumer = V2Consumer(groups_broker.url, group, "c")
    assert error_of(consumer.records_response(timeout_ms=0)) == (409, 40903)  # neither subscribed nor assigned
    both = consumer.post("/subscription", {"topics": ["a"], "topic_pattern": "a.*"})
    assert error_of(both) == (409, 40903)
    assert error_of(consumer.post("/subscription", {"topics": "a"})) == (422, 42200)  # issue 37: the peer suite's 422
    assert consumer.delete().status_code == 204
    consumer.close()


def test_an_idle_instance_leaves_its_group(broker_factory: Any, make_topic: Any) -> None:
    broker = broker_factory(env={**QUICK_GROUPS, "LAKETAIL_CONSUMER_INSTANCE_TIMEOUT_MS": "1000"})
    topic = make_topic(2, broker=broker)
    group = unique("idle")
    idle = V2Consumer(broker.url, group, "idle")
    busy = V2Consumer(broker.url, group, "busy")
    assert idle.subscribe([topic]).status_code == 204
    assert busy.subscribe([topic]).status_code == 204
    wait_until(lambda: len(describe_v1(broker.url, group)["members"]) == 2, "both instances to join")

    def only_busy_left() -> bool:
        busy.records(timeout_ms=100)  # busy keeps using its instance; idle does nothing
        members = describe_v1(broker.url, group)["members"]
        return [m["client_id"] for m in members] == ["busy"] and len(members[0]["assignment"]) == 2

    wait_until(only_busy_left, "the idle instance to be destroyed and its partitions to move")
    assert error_of(idle.records_response(timeout_ms=0)) == (404, 40403)
    assert busy.delete().status_code == 204
    idle.close()
    busy.close()

