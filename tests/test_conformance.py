"""Confluent REST Proxy conformance and everyday operability (issue 17), against real
brokers on 127.0.0.1.

Confluent's behaviour is the reference (its `kafka-rest` source: ``Errors.java``,
rest-utils' ``KafkaExceptionMapper``, ``ConsumerSeekRequest``, ``KafkaConsumerState``, the
v3 resources); each test names the Confluent answer it holds laketail to.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pyarrow as pa
import pytest
from groups.support import V2Consumer
from integration.support import ipc, wait_until
from integration.support import prom_sample as sample

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ARROW_STREAM = "application/vnd.apache.arrow.stream"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def error_of(resp: httpx.Response) -> tuple[int, int, str]:
    body = resp.json()
    return resp.status_code, body["error_code"], body["message"]


def topic_names(rest) -> list[str]:
    return rest.http.get("/topics").json()


# -- 1. auto.create.topics.enable -----------------------------------------------------------


def _arrow_body(values: list[bytes]) -> bytes:
    return ipc(pa.table({"value": pa.array(values, pa.binary())}))


def test_produce_to_a_missing_topic_creates_it_on_every_path(broker):
    """Kafka's default auto.create.topics.enable=true, num.partitions=1: the quick
    start's first produce works on v2 (the hot route), v3, /v1 Arrow and the Python
    producer; the records are there afterwards."""
    rest = broker.rest
    v2, v2p, v3, v1, client = (unique(f"auto-{k}") for k in ("v2", "v2p", "v3", "v1", "client"))

    resp = rest.produce_binary(v2, [{"value": b"one"}])
    assert resp.status_code == 200, resp.text
    resp = rest.produce_binary(v2p, [{"value": b"one"}], partition=0)
    assert resp.status_code == 200, resp.text
    resp = rest.http.post(rest.v3(f"/topics/{v3}/records"), json={"value": {"type": "STRING", "data": "one"}})
    assert resp.status_code == 200 and resp.json()["error_code"] == 200, resp.text
    resp = rest.http.post(f"/v1/topics/{v1}/records", content=_arrow_body([b"one", b"two"]),
                          headers={"Content-Type": ARROW_STREAM})
    assert resp.status_code == 200, resp.text

    from laketail.client import Producer

    reports = []
    producer = Producer({"bootstrap.servers": broker.url})
    producer.produce(client, b"one", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    assert reports == [None]

    for name, count in ((v2, 1), (v2p, 1), (v3, 1), (v1, 2), (client, 1)):
        assert rest.partition_ids(name) == [0], name  # num.partitions=1
        assert rest.offsets(name, 0) == (0, count), name
    info = rest.http.get(rest.v3(f"/topics/{v2}")).json()
    assert info["replication_factor"] == 1  # default.replication.factor


def test_auto_create_never_makes_invalid_or_internal_topics_nor_answers_bad_input(broker):
    rest = broker.rest
    status, code, message = error_of(rest.produce_binary("bad*name", [{"value": b"x"}]))
    assert status == 400 and message.startswith("INVALID_TOPIC_EXCEPTION"), message
    status, code, message = error_of(rest.produce_binary("__not_internal_yet", [{"value": b"x"}]))
    assert (status, code) == (404, 40401) and message.startswith("UNKNOWN_TOPIC_OR_PARTITION")
    broken = unique("auto-broken")
    status, code, message = error_of(rest.produce_v2_raw(broken, '{"records": [{"value": "@@@"}]}'))
    assert status == 422 and message.startswith("INVALID_RECORD"), message
    names = topic_names(rest)
    assert "bad*name" not in names and broken not in names
    assert "__not_internal_yet" not in rest.http.get(rest.v3("/topics")).text


def test_a_v2_subscription_by_name_creates_the_topic(broker):
    """Confluent's instances are Java consumers (allow.auto.create.topics=true): a
    subscription to a missing name creates it; a pattern creates nothing."""
    rest = broker.rest
    name = unique("auto-sub")
    consumer = V2Consumer(broker.url, unique("g"))
    try:
        assert consumer.subscribe([name]).status_code == 204
        assert name in topic_names(rest)
        refused = unique("auto-refused")  # topics and a pattern: refused (409), so nothing is created
        assert consumer.subscribe([refused]).status_code == 204
        both = consumer.post("/subscription", {"topics": [refused + "-x"], "topic_pattern": "a.*"})
        assert both.status_code == 409 and refused + "-x" not in topic_names(rest)
        pattern_only = unique("auto-pattern")
        assert consumer.subscribe(pattern=re.escape(pattern_only) + ".*").status_code == 204
        assert pattern_only not in topic_names(rest)
    finally:
        consumer.delete()
        consumer.close()


def test_the_python_consumer_creates_on_subscribe_only_when_allowed(broker):
    """Kafka's consumer metadata requests create a topic only with
    allow.auto.create.topics (librdkafka's default: false)."""
    from laketail.client import Consumer

    rest = broker.rest
    allowed, default = unique("auto-consumer"), unique("auto-consumer-default")
    for name, config in ((allowed, {"allow.auto.create.topics": True}), (default, {})):
        consumer = Consumer({"bootstrap.servers": broker.url, "group.id": unique("g"), **config})
        try:
            consumer.subscribe([name])
        finally:
            consumer.close()
    names = topic_names(rest)
    assert allowed in names and default not in names


def test_auto_create_off_answers_404_and_num_partitions_is_honoured(broker_factory):
    off = broker_factory(env={"LAKETAIL_AUTO_CREATE_TOPICS_ENABLE": "false"})
    name = unique("off")
    status, code, message = error_of(off.rest.produce_binary(name, [{"value": b"x"}]))
    assert (status, code) == (404, 40401) and message.startswith("UNKNOWN_TOPIC_OR_PARTITION")
    assert name not in topic_names(off.rest)
    off.stop()

    wide = broker_factory(env={"LAKETAIL_NUM_PARTITIONS": "3"})
    name = unique("wide")
    assert wide.rest.produce_binary(name, [{"value": b"x"}]).status_code == 200
    assert wide.rest.partition_ids(name) == [0, 1, 2]


# -- 2 and 3. v2 consumer instances: offsets before the first join, seek by timestamp ------------


def test_commit_right_after_subscribe_answers_200_empty(broker, make_topic):
    """Confluent: 200 [] (commitSync of no positions sends nothing); laketail answered
    404 UNKNOWN_MEMBER_ID while the first join was in flight."""
    topic = make_topic()
    consumer = V2Consumer(broker.url, unique("g"))
    try:
        assert consumer.subscribe([topic]).status_code == 204
        resp = consumer.commit()
        assert resp.status_code == 200, resp.text
        assert resp.json() == []
    finally:
        consumer.delete()
        consumer.close()


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def test_seek_by_timestamps_as_confluents_consumer_seek_request(broker, make_topic):
    """``{"timestamps": [{topic, partition, timestamp}]}``: the position becomes the first
    offset at or after the instant (Kafka's offsetsForTimes); an instant after every
    record seeks to the end. The instant is a Jackson ``Instant``: ISO-8601, or a number
    of epoch seconds."""
    rest = broker.rest
    topic = make_topic()
    base = 1_700_000_000_000
    for i in range(3):
        resp = rest.http.post(rest.v3(f"/topics/{topic}/partitions/0/records"), json={
            "value": {"type": "STRING", "data": f"r{i}"}, "timestamp": _iso(base + i * 60_000)})
        assert resp.json()["error_code"] == 200, resp.text
    consumer = V2Consumer(broker.url, unique("g"), **{"auto.offset.reset": "earliest"})
    try:
        assert consumer.post("/assignments", {"partitions": [{"topic": topic, "partition": 0}]}).status_code == 204

        def first_offset_after(body: dict) -> int | None:
            resp = consumer.post("/positions", body)
            assert resp.status_code == 204, resp.text
            records = consumer.records(timeout_ms=200)
            return records[0]["offset"] if records else None

        stamp = {"topic": topic, "partition": 0}
        assert first_offset_after({"timestamps": [{**stamp, "timestamp": _iso(base + 30_000)}]}) == 1
        assert first_offset_after({"timestamps": [{**stamp, "timestamp": (base + 120_000) // 1000}]}) == 2
        assert first_offset_after({"timestamps": [{**stamp, "timestamp": _iso(base + 600_000)}]}) is None
        assert first_offset_after({"offsets": [{**stamp, "offset": 0}]}) == 0
        consumer.records(timeout_ms=200)  # read to the end
        # one bad entry (a partition not assigned) and nothing moves
        elsewhere = {"topic": topic, "partition": 9, "timestamp": _iso(base)}
        refused = consumer.post("/positions", {"offsets": [{**stamp, "offset": 1}], "timestamps": [elsewhere]})
        assert refused.status_code == 409, refused.text
        assert consumer.records(timeout_ms=200) == []
        status, code, message = error_of(consumer.post("/positions", {"timestamps": [{**stamp, "timestamp": "noon"}]}))
        assert status == 400 and message.startswith("INVALID_REQUEST"), message
    finally:
        consumer.delete()
        consumer.close()


# -- 4, 5 and 6. v3 admin error codes --------------------------------------------------------


def test_v3_admin_errors_use_confluents_codes(broker, make_topic):
    rest = broker.rest
    topic = make_topic()
    checks = [
        (rest.create_topic(topic, 1), "TOPIC_ALREADY_EXISTS"),
        (rest.create_topic(unique("cfg"), 1, configs={"retention.ms": "later"}), "INVALID_CONFIG"),
        (rest.create_topic(unique("cfg"), 1, configs={"no.such.config": "1"}), "INVALID_CONFIG"),
        (rest.create_topic("bad/name", 1), "INVALID_TOPIC_EXCEPTION"),
    ]
    for resp, name in checks:
        assert (resp.status_code, resp.json()["error_code"]) == (400, 40002), resp.text
        assert resp.json()["message"].startswith(name), resp.text

    assert error_of(rest.http.get("/v3/clusters/not-this-one/topics"))[:2] == (404, 404)
    assert error_of(rest.http.get(rest.v3("/topics/no-such-topic-at-all")))[:2] == (404, 404)
    # v2 keeps Confluent's v2 code for the same case
    assert error_of(rest.http.get("/topics/no-such-topic-at-all"))[:2] == (404, 40401)


# -- 7. every advertised related link is served ------------------------------------------------


def _related_links(doc, out: set[str]) -> set[str]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "related" and isinstance(value, str):
                out.add(value)
            else:
                _related_links(value, out)
    elif isinstance(doc, list):
        for item in doc:
            _related_links(item, out)
    return out


def test_every_related_link_answers_200(broker, make_topic):
    rest = broker.rest
    topic = make_topic(partitions=2)
    assert rest.produce_binary(topic, [{"value": b"x"}], partition=0).status_code == 200
    pages = [rest.v3(), rest.v3("/brokers"), rest.v3("/topics"), rest.v3(f"/topics/{topic}"),
             rest.v3(f"/topics/{topic}/partitions"), rest.v3(f"/topics/{topic}/partitions/0")]
    links: set[str] = set()
    for page in pages:
        resp = rest.http.get(page)
        assert resp.status_code == 200, (page, resp.text)
        _related_links(resp.json(), links)
    followed = set()
    for _ in range(2):  # the links of the linked documents too (replicas -> brokers, configs)
        for link in sorted(links - followed):
            followed.add(link)
            resp = rest.http.get(urlsplit(link).path)
            assert resp.status_code == 200, (link, resp.text)
            _related_links(resp.json(), links)
    paths = {urlsplit(link).path for link in followed}
    cid = rest.cluster_id
    for expected in (f"/v3/clusters/{cid}/broker-configs", f"/v3/clusters/{cid}/brokers/0/configs",
                     f"/v3/clusters/{cid}/brokers/0/partition-replicas",
                     f"/v3/clusters/{cid}/topics/-/partitions/-/reassignment",
                     f"/v3/clusters/{cid}/topics/{topic}/partitions/0/replicas",
                     f"/v3/clusters/{cid}/topics/{topic}/partitions/0/replicas/0"):
        assert expected in paths, expected
    leader = rest.http.get(rest.v3(f"/topics/{topic}/partitions/0/replicas/0")).json()
    assert (leader["kind"], leader["is_leader"], leader["is_in_sync"]) == ("KafkaReplica", True, True)
    configs = rest.http.get(rest.v3("/brokers/0/configs")).json()
    by_name = {c["name"]: c["value"] for c in configs["data"]}
    assert by_name["num.partitions"] == "1" and by_name["auto.create.topics.enable"] == "true"
    on_broker = rest.http.get(rest.v3("/brokers/0/partition-replicas")).json()["data"]
    assert {(r["topic_name"], r["partition_id"]) for r in on_broker} >= {(topic, 0), (topic, 1)}
    assert rest.http.get(rest.v3("/topics/-/partitions/-/reassignment")).json()["data"] == []


# -- 8. one table of codes; the unknown path -----------------------------------------------------


def test_documented_error_table_is_the_error_classes_table():
    from laketail.errors import code_table_markdown

    guide = (ROOT / "docs" / "rest-api.md").read_text()
    found = re.search(r"<!-- error-codes:begin -->\n(.*?)\n<!-- error-codes:end -->", guide, re.S)
    assert found, "docs/rest-api.md has no error-codes section"
    assert found.group(1) == code_table_markdown(), "regenerate docs/rest-api.md's table with code_table_markdown()"


def test_codes_borrowed_with_other_meanings_are_gone():
    """Confluent: 42205 is an invalid schema, 40901 a consumer already subscribed, 40404
    leader not available, 42206-42209 payload/serialization/batch errors."""
    from laketail.errors import code_table

    by_class = {cls: (status, codes) for _, cls, status, codes in code_table()}
    assert by_class["InvalidRecord"] == (422, "42206")
    for cls in ("TopicAlreadyExists", "InvalidTopic", "InvalidConfig", "InvalidPartitions",
                "InvalidReplicationFactor", "InvalidRequest"):
        assert by_class[cls] == (400, "40002"), cls
    assert by_class["UnknownCluster"] == (404, "404")


def test_unknown_path_is_jerseys_404(broker):
    resp = broker.rest.http.get("/no/such/path")
    assert resp.status_code == 404
    assert resp.json() == {"error_code": 404, "message": "HTTP 404 Not Found"}


# -- /docs and /redoc offline --------------------------------------------------------------------


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_use_only_same_origin_assets(broker, page):
    http = broker.rest.http
    resp = http.get(page)
    assert resp.status_code == 200 and "text/html" in resp.headers["content-type"]
    html = resp.text
    assert "http://" not in html and "https://" not in html, "the page references another origin"
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assets += re.findall(r"""url:\s*['"]([^'"]+)['"]""", html)  # the OpenAPI document
    assert any(a.endswith(".js") for a in assets), assets
    for asset in set(assets):
        assert asset.startswith("/"), asset
        fetched = http.get(asset)
        assert fetched.status_code == 200 and fetched.content, asset


# -- access log -----------------------------------------------------------------------------------


def test_access_log_records_each_request_escaped(broker_factory):
    proc = broker_factory(env={"LAKETAIL_ACCESS_LOG": "true"})
    http = proc.rest.http
    assert http.get("/topics/missing%0Aforged 200/partitions").status_code == 404
    assert http.get("/topics").status_code == 200

    def logged() -> list[str]:
        return [line for line in proc.output().splitlines() if "laketail.access" in line]

    def both() -> list[str] | None:  # the readiness probes are logged too: wait for these two
        lines = logged()
        failed = any("/partitions" in line for line in lines)
        listed = any(re.search(r"GET /topics \d", line) for line in lines)
        return lines if failed and listed else None

    lines = wait_until(both, "the two requests' access log lines")
    failing = next(line for line in lines if "/partitions" in line)
    assert re.search(r"GET /topics/missing\\x0aforged 200/partitions 404 \d+\.\dms principal=-$", failing), failing
    assert any(re.search(r"GET /topics 200 \d+\.\dms principal=-$", line) for line in lines), lines


# -- metrics --------------------------------------------------------------------------------------


def test_metrics_export_group_lag_replication_health_and_tier_delay(broker, make_topic):
    rest = broker.rest
    topic = make_topic()
    old_ms = int(time.time() * 1000) - 3_600_000  # an hour ago
    for i in range(5):
        resp = rest.http.post(rest.v3(f"/topics/{topic}/partitions/0/records"), json={
            "value": {"type": "STRING", "data": f"r{i}"}, "timestamp": _iso(old_ms + i)})
        assert resp.json()["error_code"] == 200, resp.text
    group = unique("lagging")
    resp = rest.http.post(f"/v1/groups/{group}/commit", json={  # a standalone commit (no members)
        "generation_id": -1, "member_id": "", "offsets": [{"topic": topic, "partition": 0, "offset": 2}]})
    assert resp.status_code == 200, resp.text

    text = rest.http.get("/metrics").text
    labels = {"consumergroup": group, "topic": topic, "partition": "0"}
    assert sample(text, "kafka_consumergroup_lag", **labels) == 3
    assert sample(text, "kafka_consumergroup_current_offset", **labels) == 2
    lag_s = sample(text, "kafka_consumergroup_lag_seconds", **labels)
    assert lag_s is not None and 3000 < lag_s < 7200, lag_s
    assert sample(text, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sample(text, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert sample(text, "kafka_server_replicamanager_isrshrinks_total") is not None
    assert sample(text, "kafka_server_replicamanager_isrexpands_total") is not None
    assert sample(text, "kafka_topic_partition_under_replicated_partition", topic=topic, partition="0") == 0
    delay = sample(text, "laketail_partition_tier_delay_records", topic=topic, partition="0")
    assert delay is not None and 0 <= delay <= 5
    wait_until(lambda: sample(rest.http.get("/metrics").text, "laketail_partition_tier_delay_records",
                              topic=topic, partition="0") == 0, "the records to reach the table")


# -- --server before the subcommand ---------------------------------------------------------------


def test_server_option_before_and_after_the_subcommand(broker, make_topic):
    topic = make_topic()

    def run(*args: str) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
        return subprocess.run([sys.executable, "-m", "laketail.cli", *args], capture_output=True,
                              env=env, timeout=120)

    for argv in (("--server", broker.url, "topics", "list"), ("topics", "list", "--server", broker.url)):
        result = run(*argv)
        assert result.returncode == 0, (argv, result.stderr.decode())
        assert topic in result.stdout.decode(), argv
    # after the subcommand wins over before it
    result = run("--server", "http://127.0.0.1:9", "topics", "list", "--server", broker.url)
    assert result.returncode == 0 and topic in result.stdout.decode(), result.stderr.decode()
