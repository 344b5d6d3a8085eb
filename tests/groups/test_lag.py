"""The v3 consumer-group and lag endpoints and ``laketail groups`` agree with the
offsets: what was committed, what the partitions hold, and who holds them.

Three partitions with 11, 121 and 1201 records (lag statuses OK, caution, warning);
the first record of each was produced two hours in the past, so the time lag of a
partition whose first unconsumed record is that one is at least two hours (a fact
about the data, not a measurement of speed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from integration.support import wait_until

from .support import V1Member, V2Consumer, describe_v1, error_of, unique

pytestmark = pytest.mark.integration

TWO_HOURS_MS = 2 * 3600 * 1000
SIZES = {0: 11, 1: 121, 2: 1201}


def laketail(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
    return subprocess.run([sys.executable, "-m", "laketail.cli", *args], capture_output=True,
                          env=env, timeout=120)


def _prepare(broker: Any, make_topic: Any) -> tuple[str, str, V2Consumer]:
    topic = make_topic(3, broker=broker)
    old = int(time.time() * 1000) - TWO_HOURS_MS
    first = [{"partition_id": p, "value": {"type": "STRING", "data": "old"}, "timestamp": old} for p in SIZES]
    assert broker.rest.produce_v3(topic, first).status_code == 200
    for p, size in SIZES.items():
        resp = broker.rest.produce_binary(topic, [{"value": b"new"}] * (size - 1), partition=p)
        assert resp.status_code == 200, resp.text
    group = unique("lagging")
    standalone = V1Member(broker.url, group, [topic])
    assert standalone.commit({(topic, 0): 0, (topic, 1): 1}, generation_id=-1).status_code == 200
    standalone.close()
    consumer = V2Consumer(broker.url, group, "lag-watcher", **{"auto.commit.enable": "false"})
    assert consumer.subscribe([topic]).status_code == 204
    wait_until(lambda: len(consumer.assignments()) == 3, "the instance to hold all three partitions")
    return topic, group, consumer


def test_lag_endpoints_and_groups_describe_agree_with_the_offsets(groups_broker: Any, make_topic: Any) -> None:
    topic, group, consumer = _prepare(groups_broker, make_topic)
    rest = groups_broker.rest
    (member,) = describe_v1(groups_broker.url, group)["members"]
    member_id = member["member_id"]
    ends = rest.end_offsets(topic)
    assert ends == SIZES

    lags = rest.http.get(rest.v3(f"/consumer-groups/{group}/lags"))
    assert lags.status_code == 200, lags.text
    assert lags.json()["kind"] == "KafkaConsumerLagList"
    data = lags.json()["data"]
    assert [d["partition_id"] for d in data] == [2, 1, 0], "largest lag first"
    by_partition = {d["partition_id"]: d for d in data}
    expected_current = {0: 0, 1: 1, 2: -1}
    for p, d in by_partition.items():
        assert d["kind"] == "KafkaConsumerLag"
        assert d["cluster_id"] == rest.cluster_id and d["consumer_group_id"] == group
        assert d["topic_name"] == topic
        assert d["current_offset"] == expected_current[p]
        assert d["log_end_offset"] == ends[p]
        assert d["lag"] == ends[p] - max(expected_current[p], 0)
        assert (d["consumer_id"], d["client_id"], d["instance_id"]) == (member_id, "lag-watcher", None)
        assert d["metadata"]["self"].endswith(f"/consumer-groups/{group}/lags/{topic}/partitions/{p}")
        assert d["metadata"]["resource_name"] == (
            f"crn:///kafka={rest.cluster_id}/consumer-group={group}/lag={topic}/partition={p}")
        single = rest.http.get(rest.v3(f"/consumer-groups/{group}/lags/{topic}/partitions/{p}"))
        assert single.status_code == 200
        assert {k: v for k, v in single.json().items() if k != "time_lag_ms"} == {
            k: v for k, v in d.items() if k != "time_lag_ms"}
    assert by_partition[0]["time_lag_ms"] >= TWO_HOURS_MS  # its first unconsumed record is the old one
    assert by_partition[2]["time_lag_ms"] >= TWO_HOURS_MS
    assert 0 <= by_partition[1]["time_lag_ms"] < TWO_HOURS_MS

    summary = rest.http.get(rest.v3(f"/consumer-groups/{group}/lag-summary")).json()
    assert summary["kind"] == "KafkaConsumerGroupLagSummary"
    assert {k: summary[k] for k in (
        "consumer_group_id", "max_lag_consumer_id", "max_lag_instance_id", "max_lag_client_id",
        "max_lag_topic_name", "max_lag_partition_id", "max_lag", "total_lag",
    )} == {
        "consumer_group_id": group, "max_lag_consumer_id": member_id, "max_lag_instance_id": None,
        "max_lag_client_id": "lag-watcher", "max_lag_topic_name": topic, "max_lag_partition_id": 2,
        "max_lag": 1201, "total_lag": 11 + 120 + 1201,
    }
    assert summary["max_time_lag_ms"] >= TWO_HOURS_MS
    assert summary["max_lag_partition"]["related"].endswith(f"/topics/{topic}/partitions/2")
    assert summary["max_lag_consumer"]["related"].endswith(f"/consumer-groups/{group}/consumers/{member_id}")

    described = rest.http.get(rest.v3(f"/consumer-groups/{group}")).json()
    assert {k: described[k] for k in ("kind", "consumer_group_id", "is_simple", "partition_assignor", "state")} == {
        "kind": "KafkaConsumerGroup", "consumer_group_id": group, "is_simple": False,
        "partition_assignor": "range", "state": "STABLE",
    }
    assert described["coordinator"]["related"].endswith("/brokers/0")
    listed = rest.http.get(rest.v3("/consumer-groups")).json()
    assert group in {g["consumer_group_id"] for g in listed["data"]}
    consumers = rest.http.get(rest.v3(f"/consumer-groups/{group}/consumers")).json()["data"]
    assert [(c["consumer_id"], c["client_id"], c["instance_id"]) for c in consumers] == [
        (member_id, "lag-watcher", None)]
    assignments = rest.http.get(rest.v3(f"/consumer-groups/{group}/consumers/{member_id}/assignments")).json()
    assert sorted(a["partition_id"] for a in assignments["data"]) == [0, 1, 2]

    # laketail groups describe: the same numbers, one row per partition.
    out = laketail("groups", "describe", group, "--server", groups_broker.url)
    assert out.returncode == 0, out.stderr.decode()
    rows = {}
    for line in out.stdout.decode().splitlines():
        cells = line.split()
        if cells and cells[0] == topic:
            rows[int(cells[1])] = cells
    assert sorted(rows) == [0, 1, 2]
    statuses = {0: "OK", 1: "caution", 2: "warning"}
    for p, cells in rows.items():
        d = by_partition[p]
        current = str(d["current_offset"]) if d["current_offset"] >= 0 else "-"
        assert cells[2:5] == [current, str(d["log_end_offset"]), str(d["lag"])], cells
        assert cells[6:] == [member_id, "lag-watcher", statuses[p]], cells
    assert rows[0][5].startswith("2h") and rows[2][5].startswith("2h")
    assert f"total lag: {11 + 120 + 1201}" in out.stdout.decode()

    listing = laketail("groups", "list", "--server", groups_broker.url)
    assert listing.returncode == 0, listing.stderr.decode()
    assert [group, "Stable", "range", "1"] in [line.split() for line in listing.stdout.decode().splitlines()]
    assert consumer.delete().status_code == 204
    consumer.close()


def test_unknown_groups_and_partitions(groups_broker: Any, make_topic: Any) -> None:
    rest = groups_broker.rest
    nobody = unique("nobody")
    for path in ("", "/lags", "/lag-summary", "/consumers"):
        assert error_of(rest.http.get(rest.v3(f"/consumer-groups/{nobody}{path}"))) == (404, 404)  # v3: 404
    topic = make_topic(1, broker=groups_broker)
    group = unique("committed-only")
    member = V1Member(groups_broker.url, group, [topic])
    assert member.commit({(topic, 0): 0}, generation_id=-1).status_code == 200
    member.close()
    assert error_of(rest.http.get(rest.v3(f"/consumer-groups/{group}/lags/{topic}/partitions/5"))) == (404, 404)
    simple = rest.http.get(rest.v3(f"/consumer-groups/{group}")).json()
    assert (simple["state"], simple["is_simple"]) == ("EMPTY", True)
    assert error_of(rest.http.get(rest.v3(f"/consumer-groups/{group}/consumers/ghost"))) == (404, 40405)
    assert error_of(rest.http.get("/v3/clusters/not-this-one/consumer-groups")) == (404, 404)

    out = laketail("groups", "describe", nobody, "--server", groups_broker.url)
    assert out.returncode == 1
    assert out.stderr.decode().startswith("error: ") and nobody in out.stderr.decode()
