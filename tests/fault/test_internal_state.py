"""A broker always starts again, whatever clients sent (issue 14 section 1).

Each test here made the next ``laketail serve`` exit for good before the fix:

* a sink batch enlisted but not committed when the broker restarted (its session's
  transactional id ``__sink:<sink>:<batch>:<hex>`` was read back as sink state);
* transactional ids naming the coordinator's own keys (``__producer_id_block``,
  ``__sink:...``) -- now refused with INVALID_REQUEST;
* records produced by clients into ``__consumer_offsets`` / ``__transaction_state`` --
  now refused with INVALID_TOPIC_EXCEPTION on every produce path, and a record that
  cannot be decoded at load is skipped and counted instead of stopping the start.
"""

from __future__ import annotations

import base64
import json

import orjson
import pytest

from tests.fault.support import commit_offset, committed, enlist, inject, sink_state, skipped_metric
from tests.transactions.support import ARROW, BINARY_V2, V2, Session, arrow_body, unique

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
TXNS = "__transaction_state"


# -- restarts ------------------------------------------------------------------------------------


@pytest.mark.fault
def test_restart_with_a_sink_batch_enlisted_but_not_committed(broker_factory, make_topic) -> None:
    """The crash-recovery path the exactly-once sink exists for."""
    proc = broker_factory()
    topic = make_topic(broker=proc)
    http = proc.rest.http
    session = enlist(http, "spark-sink", 0)
    writer = Session.adopt(http, session["transactional_id"], session["producer_id"], session["producer_epoch"])
    assert writer.produce(topic, 0, [b"row"]).status_code == 200

    proc.restart()  # exited with status 3 before: KeyError 'committed_batch'
    http = proc.rest.http
    assert sink_state(http, "spark-sink") == -1
    resp = http.post("/v1/sinks/spark-sink/batches/0/commit", json={"transactional_ids": [session["transactional_id"]]})
    assert resp.status_code == 200, resp.text
    assert sink_state(http, "spark-sink") == 0

    proc.kill9()
    proc.start()
    assert sink_state(proc.rest.http, "spark-sink") == 0


@pytest.mark.parametrize("transactional_id", ["__producer_id_block", "__sink:evil", "__sink:spark-sink:0:0123456789ab"])
def test_reserved_transactional_ids_are_refused(broker, transactional_id: str) -> None:
    resp = broker.rest.http.post("/v1/producers", json={"transactional_id": transactional_id})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error_code"] == 40002
    assert resp.json()["message"].startswith("INVALID_REQUEST: ")
    assert "reserved" in resp.json()["message"]
    described = broker.rest.http.get("/v1/transactions/" + transactional_id.replace(":", "%3A"))
    assert described.status_code == 404  # nothing was written for it


def _internal_topics_exist(http, topic: str) -> None:
    """Both internal topics are created on first use: commit an offset, init a producer."""
    commit_offset(http, unique("g"), topic, 0, 1)
    Session(http, unique("txn"))


def _produce_attempts(http, cluster_id: str, target: str) -> dict[str, object]:
    key = json.dumps({"group": "victim", "topic": "t", "partition": 0}).encode()
    value = json.dumps({"offset": 999, "metadata": "", "commit_timestamp": 1}).encode()
    records = {"records": [{"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}]}
    headers = {"Content-Type": BINARY_V2, "Accept": V2}
    v3 = {"key": {"type": "BINARY", "data": base64.b64encode(key).decode()},
          "value": {"type": "BINARY", "data": base64.b64encode(value).decode()}}
    return {
        "v2": http.post(f"/topics/{target}", json=records, headers=headers),
        "v2 partition": http.post(f"/topics/{target}/partitions/0", json=records, headers=headers),
        "v2 acks=0": http.post(f"/topics/{target}", json=records, headers=headers, params={"acks": "0"}),
        "v2 garbage": http.post(f"/topics/{target}/partitions/0", headers=headers,
                                json={"records": [{"key": base64.b64encode(b"\xff{").decode(),
                                                   "value": base64.b64encode(b"not json").decode()}]}),
        "v3": http.post(f"/v3/clusters/{cluster_id}/topics/{target}/records", json=v3),
        "v3 partition": http.post(f"/v3/clusters/{cluster_id}/topics/{target}/partitions/0/records", json=v3),
        "v3 streaming": http.post(f"/v3/clusters/{cluster_id}/topics/{target}/records",
                                  content=json.dumps(v3) + json.dumps(v3),
                                  headers={"Content-Type": "application/json"}),
        "arrow": http.post(f"/v1/topics/{target}/records", content=arrow_body([value]),
                           headers={"Content-Type": ARROW}),
        "arrow partition": http.post(f"/v1/topics/{target}/partitions/0/records", content=arrow_body([value]),
                                     headers={"Content-Type": ARROW}),
    }


@pytest.mark.parametrize("target", [OFFSETS, TXNS])
def test_clients_cannot_produce_to_internal_topics(broker, topic, target: str) -> None:
    http = broker.rest.http
    _internal_topics_exist(http, topic)
    cluster_id = broker.rest.cluster_id
    before = broker.rest.end_offsets(target)
    for path, resp in _produce_attempts(http, cluster_id, target).items():
        if path == "v3 streaming" and resp.status_code == 200:  # one answer per record, in the body
            answers = [json.loads(line) for line in resp.text.splitlines() if line.strip()]
            assert answers and all(a.get("error_code", 200) >= 400 for a in answers), (path, resp.text)
            assert all("INVALID_TOPIC_EXCEPTION" in a["message"] for a in answers), (path, resp.text)
            continue
        assert 400 <= resp.status_code < 500, (path, resp.status_code, resp.text)
        assert resp.json()["message"].startswith("INVALID_TOPIC_EXCEPTION: Cannot append to internal topic"), (
            path, resp.text)
    assert broker.rest.end_offsets(target) == before  # nothing written
    assert committed(http, "victim", "t", 0) == -1  # no forged offset


def test_transactional_produce_to_an_internal_topic_is_refused(broker, topic) -> None:
    http = broker.rest.http
    _internal_topics_exist(http, topic)
    session = Session(http, unique("txn"))
    before = broker.rest.end_offsets(OFFSETS)
    for arrow in (False, True):
        resp = session.produce(OFFSETS, 0, [b"{}"], arrow=arrow)
        assert resp.status_code == 400, resp.text
        assert resp.json()["message"].startswith("INVALID_TOPIC_EXCEPTION: ")
    assert broker.rest.end_offsets(OFFSETS) == before
    assert session.describe()["state"] == "Empty"  # the partition was not added either


@pytest.mark.parametrize("target", [OFFSETS, TXNS])
def test_clients_cannot_alter_or_delete_internal_topics(broker, topic, target: str) -> None:
    http = broker.rest.http
    _internal_topics_exist(http, topic)
    base = broker.rest.v3(f"/topics/{target}")
    answers = {
        "alter": http.post(f"{base}/configs:alter", json={"data": [{"name": "retention.ms", "value": "1"}]}),
        "put config": http.put(f"{base}/configs/cleanup.policy", json={"value": "delete"}),
        "delete config": http.delete(f"{base}/configs/cleanup.policy"),
        "delete": http.delete(base),
        "create": broker.rest.create_topic(target, 1),
    }
    for what, resp in answers.items():
        assert 400 <= resp.status_code < 500, (what, resp.status_code, resp.text)
        assert "INVALID_TOPIC_EXCEPTION" in resp.json()["message"], (what, resp.text)
    configs = {c["name"]: c["value"] for c in http.get(f"{base}/configs").json()["data"]}
    assert configs["cleanup.policy"] == "compact"
    assert http.get(base).status_code == 200
    # Reading an internal topic stays allowed, as in Kafka.
    fetched = broker.rest.fetch(target, 0, 0)
    assert fetched.status_code == 200, fetched.text


def test_undecodable_internal_records_are_skipped_and_counted(broker_factory, make_topic) -> None:
    """Garbage written behind the broker's back into both internal topics (null keys,
    non-JSON, JSON of the wrong shape, a corrupt producer-id block) is skipped at load;
    the state around it, and records of the previous key format, load."""
    proc = broker_factory()
    topic = make_topic(broker=proc)
    http = proc.rest.http
    commit_offset(http, "readers", topic, 0, 5)
    txn = Session(http, "orders-writer")
    assert proc.stop() is not None  # stopped by SIGTERM, not killed

    offsets_partitions = txns_partitions = 50
    inject(proc.data_dir, OFFSETS, "readers", offsets_partitions, [
        (None, b"x"),
        (b"\xff not json", b"{}"),
        (json.dumps({"group": "readers", "topic": topic}).encode(), b"{}"),  # no partition
        (json.dumps({"group": "readers", "topic": topic, "partition": 0}).encode(), b"[1, 2]"),
    ])
    legacy_txn = {"producer_id": 900, "producer_epoch": 3, "timeout_ms": 60_000, "state": "CompleteCommit",
                  "partitions": [], "offsets": {}, "start_ms": 1}
    inject(proc.data_dir, TXNS, "__producer_id_block", txns_partitions, [
        (b"__producer_id_block", b"not json"),  # the block record: undecodable
        (orjson.dumps({"producer_id_block": 1}), b'{"end": "x"}'),
    ])
    inject(proc.data_dir, TXNS, "legacy-writer", txns_partitions, [(b"legacy-writer", orjson.dumps(legacy_txn))])
    inject(proc.data_dir, TXNS, "__sink:legacy-sink", txns_partitions, [
        (b"__sink:legacy-sink", orjson.dumps({"committed_batch": 7, "enlisted": {}, "committing": None})),
    ])
    inject(proc.data_dir, TXNS, "bad-writer", txns_partitions, [
        (orjson.dumps({"txn": "bad-writer"}), orjson.dumps({**legacy_txn, "state": "Sideways"})),
    ])

    proc.start()  # exited with status 3 before
    http = proc.rest.http
    assert committed(http, "readers", topic, 0) == 5
    assert skipped_metric(http, OFFSETS) == 4
    # The two block records are one state (the later wins, and is undecodable) + bad-writer.
    assert skipped_metric(http, TXNS) == 2
    txn.http = http  # the client of the new process
    assert txn.describe()["producer_id"] == txn.producer_id
    assert http.get("/v1/transactions/legacy-writer").json()["producer_epoch"] == 3
    assert http.get("/v1/transactions/bad-writer").status_code == 404
    assert sink_state(http, "legacy-sink") == 7
    # The producer-id block was lost: no id a loaded transaction holds is handed out again.
    fresh = Session(http, None)
    assert fresh.producer_id not in (txn.producer_id, 900)
    log = proc.stderr_path.read_text()
    assert "__transaction_state-" in log and "skipping a record that cannot be decoded" in log
