"""kcat (Debian's package, librdkafka's command-line client; ``make test`` installs it)
against a real broker's Kafka listener: a column of the client matrix (README "Kafka
clients"): list metadata, produce keyed records with each ``acks``, consume them
from the beginning to the end, and read what REST produced."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or "kcat"  # absent: every test fails with FileNotFoundError, naming kcat


def _kcat(kafka_broker, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([KCAT, "-b", kafka_broker.bootstrap, *args], input=stdin, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"kcat {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def _topic(kafka_broker, partitions: int = 1) -> str:
    name = f"kcat-{uuid.uuid4().hex[:10]}"
    assert kafka_broker.rest.create_topic(name, partitions).status_code in (200, 201)
    return name


def test_metadata_lists_the_broker_and_the_topic(kafka_broker):
    topic = _topic(kafka_broker, 3)
    listing = json.loads(_kcat(kafka_broker, "-L", "-J", "-t", topic))
    assert [(b["id"], b["name"]) for b in listing["brokers"]] == [(0, kafka_broker.bootstrap)]
    (described,) = listing["topics"]
    assert described["topic"] == topic and len(described["partitions"]) == 3


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_keyed_records_then_consume_from_the_beginning(kafka_broker, acks):
    topic = _topic(kafka_broker)
    lines = [f"key-{i}:value-{i}" for i in range(15)]
    _kcat(kafka_broker, "-P", "-t", topic, "-p", "0", "-K:", "-X", f"acks={acks}", stdin="\n".join(lines) + "\n")
    out = _kcat(kafka_broker, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k %s\n")
    assert out.splitlines() == [f"{i} key-{i} value-{i}" for i in range(15)]


def test_consume_what_rest_produced_with_headers(kafka_broker):
    topic = _topic(kafka_broker)
    resp = kafka_broker.rest.http.post(
        f"{kafka_broker.url}/topics/{topic}", headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
        json={"records": [{"key": "a", "value": {"n": 1}}, {"key": "b", "value": {"n": 2}}]})
    assert resp.status_code == 200, resp.text
    out = _kcat(kafka_broker, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p %o %k %s\n")
    assert out.splitlines() == ['0 0 "a" {"n":1}', '0 1 "b" {"n":2}']
