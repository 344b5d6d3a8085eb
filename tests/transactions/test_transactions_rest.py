"""Transactions over the REST contract on a real broker: fencing of a zombie session,
the last stable offset holding read_committed back, aborted data invisible through
every read API (Redpanda-style fetch, /v1 Arrow fetch, v2 consumer instances, end
offsets) yet audit-able in the topic's Delta table, and Spark's batch transactions.
"""

from __future__ import annotations

import base64

import httpx
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from .support import (
    BINARY_V2,
    V2,
    Session,
    error_of,
    read_arrow,
    read_values,
    unique,
    v2_offsets,
    wait_until,
)

pytestmark = pytest.mark.integration


def end_offsets(http: httpx.Client, topic: str, partition: int) -> dict[str, int]:
    """Every API's idea of the partition's end, under both isolation levels."""
    out = {}
    for isolation in ("read_committed", "read_uncommitted"):
        v2 = http.get(f"/topics/{topic}/partitions/{partition}/offsets", params={"isolation_level": isolation})
        v1 = http.get(f"/v1/topics/{topic}/partitions/{partition}/offsets",
                      params={"timestamp": "latest", "isolation_level": isolation})
        assert v2.status_code == v1.status_code == 200, (v2.text, v1.text)
        out[f"v2 {isolation}"] = v2.json()["end_offset"]
        out[f"v1 {isolation}"] = v1.json()["offset"]
    return out


def test_a_new_session_fences_the_zombie_and_aborts_its_transaction(txn_broker, make_topic):
    topic = make_topic(partitions=2, broker=txn_broker)
    http = txn_broker.rest.http
    txid = unique("app")
    zombie = Session(http, txid)
    assert zombie.begin().status_code == 200
    assert v2_offsets(zombie.produce(topic, 0, [b"zombie-0"])) == [0]
    assert zombie.produce(topic, 1, [b"zombie-1"], arrow=True).status_code == 200
    assert zombie.describe()["state"] == "Ongoing"

    fresh = Session(http, txid)
    assert (fresh.producer_id, fresh.epoch) == (zombie.producer_id, zombie.epoch + 1)
    assert fresh.describe()["state"] == "Empty"  # the zombie's transaction was aborted
    for resp in (
        zombie.produce(topic, 0, [b"late"]),
        zombie.produce(topic, 0, [b"late"], arrow=True),
        zombie.begin(),
        zombie.add_partitions([(topic, 0)]),
        zombie.commit(),
        zombie.abort(),
    ):
        assert error_of(resp) == (409, 40915), resp.text
        assert resp.json()["message"].startswith("PRODUCER_FENCED")
    # An idempotent (non-transactional) batch of the old epoch is fenced too.
    assert error_of(zombie.produce(topic, 0, [b"late"], transactional=False)) == (409, 40915)

    assert fresh.begin().status_code == 200
    assert fresh.produce(topic, 0, [b"fresh"]).status_code == 200
    assert fresh.commit().json() == {"state": "CompleteCommit"}
    assert read_values(http, topic, 0) == [b"fresh"]
    assert read_values(http, topic, 1) == []
    assert read_values(http, topic, 0, "read_uncommitted") == [b"zombie-0", b"fresh"]


def test_an_open_transaction_holds_read_committed_back_until_it_commits(txn_broker, make_topic):
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    rest = txn_broker.rest
    assert rest.produce_binary(topic, [{"value": b"before"}], partition=0).status_code == 200
    session = Session(http, unique("lso"))
    assert session.begin().status_code == 200
    assert session.add_partitions([(topic, 0)]).status_code == 200
    assert session.describe()["partitions"] == [{"topic": topic, "partition": 0}]
    assert v2_offsets(session.produce(topic, 0, [b"t1", b"t2"])) == [1, 2]
    assert rest.produce_binary(topic, [{"value": b"after"}], partition=0).status_code == 200

    assert end_offsets(http, topic, 0) == {
        "v2 read_committed": 1, "v1 read_committed": 1, "v2 read_uncommitted": 4, "v1 read_uncommitted": 4,
    }
    # Nothing at or after the transaction's first offset, whichever way one asks.
    for offset in (1, 2, 3):
        held = http.get(f"/topics/{topic}/partitions/0/records", params={"offset": offset},
                        headers={"Accept": BINARY_V2})
        assert held.status_code == 200 and held.json() == [], held.text
    assert read_values(http, topic, 0) == [b"before"]
    assert read_arrow(http, topic, 0).column("value").to_pylist() == [b"before"]
    assert read_values(http, topic, 0, "read_uncommitted") == [b"before", b"t1", b"t2", b"after"]

    assert session.commit().json() == {"state": "CompleteCommit"}
    ends = end_offsets(http, topic, 0)
    assert set(ends.values()) == {5}  # 4 records + the COMMIT marker
    assert read_values(http, topic, 0) == [b"before", b"t1", b"t2", b"after"]
    described = session.describe()
    assert described["state"] == "CompleteCommit" and described["partitions"] == []
    assert described["transactional_id"] == session.transactional_id
    assert described["timeout_ms"] == 60_000


class V2Instance:
    """A Confluent v2 consumer instance with partitions assigned by hand."""

    def __init__(self, http: httpx.Client, topic: str, isolation: str | None) -> None:
        self.http = http
        self.group = unique("iso")
        config = {"format": "binary", "auto.offset.reset": "earliest"}
        if isolation is not None:
            config["isolation.level"] = isolation
        created = http.post(f"/consumers/{self.group}", json=config, headers={"Content-Type": V2})
        assert created.status_code == 200, created.text
        self.path = f"/consumers/{self.group}/instances/{created.json()['instance_id']}"
        assigned = http.post(self.path + "/assignments", json={"partitions": [{"topic": topic, "partition": 0}]},
                             headers={"Content-Type": V2})
        assert assigned.status_code == 204, assigned.text

    def read(self, count: int) -> list[dict]:
        """Records until ``count`` arrived (then one more poll to see nothing extra)."""
        seen: list[dict] = []

        def more() -> bool:
            resp = self.http.get(self.path + "/records", params={"timeout": 200}, headers={"Accept": BINARY_V2})
            assert resp.status_code == 200, resp.text
            seen.extend(resp.json())
            return len(seen) >= count

        wait_until(more, f"{count} records from a v2 instance")
        resp = self.http.get(self.path + "/records", params={"timeout": 200}, headers={"Accept": BINARY_V2})
        seen.extend(resp.json())
        return seen

    def close(self) -> None:
        self.http.delete(self.path, headers={"Content-Type": V2})


def _txn_topic_with_an_abort(broker, make_topic) -> tuple[str, Session]:
    """plain-0, [a1 a2 ABORT], plain-1, [c1 c2 COMMIT], plain-2 in one partition."""
    topic = make_topic(broker=broker)
    rest = broker.rest
    session = Session(rest.http, unique("mixed"))
    assert rest.produce_binary(topic, [{"value": b"plain-0"}], partition=0).status_code == 200
    assert session.begin().status_code == 200
    assert session.produce(topic, 0, [b"a1", b"a2"]).status_code == 200
    assert session.abort().json() == {"state": "CompleteAbort"}
    assert rest.produce_binary(topic, [{"value": b"plain-1"}], partition=0).status_code == 200
    assert session.begin().status_code == 200
    assert session.produce(topic, 0, [b"c1"], arrow=True).status_code == 200
    assert session.produce(topic, 0, [b"c2"]).status_code == 200
    assert session.commit().json() == {"state": "CompleteCommit"}
    assert rest.produce_binary(topic, [{"value": b"plain-2"}], partition=0).status_code == 200
    return topic, session


COMMITTED = [b"plain-0", b"plain-1", b"c1", b"c2", b"plain-2"]
EVERYTHING = [b"plain-0", b"a1", b"a2", b"plain-1", b"c1", b"c2", b"plain-2"]
# offsets: plain-0 0, a1 1, a2 2, ABORT 3, plain-1 4, c1 5, c2 6, COMMIT 7, plain-2 8


def test_aborted_data_is_invisible_to_read_committed_through_every_api(txn_broker, make_topic):
    topic, _ = _txn_topic_with_an_abort(txn_broker, make_topic)
    http = txn_broker.rest.http

    # Redpanda-style fetch: no aborted record, no marker, offsets with gaps.
    records = [(r["offset"], base64.b64decode(r["value"])) for r in
                http.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0},
                         headers={"Accept": BINARY_V2}).json()]
    assert records == [(0, b"plain-0"), (4, b"plain-1"), (5, b"c1"), (6, b"c2"), (8, b"plain-2")]
    assert read_values(http, topic, 0, "read_uncommitted") == EVERYTHING
    # A read starting inside the aborted stretch skips it.
    inside = http.get(f"/topics/{topic}/partitions/0/records", params={"offset": 1},
                      headers={"Accept": BINARY_V2}).json()
    assert [r["offset"] for r in inside] == [4, 5, 6, 8]

    # /v1 Arrow fetch: the same rows, and no control row under either isolation.
    committed = read_arrow(http, topic, 0)
    assert committed.column("value").to_pylist() == COMMITTED
    assert committed.column("offset").to_pylist() == [0, 4, 5, 6, 8]
    everything = read_arrow(http, topic, 0, "read_uncommitted")
    assert everything.column("value").to_pylist() == EVERYTHING
    assert everything.column("control").null_count == everything.num_rows
    assert everything.column("transactional").to_pylist() == [False, True, True, False, True, True, False]

    # v2 consumer instances: isolation.level defaults to read_committed.
    for isolation, expected in ((None, COMMITTED), ("read_committed", COMMITTED),
                                ("read_uncommitted", EVERYTHING)):
        instance = V2Instance(txn_broker.new_client().http, topic, isolation)
        try:
            seen = instance.read(len(expected))
            assert [base64.b64decode(r["value"]) for r in seen] == expected, isolation
        finally:
            instance.close()
            instance.http.close()


def test_the_delta_table_shows_transactional_rows_and_their_markers(txn_broker, make_topic):
    topic, session = _txn_topic_with_an_abort(txn_broker, make_topic)

    def tiered() -> pa.Table | None:
        table = DeltaTable(str(txn_broker.table_path(topic))).to_pyarrow_table()
        return table if table.num_rows == 9 else None

    table = wait_until(tiered, "all 9 rows (7 records, 2 markers) in the Delta table").sort_by("offset")
    rows = table.select(["offset", "value", "transactional", "control", "producer_id", "producer_epoch"]).to_pylist()
    markers = [(r["offset"], r["control"]) for r in rows if r["control"] is not None]
    assert markers == [(3, "ABORT"), (7, "COMMIT")]
    for row in rows:
        if row["transactional"]:
            assert (row["producer_id"], row["producer_epoch"]) == (session.producer_id, session.epoch)
        else:
            assert row["producer_id"] == -1
    # The audit SQL would run: a transactional row's outcome is its producer's next marker.
    outcome = {}
    for row in rows:
        if row["transactional"] and row["control"] is None:
            outcome[row["value"]] = next(c for o, c in markers if o > row["offset"])
    assert outcome == {b"a1": "ABORT", b"a2": "ABORT", b"c1": "COMMIT", b"c2": "COMMIT"}


def test_offsets_sent_to_a_transaction_are_committed_only_with_it(txn_broker, make_topic):
    source = make_topic(broker=txn_broker)
    sink = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    group = unique("etl")
    session = Session(http, unique("etl"))

    def committed() -> int:
        resp = http.post(f"/v1/groups/{group}/committed", json={"partitions": [{"topic": source, "partition": 0}]})
        assert resp.status_code == 200, resp.text
        return resp.json()["offsets"][0]["offset"]

    assert session.begin().status_code == 200
    assert session.produce(sink, 0, [b"x"]).status_code == 200
    assert session.send_offsets(group, {(source, 0): 7}).status_code == 200
    assert session.abort().status_code == 200
    assert committed() == -1
    assert session.begin().status_code == 200
    assert session.produce(sink, 0, [b"y"]).status_code == 200
    assert session.send_offsets(group, {(source, 0): 9}).status_code == 200
    assert session.commit().status_code == 200
    assert committed() == 9
    # Offsets for a partition that does not exist are refused before anything is prepared.
    assert session.begin().status_code == 200
    bad = session.send_offsets(group, {("no-such-topic-" + unique("x"), 0): 1})
    assert error_of(bad) == (404, 40401)
    assert session.commit().json() == {"state": "CompleteCommit"}


def test_transaction_errors_over_rest(txn_broker, make_topic):
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    unknown = unique("never-initialised")
    assert error_of(http.get(f"/v1/transactions/{unknown}")) == (404, 40407)
    ident = {"producer_id": 1, "producer_epoch": 0}
    assert error_of(http.post(f"/v1/transactions/{unknown}/begin", json=ident)) == (404, 40407)
    assert error_of(http.post(f"/v1/transactions/{unknown}/commit", json=ident)) == (404, 40407)
    session = Session(http, unique("errs"))
    wrong_pid = {"producer_id": session.producer_id + 1, "producer_epoch": session.epoch}
    assert error_of(http.post(f"/v1/transactions/{session.transactional_id}/begin", json=wrong_pid)) == (409, 40913)
    future_epoch = {"producer_id": session.producer_id, "producer_epoch": session.epoch + 1}
    assert error_of(http.post(f"/v1/transactions/{session.transactional_id}/commit",
                              json=future_epoch)) == (409, 40913)
    assert error_of(http.post(f"/v1/transactions/{session.transactional_id}/begin", json={})) == (400, 40002)
    assert error_of(session.add_partitions([(topic, 5)])) == (404, 40402)
    # Committing with nothing open is fine (Kafka's client would not even ask).
    assert session.commit().json() == {"state": "Empty"}


def test_a_transactional_id_with_a_slash_works_percent_encoded(txn_broker, make_topic):
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    txid = f"team/{unique('app')}:v1"
    session = Session(http, txid)
    assert "%2F" in session.path
    assert session.produce(topic, 0, [b"v"]).status_code == 200
    assert session.commit().json() == {"state": "CompleteCommit"}
    assert session.describe()["transactional_id"] == txid
    assert read_values(http, topic, 0) == [b"v"]
    again = Session(http, txid)
    assert (again.producer_id, again.epoch) == (session.producer_id, session.epoch + 1)


def test_batch_transactions_commit_one_attempt_and_a_replay_is_a_no_op(txn_broker, make_topic):
    topic = make_topic(broker=txn_broker)
    http = txn_broker.rest.http
    sink = unique("spark-sink")
    assert http.get(f"/v1/sinks/{sink}").json() == {"sink_id": sink, "committed_batch": -1}

    def enlist(batch: int, body: dict | None = None) -> Session:
        resp = http.post(f"/v1/sinks/{sink}/batches/{batch}/enlist", json=body)
        assert resp.status_code == 200, resp.text
        doc = resp.json()
        return Session.adopt(http, doc["transactional_id"], doc["producer_id"], doc["producer_epoch"])

    first, second = enlist(0), enlist(0, {"transaction_timeout_ms": 30_000})
    assert first.transactional_id != second.transactional_id
    assert first.produce(topic, 0, [b"attempt-1"]).status_code == 200
    assert second.produce(topic, 0, [b"attempt-2"], arrow=True).status_code == 200
    assert read_values(http, topic, 0) == []  # both open
    commit = http.post(f"/v1/sinks/{sink}/batches/0/commit", json={"transactional_ids": [second.transactional_id]})
    assert commit.status_code == 200 and commit.json() == {"committed": True}, commit.text
    assert read_values(http, topic, 0) == [b"attempt-2"]
    assert http.get(f"/v1/sinks/{sink}").json() == {"sink_id": sink, "committed_batch": 0}

    # The driver replays batch 0: the new attempt must not land, and the answer says so.
    replay = enlist(0)
    assert replay.produce(topic, 0, [b"replayed"]).status_code == 200
    again = http.post(f"/v1/sinks/{sink}/batches/0/commit", json={"transactional_ids": [replay.transactional_id]})
    assert again.status_code == 200 and again.json() == {"committed": False}, again.text
    assert read_values(http, topic, 0) == [b"attempt-2"]

    # Batch 1 is abandoned: abort drops every attempt; batch 2 then commits.
    dropped = enlist(1)
    assert dropped.produce(topic, 0, [b"abandoned"]).status_code == 200
    assert http.post(f"/v1/sinks/{sink}/batches/1/abort").json() == {}
    last = enlist(2)
    assert last.produce(topic, 0, [b"batch-2"]).status_code == 200
    unknown = http.post(f"/v1/sinks/{sink}/batches/2/commit", json={"transactional_ids": ["not-enlisted"]})
    assert error_of(unknown) == (409, 40912)
    assert http.post(f"/v1/sinks/{sink}/batches/2/commit",
                     json={"transactional_ids": [last.transactional_id]}).json() == {"committed": True}
    assert read_values(http, topic, 0) == [b"attempt-2", b"batch-2"]
    assert read_values(http, topic, 0, "read_uncommitted") == [
        b"attempt-1", b"attempt-2", b"replayed", b"abandoned", b"batch-2",
    ]
    assert http.get(f"/v1/sinks/{sink}").json()["committed_batch"] == 2
