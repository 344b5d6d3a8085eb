"""The console's JSON endpoints (/v1/console/...) against a real broker.

They answer whole views in one request, one bounded page at a time; the group reset
follows ``kafka-consumer-groups --reset-offsets``; bad input is a Kafka-style 4xx and
writes nothing.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from laketail.jobs import lag
from tests.conftest import b64
from tests.integration.support import assert_error, wait_until
from tests.jobs.support import run_job

from .support import commit, committed

pytestmark = pytest.mark.integration


def test_console_page_and_assets_are_served_by_the_broker(broker):
    rest = broker.rest
    page = rest.http.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/console/assets/app.js">' in page.text
    for asset, kind in (("app.js", "javascript"), ("api.js", "javascript"), ("chart.js", "javascript"),
                        ("style.css", "text/css")):
        resp = rest.http.get(f"/console/assets/{asset}")
        assert resp.status_code == 200 and kind in resp.headers["content-type"], asset
    assert "cdn" not in page.text.lower() and "https://" not in page.text


def test_topics_partitions_and_delta_table_in_one_request_each(broker, make_topic):
    rest = broker.rest
    topic = make_topic(3)
    assert rest.produce_binary(topic, [{"value": b"a"}] * 5, partition=1).status_code == 200
    listing = rest.http.get("/v1/console/topics", params={"q": topic}).json()
    assert listing["total"] == 1 and listing["offset"] == 0
    (row,) = listing["data"]
    assert (row["topic_name"], row["partitions_count"], row["offsets"]) == (topic, 3, 5)
    assert row["cleanup_policy"] == "delete" and row["retention_ms"] == "604800000"

    parts = rest.http.get(f"/v1/console/topics/{topic}/partitions").json()
    assert parts["total"] == 3
    assert [(p["partition_id"], p["log_start_offset"], p["high_watermark"]) for p in parts["data"]] == [
        (0, 0, 0), (1, 0, 5), (2, 0, 0)]
    assert all(p["isr"] == p["replicas"] == [0] and p["leader"] == 0 for p in parts["data"])
    second = rest.http.get(f"/v1/console/topics/{topic}/partitions", params={"limit": 1, "offset": 1}).json()
    assert [p["partition_id"] for p in second["data"]] == [1] and second["total"] == 3

    def tiered():
        doc = rest.http.get(f"/v1/console/topics/{topic}/table").json()
        return doc if doc["files"] >= 1 else None

    table = wait_until(tiered, "the records in the topic's Delta table")
    assert table["version"] >= 1 and table["size_bytes"] > 0
    assert table["last_commit"]["version"] == table["version"] and table["history"][0] == table["last_commit"]
    wait_until(lambda: rest.http.get(f"/v1/console/topics/{topic}/partitions?offset=1&limit=1")
               .json()["data"][0]["tiered_offset"] == 5, "the tiered offset")

    overview = rest.http.get("/v1/console/overview").json()
    assert overview["brokers"] == [{"broker_id": 0, "url": broker.url, "alive": True, "controller": True}]
    assert overview["partitions"]["online"] == overview["partitions"]["total"] >= 3
    assert overview["partitions"]["offline"] == 0 and overview["produce_records_total"] >= 5


def test_listing_thousands_of_groups_answers_a_bounded_page(broker, make_topic):
    topic = make_topic(1)
    prefix = f"many-{uuid.uuid4().hex[:8]}"
    groups = [f"{prefix}-{i:04d}" for i in range(2000)]
    local = threading.local()

    def one(group: str) -> int:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=broker.url, timeout=60)
        body = {"offsets": [{"topic": topic, "partition": 0, "offset": 0}]}
        return local.http.post(f"/v1/groups/{group}/commit", json=body).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(one, groups)) == {200}
    rest = broker.rest
    first = rest.http.get("/v1/console/groups", params={"q": prefix})
    doc = first.json()
    assert doc["total"] == 2000 and doc["limit"] == 100 and len(doc["data"]) == 100
    assert [g["group_id"] for g in doc["data"]] == groups[:100]
    assert doc["data"][0] == {"group_id": groups[0], "state": "Empty", "members": 0, "protocol": "",
                              "partitions": 1, "total_lag": 0, "status": "OK"}
    last = rest.http.get("/v1/console/groups", params={"q": prefix, "limit": 1000, "offset": 1500}).json()
    assert [g["group_id"] for g in last["data"]] == groups[1500:]
    assert len(first.content) < 20_000  # one page, not the cluster
    assert_error(rest.http.get("/v1/console/groups", params={"limit": 1001}), 400, 40002, "INVALID_REQUEST")
    assert_error(rest.http.get("/v1/console/groups", params={"offset": -1}), 400, 40002, "INVALID_REQUEST")


def test_group_view_has_lag_per_partition_with_the_seeds_status(broker, make_topic):
    rest = broker.rest
    topic = make_topic(3)
    for p, n in ((0, 50), (1, 150), (2, 1200)):
        assert rest.produce_binary(topic, [{"value": b"x"}] * n, partition=p).status_code == 200
    group = f"lagged-{uuid.uuid4().hex[:8]}"
    commit(rest, group, {(topic, 0): 0, (topic, 1): 0, (topic, 2): 0})
    doc = rest.http.get(f"/v1/console/groups/{group}").json()
    assert doc["state"] == "Empty" and doc["members"] == [] and doc["total_lag"] == 1400
    assert [(x["partition"], x["lag"], x["status"]) for x in doc["lags"]["data"]] == [
        (0, 50, "OK"), (1, 150, "caution"), (2, 1200, "warning")]
    assert doc["lags"]["total"] == 3
    listing = rest.http.get("/v1/console/groups", params={"q": group}).json()["data"]
    assert [(g["total_lag"], g["status"]) for g in listing] == [(1400, "warning")]
    assert_error(rest.http.get("/v1/console/groups/no-such-group-here"), 404, 40406, "GROUP_ID_NOT_FOUND")


def test_lag_history_sums_each_measurement_of_the_lag_job(broker, make_topic):
    rest = broker.rest
    topic = make_topic(2)
    group = f"history-{uuid.uuid4().hex[:8]}"
    assert rest.produce_binary(topic, [{"value": b"x"}] * 4, partition=0).status_code == 200
    assert rest.produce_binary(topic, [{"value": b"x"}] * 3, partition=1).status_code == 200
    assert rest.http.get(f"/v1/console/groups/{group}/lag-history").json()["points"] == []
    commit(rest, group, {(topic, 0): 1, (topic, 1): 0})
    run_job(lag.main, "--servers", broker.url, "--data", str(broker.data_dir), "--group", group)
    commit(rest, group, {(topic, 0): 4, (topic, 1): 3})
    run_job(lag.main, "--servers", broker.url, "--data", str(broker.data_dir), "--group", group)
    points = rest.http.get(f"/v1/console/groups/{group}/lag-history").json()["points"]
    assert [(p["lag"], p["partitions"]) for p in points] == [(6, 2), (0, 2)]
    assert points[0]["time_ms"] < points[1]["time_ms"]
    newest = rest.http.get(f"/v1/console/groups/{group}/lag-history", params={"max_points": 1}).json()["points"]
    assert newest == points[1:]


def test_reset_offsets_like_kafka_consumer_groups(broker, make_topic):
    rest = broker.rest
    topic = make_topic(2)
    for p in (0, 1):
        assert rest.produce_binary(topic, [{"value": b"x"}] * 10, partition=p).status_code == 200
    before_ms = int(time.time() * 1000)
    assert rest.produce_binary(topic, [{"value": b"late"}], partition=0).status_code == 200
    group = f"reset-{uuid.uuid4().hex[:8]}"
    commit(rest, group, {(topic, 0): 5, (topic, 1): 5})
    url = f"/v1/console/groups/{group}/reset-offsets"

    dry = rest.http.post(url, json={"topic": topic, "to": "earliest"}).json()
    assert dry["executed"] is False
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in dry["offsets"]] == [(0, 5, 0), (1, 5, 0)]
    assert committed(rest, group, topic, [0, 1]) == {0: 5, 1: 5}  # a dry run writes nothing

    done = rest.http.post(url, json={"topic": topic, "to": "latest", "partitions": [1], "execute": True})
    assert done.status_code == 200 and done.json()["offsets"][0]["new_offset"] == 10
    assert committed(rest, group, topic, [0, 1]) == {0: 5, 1: 10}
    rest.http.post(url, json={"topic": topic, "to": "offset", "offset": 999, "execute": True})
    assert committed(rest, group, topic, [0, 1]) == {0: 11, 1: 10}  # clamped to the high watermark
    rest.http.post(url, json={"topic": topic, "to": "datetime", "datetime_ms": before_ms, "partitions": [0],
                              "execute": True})
    assert committed(rest, group, topic, [0])[0] == 10  # the first record at or after the time
    rest.http.post(url, json={"topic": topic, "to": "earliest", "execute": True})
    assert committed(rest, group, topic, [0, 1]) == {0: 0, 1: 0}

    # Bad input: a Kafka-style 4xx, and nothing written.
    assert_error(rest.http.post(url, json={"topic": topic, "to": "offset", "execute": True}), 400, 40002,
                 "INVALID_REQUEST")
    assert_error(rest.http.post(url, json={"topic": topic, "to": "datetime", "execute": True}), 400, 40002,
                 "INVALID_REQUEST")
    assert_error(rest.http.post(url, json={"topic": topic, "to": "latest", "partitions": [0, 7], "execute": True}),
                 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION")
    assert_error(rest.http.post(url, json={"topic": "no-such-topic-xyz", "to": "latest", "execute": True}),
                 404, 40401, "UNKNOWN_TOPIC_OR_PARTITION")
    assert_error(rest.http.post(url, json={"topic": topic, "to": "sideways", "execute": True}), 400, 40002,
                 "INVALID_REQUEST")
    assert committed(rest, group, topic, [0, 1]) == {0: 0, 1: 0}

    # A group with members owns its positions: NON_EMPTY_GROUP, nothing written.
    joined = rest.http.post(f"/v1/groups/{group}/join", json={"topics": [topic], "session_timeout_ms": 30_000})
    assert joined.status_code == 200, joined.text
    member = joined.json()["member_id"]
    try:
        refused = rest.http.post(url, json={"topic": topic, "to": "latest", "execute": True})
        body = assert_error(refused, 409, 40906, "NON_EMPTY_GROUP")
        assert "inactive" in body["message"]
        assert committed(rest, group, topic, [0, 1]) == {0: 0, 1: 0}
    finally:
        rest.http.post(f"/v1/groups/{group}/leave", json={"member_id": member})


def test_transactions_listing_shows_open_ones_with_age(broker, make_topic):
    rest = broker.rest
    topic = make_topic(1)
    tid = f"console-txn-{uuid.uuid4().hex[:8]}"
    init = rest.http.post("/v1/producers", json={"transactional_id": tid, "transaction_timeout_ms": 600_000}).json()
    begun = rest.http.post(f"/v1/transactions/{tid}/partitions", json={
        "producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"],
        "partitions": [{"topic": topic, "partition": 0}]})
    assert begun.status_code == 200, begun.text

    def listed():
        rows = [t for t in rest.http.get("/v1/console/transactions", params={"limit": 1000}).json()["data"]
                if t["transactional_id"] == tid]
        return rows[0] if rows and rows[0]["age_ms"] > 0 else None

    row = wait_until(listed, "the open transaction with an age")
    assert row["state"] == "Ongoing" and row["hanging"] is False and row["timeout_ms"] == 600_000
    assert row["partitions"] == [{"topic": topic, "partition": 0}]
    assert (row["producer_id"], row["producer_epoch"]) == (init["producer_id"], init["producer_epoch"])
    ongoing = rest.http.get("/v1/console/transactions", params={"state": "Ongoing", "limit": 1000}).json()["data"]
    assert tid in {t["transactional_id"] for t in ongoing} and {t["state"] for t in ongoing} == {"Ongoing"}
    rest.http.post(f"/v1/transactions/{tid}/abort",
                   json={"producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]})


def test_sql_over_topic_tables_with_datafusion(broker, make_topic):
    rest = broker.rest
    topic = make_topic(2)
    other = make_topic(1)
    records = [{"key": f"k{i}".encode(), "value": f'{{"n": {i}}}'.encode(), "partition": i % 2} for i in range(6)]
    assert rest.produce_binary(topic, records).status_code == 200
    assert rest.produce_binary(other, [{"key": b"k1", "value": b"joined"}]).status_code == 200

    def run(query: str, **extra) -> httpx.Response:
        return rest.http.post("/v1/console/sql", json={"query": query, **extra})

    wait_until(lambda: run(f'SELECT COUNT(*) FROM "{topic}"').json()["rows"] == [[6]], "six rows in the table")
    wait_until(lambda: run(f'SELECT COUNT(*) FROM "{other}"').json()["rows"] == [[1]], "the other table")
    # the query, which the old hand-written grammar refused
    grouped = run(f'SELECT partition, count(*) FROM "{topic}" GROUP BY partition ORDER BY partition').json()
    assert grouped["engine"] == "datafusion" and grouped["rows"] == [[0, 3], [1, 3]]
    assert grouped["columns"] == ["partition", "count(*)"] and grouped["types"] == ["int32", "int64"]
    doc = run(f'SELECT partition, "offset", key, value FROM `{topic}` WHERE partition = 1 AND "offset" >= 1 '
              'ORDER BY "offset" DESC LIMIT 2').json()
    assert doc["columns"] == ["partition", "offset", "key", "value"]
    assert doc["rows"] == [[1, 2, "k5", '{"n": 5}'], [1, 1, "k3", '{"n": 3}']] and doc["truncated"] is False
    assert run(f"select key from \"{topic}\" where key = 'k4'").json()["rows"] == [["k4"]]
    joined = run(f'SELECT t.partition, o.value FROM "{topic}" t JOIN "{other}" o ON t.key = o.key').json()
    assert joined["rows"] == [[1, "joined"]]
    capped = run(f'SELECT * FROM "{topic}_all"', max_rows=4).json()
    assert len(capped["rows"]) == 4 and capped["truncated"] is True

    for bad in ("DROP TABLE x", f'DELETE FROM "{topic}"', f'INSERT INTO "{topic}_all" SELECT * FROM "{topic}_all"',
                "COPY (SELECT 1) TO '/tmp/laketail-console-copy.csv'", "CREATE EXTERNAL TABLE p STORED AS CSV "
                "LOCATION '/etc/hostname'", "SELECT 1 INTO t", f'SELECT nope FROM "{topic}"',
                f'SELECT * FROM "{topic}" LIMIT x', "SELECT 1; SELECT 2"):
        assert_error(run(bad), 400, 40002, "INVALID_REQUEST")
    assert_error(run("SELECT * FROM no_such_topic_xyz"), 404, 40401, "UNKNOWN_TOPIC_OR_PARTITION")
    assert_error(run("SELECT 1", timeout_ms=30_001), 400, 40002, "INVALID_REQUEST")
    assert rest.http.get("/v1/console/topics", params={"q": "no_such_topic_xyz"}).json()["total"] == 0
    assert rest.offsets(topic, 0) == (0, 3) and rest.offsets(topic, 1) == (0, 3)  # nothing was written
    assert not os.path.exists("/tmp/laketail-console-copy.csv")


def test_sql_shows_committed_records_only(broker, make_topic):
    rest = broker.rest
    topic = make_topic(1)
    assert rest.produce_binary(topic, [{"value": b"plain"}], partition=0).status_code == 200

    def transaction(value: bytes, end: str | None) -> None:
        tid = f"sql-{end}-{uuid.uuid4().hex[:8]}"
        session = rest.http.post("/v1/producers", json={"transactional_id": tid}).json()
        ids = {"producer_id": session["producer_id"], "producer_epoch": session["producer_epoch"]}
        resp = rest.http.post(f"/topics/{topic}/partitions/0", json={"records": [{"value": b64(value)}] * 2},
                              params={**ids, "sequence": 0, "transactional": "true"},
                              headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
        assert resp.status_code == 200, resp.text
        if end is not None:
            assert rest.http.post(f"/v1/transactions/{tid}/{end}", json=ids).status_code == 200

    transaction(b"aborted", "abort")
    transaction(b"committed", "commit")
    transaction(b"open", None)  # its end is not in the table: left out, and whatever follows it
    assert rest.produce_binary(topic, [{"value": b"after-open"}], partition=0).status_code == 200
    wait_until(lambda: (lambda p: p["tiered_offset"] == p["log_end_offset"] == 10)(
        rest.http.get(f"/v1/console/topics/{topic}/partitions").json()["data"][0]), "every row in the table")
    doc = rest.http.post("/v1/console/sql", json={"query": f'SELECT "offset", value FROM "{topic}" ORDER BY "offset"'})
    assert doc.json()["rows"] == [[0, "plain"], [4, "committed"], [5, "committed"]]
    every = rest.http.post("/v1/console/sql", json={"query": f'SELECT count(*), count(control) FROM "{topic}_all"'})
    assert every.json()["rows"] == [[10, 2]]  # markers and aborted records too
