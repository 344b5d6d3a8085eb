"""What the hostile-input tests share: one real broker with a small request bound, the
state it holds before the bad requests (a topic with records, a group's committed
offsets, a v2 consumer instance), and a snapshot of everything a bad request could
have changed.

The broker is a ``laketail serve`` process (:class:`conftest.BrokerProcess`), so a test
can also stop it (SIGTERM) or crash it (``kill9``) and start it again on its data.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx
from conftest import QUICK_GROUPS, BrokerProcess

#: The broker's ``socket.request.max.bytes`` in these tests.
REQUEST_MAX_BYTES = 200_000
ENV = {**QUICK_GROUPS, "LAKETAIL_SOCKET_REQUEST_MAX_BYTES": str(REQUEST_MAX_BYTES)}

TOPIC = "hostile"
GROUP = "hostile-g"
CONSUMER_GROUP = "hostile-cg"
INSTANCE = f"/consumers/{CONSUMER_GROUP}/instances/c1"
V2 = {"Content-Type": "application/vnd.kafka.v2+json"}
BINARY_V2 = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
ARROW = {"Content-Type": "application/vnd.apache.arrow.stream"}
JSON = {"Content-Type": "application/json"}


@dataclass
class World:
    broker: BrokerProcess
    cluster_id: str

    @property
    def http(self) -> httpx.Client:
        return self.broker.rest.http


def seed(broker: BrokerProcess) -> World:
    """A two-partition topic with 3 and 4 records, group ``GROUP`` with committed
    offsets 1 and 2, and a v2 consumer instance assigned partition 0."""
    rest = broker.rest
    assert rest.create_topic(TOPIC, 2, configs={"table.flush.interval.ms": "100"}).status_code == 201
    for partition, n in ((0, 3), (1, 4)):
        body = {"records": [{"value": base64.b64encode(b"v%d" % i).decode()} for i in range(n)]}
        resp = rest.http.post(f"/topics/{TOPIC}/partitions/{partition}", json=body, headers=BINARY_V2)
        assert resp.status_code == 200, resp.text
    resp = rest.http.post(f"/v1/groups/{GROUP}/commit", json={"offsets": [
        {"topic": TOPIC, "partition": 0, "offset": 1}, {"topic": TOPIC, "partition": 1, "offset": 2}]})
    assert resp.status_code == 200, resp.text
    make_instance(broker)
    return World(broker, rest.cluster_id)


def make_instance(broker: BrokerProcess) -> None:
    """The v2 consumer instance ``INSTANCE``, assigned partition 0 (again after a
    restart: instances live in the gateway's memory, as REST Proxy's do)."""
    http = broker.rest.http
    resp = http.post(f"/consumers/{CONSUMER_GROUP}", json={"name": "c1", "format": "binary"}, headers=V2)
    assert resp.status_code == 200, resp.text
    resp = http.post(INSTANCE + "/assignments", json={"partitions": [{"topic": TOPIC, "partition": 0}]}, headers=V2)
    assert resp.status_code == 204, resp.text


def snapshot(world: World, instance: bool = True) -> dict[str, Any]:
    """Everything the bad requests aim at: topics, every partition's log start and end,
    the group's committed offsets, the consumer groups and (``instance``) the v2
    instance's assignment."""
    http = world.http
    topics = http.get("/topics")
    assert topics.status_code == 200, topics.text
    offsets = {}
    for partition in (0, 1):
        resp = http.get(f"/topics/{TOPIC}/partitions/{partition}/offsets",
                        params={"isolation_level": "read_uncommitted"})
        assert resp.status_code == 200, resp.text
        offsets[partition] = resp.json()
    groups = http.get(f"/v3/clusters/{world.cluster_id}/consumer-groups")
    assert groups.status_code == 200, groups.text
    committed = http.post(f"/v1/groups/{GROUP}/committed", json={"partitions": [
        {"topic": TOPIC, "partition": 0}, {"topic": TOPIC, "partition": 1}]})
    assert committed.status_code == 200, committed.text
    state = {
        "topics": sorted(topics.json()),
        "offsets": offsets,
        "groups": sorted(g["consumer_group_id"] for g in groups.json()["data"]),
        "committed": committed.json(),
    }
    if instance:
        assignment = http.get(INSTANCE + "/assignments")
        assert assignment.status_code == 200, assignment.text
        state["assignment"] = assignment.json()
    return state


def assert_kafka_error(resp: httpx.Response, status: int | tuple[int, ...], error_code: int | None = None) -> None:
    """A 4xx in the gateway's error shape: a Confluent code and Kafka's error name."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert resp.status_code in statuses, f"expected {statuses}, got {resp.status_code}: {resp.text[:300]}"
    body = resp.json()
    assert type(body.get("error_code")) is int, body
    if error_code is not None:
        assert body["error_code"] == error_code, body
    name = body.get("message", "").split(":", 1)[0]
    assert name.isupper() and name.replace("_", "").isalpha(), f"no Kafka error name in {body}"
