"""kafkajs (npm; ``make test`` installs it in tests/kafka_listener/kafkajs) against a
real broker's Kafka listener: a column of the client matrix (README "Kafka clients"):
produce with each ``acks`` and idempotently, and a consumer group of two members
that rebalances, reads everything and commits. ``kafkajs/client.js`` drives the
client and prints what it saw as JSON."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent / "kafkajs"


def _node(*args: str) -> object:
    node = shutil.which("node") or "node"
    assert (HERE / "node_modules" / "kafkajs").is_dir(), "kafkajs is not installed (make test installs it)"
    done = subprocess.run([node, str(HERE / "client.js"), *args], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"node client.js {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return json.loads(done.stdout)


def _topic(kafka_broker, partitions: int = 1) -> str:
    name = f"kjs-{uuid.uuid4().hex[:10]}"
    assert kafka_broker.rest.create_topic(name, partitions).status_code in (200, 201)
    return name


@pytest.mark.parametrize(("acks", "idempotent"), [("0", "false"), ("1", "false"), ("-1", "false"), ("-1", "true")])
def test_produce_then_read_over_rest(kafka_broker, acks, idempotent):
    topic = _topic(kafka_broker)
    answers = _node("produce", kafka_broker.bootstrap, topic, "12", acks, idempotent)
    if acks != "0":  # acks=0: kafkajs learns no offset
        assert answers == [{"partition": 0, "offset": "0"}]  # one batch: its base offset
    deadline = time.monotonic() + 60  # acks=0 answers before the append
    while kafka_broker.rest.offsets(topic, 0)[1] < 12 and time.monotonic() < deadline:
        time.sleep(0.1)
    got = [(r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"]))
           for r in kafka_broker.rest.fetch_range(topic, 0, 0, 12)]  # read back over REST
    assert got == [(i, b"k-%d" % i, b"v-%d" % i) for i in range(12)]


def test_a_group_of_two_rebalances_reads_everything_and_commits(kafka_broker):
    topic = _topic(kafka_broker, 2)
    group = f"kjs-g-{uuid.uuid4().hex[:8]}"
    out = _node("group", kafka_broker.bootstrap, topic, group, "2", "30")
    assert isinstance(out, dict)
    assert sorted(p for member in out["members"] for p in member) == [0, 1]  # one partition each
    assert all(len(member) == 1 for member in out["members"])
    records = out["records"]
    assert sorted(r["value"] for r in records) == sorted(f"v-{i}" for i in range(30))  # each once
    assert all(r["value"] == f"v-{r['header']}" and r["key"] == f"k-{r['header']}" for r in records)
    ends = {p: 1 + max(r["offset"] for r in records if r["partition"] == p) for p in (0, 1)}
    resp = httpx.post(f"{kafka_broker.url}/v1/groups/{group}/committed",
                      json={"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]})
    assert resp.status_code == 200, resp.text
    assert {o["partition"]: o["offset"] for o in resp.json()["offsets"]} == ends
