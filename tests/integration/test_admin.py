"""Topic admin and metadata through a real broker: Confluent v2 metadata shapes, v3
topic create / describe / configs / delete, and what a delete leaves behind (nothing:
a topic re-created under the same name starts empty)."""

from __future__ import annotations

import uuid

import pytest

from .support import assert_error, decode_binary, wait_for_table, wait_until

pytestmark = pytest.mark.integration


def test_v3_clusters_and_v2_brokers(broker):
    rest = broker.rest
    resp = rest.http.get("/v3/clusters")
    assert resp.status_code == 200
    body = resp.json()
    assert body["kind"] == "KafkaClusterList"
    (cluster,) = body["data"]
    assert cluster["kind"] == "KafkaCluster" and cluster["cluster_id"]
    resp = rest.http.get(f"/v3/clusters/{cluster['cluster_id']}")
    assert resp.status_code == 200 and resp.json()["cluster_id"] == cluster["cluster_id"]
    resp = rest.http.get("/brokers")
    assert resp.status_code == 200 and resp.json() == {"brokers": [0]}


def test_unknown_cluster_id_is_404(broker):
    resp = broker.rest.http.get("/v3/clusters/not-this-cluster/topics")
    assert resp.status_code == 404, resp.text


def test_v3_create_and_v2_v3_describe(broker):
    rest = broker.rest
    name = f"admin-{uuid.uuid4().hex[:10]}"
    resp = rest.create_topic(name, 3, replication_factor=1, configs={"retention.ms": "123456"})
    assert resp.status_code == 201, resp.text
    created = resp.json()
    assert (created["kind"], created["topic_name"], created["partitions_count"], created["replication_factor"]) == (
        "KafkaTopic", name, 3, 1)

    assert name in rest.http.get("/topics").json()
    v2 = rest.http.get(f"/topics/{name}").json()
    assert v2["name"] == name
    assert v2["configs"]["retention.ms"] == "123456"
    assert [p["partition"] for p in v2["partitions"]] == [0, 1, 2]
    for p in v2["partitions"]:
        assert p["leader"] == 0
        assert p["replicas"] == [{"broker": 0, "leader": True, "in_sync": True}]
    assert rest.http.get(f"/topics/{name}/partitions/1").json()["partition"] == 1
    assert rest.offsets(name, 2) == (0, 0)

    v3 = rest.http.get(rest.v3(f"/topics/{name}")).json()
    assert (v3["topic_name"], v3["partitions_count"], v3["replication_factor"]) == (name, 3, 1)
    listed = rest.http.get(rest.v3("/topics")).json()
    assert name in [t["topic_name"] for t in listed["data"]]
    parts = rest.http.get(rest.v3(f"/topics/{name}/partitions")).json()["data"]
    assert [p["partition_id"] for p in parts] == [0, 1, 2]


def test_v3_configs_get_set_alter_and_reset(broker, topic):
    rest = broker.rest

    def configs() -> dict[str, dict]:
        resp = rest.http.get(rest.v3(f"/topics/{topic}/configs"))
        assert resp.status_code == 200, resp.text
        return {c["name"]: c for c in resp.json()["data"]}

    before = configs()
    assert before["retention.ms"]["value"] == "604800000"
    assert before["retention.ms"]["is_default"] is True
    assert before["table.flush.interval.ms"]["value"] == "100"
    assert before["table.flush.interval.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"

    resp = rest.http.put(rest.v3(f"/topics/{topic}/configs/retention.ms"), json={"value": "1000"})
    assert resp.status_code == 204, resp.text
    assert configs()["retention.ms"]["value"] == "1000"
    one = rest.http.get(rest.v3(f"/topics/{topic}/configs/retention.ms")).json()
    assert (one["name"], one["value"], one["is_default"]) == ("retention.ms", "1000", False)

    body = {"data": [{"name": "cleanup.policy", "value": "compact"}, {"name": "retention.ms", "operation": "DELETE"}]}
    resp = rest.http.post(rest.v3(f"/topics/{topic}/configs:alter"), json=body)
    assert resp.status_code == 204, resp.text
    after = configs()
    assert after["cleanup.policy"]["value"] == "compact"
    assert after["retention.ms"]["value"] == "604800000" and after["retention.ms"]["is_default"] is True

    resp = rest.http.delete(rest.v3(f"/topics/{topic}/configs/cleanup.policy"))
    assert resp.status_code == 204, resp.text
    assert configs()["cleanup.policy"]["value"] == "delete"
    assert rest.http.get(f"/topics/{topic}").json()["configs"]["cleanup.policy"] == "delete"


@pytest.mark.parametrize(
    "alter",
    [
        lambda rest, t: rest.http.put(rest.v3(f"/topics/{t}/configs/retention.ms"), json={"value": "soon"}),
        lambda rest, t: rest.http.put(rest.v3(f"/topics/{t}/configs/no.such.key"), json={"value": "1"}),
        lambda rest, t: rest.http.post(rest.v3(f"/topics/{t}/configs:alter"), json={"data": [
            {"name": "retention.ms", "value": "5"}, {"name": "segment.bytes", "value": "1"}]}),
        lambda rest, t: rest.http.post(rest.v3(f"/topics/{t}/configs:alter"), json={"data": [
            {"name": "retention.ms", "value": "5"}, {"name": "bogus.key", "operation": "DELETE"}]}),
    ],
    ids=["put bad value", "put unknown key", "alter one bad of two", "alter delete unknown key"],
)
def test_invalid_config_alter_changes_nothing(broker, topic, alter):
    rest = broker.rest

    def values() -> dict[str, str]:
        return {c["name"]: c["value"] for c in rest.http.get(rest.v3(f"/topics/{topic}/configs")).json()["data"]}

    before = values()
    assert_error(alter(rest, topic), 400, 40002, "INVALID_CONFIG")
    assert values() == before
    assert rest.http.get("/v3/clusters").status_code == 200


def test_delete_removes_table_and_hot_logs_and_the_name_starts_fresh(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=2)
    resp = rest.produce_binary(topic, [{"value": f"old-{i}".encode(), "partition": i % 2} for i in range(10)])
    assert resp.status_code == 200, resp.text
    wait_for_table(broker.table_path(topic), rest.end_offsets(topic))
    hot = [broker.data_dir / "logs" / "broker-0" / f"{topic}-{p}" for p in range(2)]
    assert all(d.exists() for d in hot), "hot log folders are not where docs/architecture.md §4.1 puts them"

    resp = rest.http.delete(rest.v3(f"/topics/{topic}"))
    assert resp.status_code == 204, resp.text
    assert topic not in rest.http.get("/topics").json()
    assert_error(rest.http.get(f"/topics/{topic}"), 404, 40401, "UNKNOWN_TOPIC_OR_PARTITION")
    assert not broker.table_path(topic).exists(), "the topic's Delta table is still there"
    assert not any(d.exists() for d in hot), "the topic's hot logs are still there"

    # Same name again: empty log, empty table, nothing old comes back.
    resp = rest.create_topic(topic, 1, configs={"table.flush.interval.ms": "100"})
    assert resp.status_code == 201, resp.text
    assert rest.end_offsets(topic) == {0: 0}
    resp = rest.produce_binary(topic, [{"value": b"new"}])
    assert resp.status_code == 200 and resp.json()["offsets"][0]["offset"] == 0
    table = wait_for_table(broker.table_path(topic), {0: 1})
    assert table.column("value").to_pylist() == [b"new"]
    assert [decode_binary(r)["value"] for r in rest.fetch_range(topic, 0, 0, 1)] == [b"new"]


def test_openapi_and_metrics(broker, topic):
    rest = broker.rest
    assert rest.http.get("/docs").status_code == 200
    spec = rest.http.get("/openapi.json").json()
    for path in ("/topics/{topic}", "/topics/{topic}/partitions/{partition}/records",
                 "/v3/clusters/{cluster_id}/topics/{topic}/records"):
        assert path in spec["paths"], path
    assert rest.produce_binary(topic, [{"value": b"m"}]).status_code == 200
    assert rest.fetch(topic, 0, 0).status_code == 200

    def metrics_mention_topic() -> str | None:
        text = rest.http.get("/metrics").text
        return text if topic in text else None

    text = wait_until(metrics_mention_topic, "per-partition metrics for the topic")
    assert rest.http.get("/metrics").headers["content-type"].startswith("text/plain")
    lines = [line for line in text.splitlines() if topic in line and not line.startswith("#")]
    assert len(lines) >= 3, lines  # log end, high watermark, tiered offset at least
