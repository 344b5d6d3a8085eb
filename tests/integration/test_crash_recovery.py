"""``kill -9`` of a broker under acks=1 produce loses no acknowledged record, and the
tierer resumes after restart without duplicating or skipping an offset in the table.

A producer thread sends continuously and remembers every acknowledged (partition,
offset, value); the broker is killed at several points (early, mid-stream, after a
burst), restarted on the same data and port, and checked each time: every acknowledged
value is at its offset, offsets stay dense, the table never holds a duplicate. At the
end the table must catch up to the log end of every partition.
"""

from __future__ import annotations

import base64
import itertools
import signal
import threading

import httpx
import pytest

from .support import decode_binary, read_table, rows_by_offset, table_offsets, wait_for_table, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

PARTITIONS = 2
#: Per round: acknowledged records (since the round started) before the kill, and
#: the padding of each value (large frames make a kill in the middle of a write
#: likelier, so recovery has torn tails to cut).
ROUNDS = [(25, 0), (150, 0), (1, 20_000), (400, 2_000), (100, 30_000)]


class _Producer(threading.Thread):
    """Produces acks=1 until the broker dies; keeps what was acknowledged."""

    def __init__(self, url: str, topic: str, seq: itertools.count, padding: int) -> None:
        super().__init__(daemon=True)
        self.url, self.topic, self.seq = url, topic, seq
        self.padding = b"p" * padding
        self.acked: list[tuple[int, int, bytes]] = []
        self.sent: set[bytes] = set()
        self.unexpected: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30.0) as http:
            while not self.stop.is_set():
                n = next(self.seq)
                records = [(n * 4 + j, (n + j) % PARTITIONS) for j in range(1 + n % 4)]
                values = [f"value-{i}-".encode() + self.padding for i, _ in records]
                self.sent.update(values)
                body = {
                    "records": [
                        {"key": None, "value": _b64(v), "partition": p} for v, (_, p) in zip(values, records)
                    ]
                }
                try:
                    resp = http.post(
                        f"/topics/{self.topic}",
                        json=body,
                        params={"acks": "1"},
                        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
                    )
                except httpx.TransportError:
                    return  # the broker is gone: nothing in flight counts as acknowledged
                if resp.status_code != 200:
                    self.unexpected.append(f"{resp.status_code} {resp.text[:300]}")
                    return
                for value, entry in zip(values, resp.json()["offsets"]):
                    self.acked.append((entry["partition"], entry["offset"], value))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _check_acknowledged(broker, topic: str, acked: dict[tuple[int, int], bytes]) -> dict[int, int]:
    """Every acknowledged value is at its offset; returns the log end offsets."""
    rest = broker.rest
    end = rest.end_offsets(topic)
    for p in range(PARTITIONS):
        mine = {o: v for (q, o), v in acked.items() if q == p}
        if not mine:
            continue
        assert end[p] >= max(mine) + 1, f"partition {p} ends at {end[p]} below acknowledged {max(mine)}"
        fetched = {r["offset"]: decode_binary(r)["value"] for r in rest.fetch_range(topic, p, 0, end[p])}
        assert sorted(fetched) == list(range(end[p])), f"partition {p} offsets are not dense"
        lost = {o: v for o, v in mine.items() if fetched.get(o) != v}
        assert not lost, f"partition {p} lost or changed acknowledged records: {dict(list(lost.items())[:5])}"
    return end


def test_kill9_during_acks1_produce_loses_nothing_and_tiering_resumes(broker_factory):
    broker = broker_factory()
    rest = broker.rest
    topic = "crash"
    resp = rest.create_topic(topic, PARTITIONS, configs={"table.flush.interval.ms": "20"})
    assert resp.status_code in (200, 201), resp.text
    cluster_id = rest.cluster_id

    seq = itertools.count()
    acked: dict[tuple[int, int], bytes] = {}
    sent: set[bytes] = set()
    late_topics = []
    for round_, (threshold, padding) in enumerate(ROUNDS):
        producer = _Producer(broker.url, topic, seq, padding)
        producer.start()
        wait_until(
            lambda producer=producer, threshold=threshold: len(producer.acked) >= threshold or not producer.is_alive(),
            f"{threshold} acknowledged records in round {round_}",
            timeout_s=120,
        )
        # A topic created just before the crash must survive it too.
        late = f"late-{round_}"
        assert rest.create_topic(late, 1).status_code in (200, 201)
        late_topics.append(late)
        broker.kill9()
        producer.join(60)
        assert not producer.is_alive()
        assert not producer.unexpected, producer.unexpected
        for p, o, v in producer.acked:
            assert (p, o) not in acked, f"offset {o} of partition {p} acknowledged twice"
            acked[(p, o)] = v
        sent |= producer.sent

        broker.restart()
        rest = broker.rest
        assert rest.cluster_id == cluster_id
        for name in late_topics:
            assert rest.offsets(name, 0) == (0, 0), f"topic {name} did not survive the crash"
        _check_acknowledged(broker, topic, acked)
        # Mid-recovery the table may lag, but never holds an offset twice.
        rows_by_offset(read_table(broker.table_path(topic)))

    end = _check_acknowledged(broker, topic, acked)
    table = wait_for_table(broker.table_path(topic), end)
    rows = rows_by_offset(table)
    offsets = table_offsets(table)
    for p in range(PARTITIONS):
        assert offsets.get(p, []) == list(range(end[p])), f"partition {p} table offsets not dense from 0"
    for (p, o), value in acked.items():
        assert rows[(p, o)]["value"] == value, f"table has the wrong value at partition {p} offset {o}"
    strays = {row["value"] for row in rows.values()} - sent
    assert not strays, f"the table holds values nobody sent: {list(strays)[:5]}"

    # The table stays exactly the log after more traffic on the recovered broker.
    resp = rest.produce_binary(topic, [{"value": b"after", "partition": p} for p in range(PARTITIONS)], acks="1")
    assert resp.status_code == 200, resp.text
    end = rest.end_offsets(topic)
    table = wait_for_table(broker.table_path(topic), end)
    assert table_offsets(table) == {p: list(range(end[p])) for p in range(PARTITIONS)}


#: Records per topic produced just before the kill: a backlog of one record and one of
#: several batches, on one broker and one crash (each was a broker and a crash of its own).
BACKLOGS = (300, 1)


def test_kill9_right_after_produce_then_tiering_catches_up(broker_factory):
    """A crash while the tierer still has a backlog: after restart the table gets every
    record exactly once. The small backlog is produced last, right before the kill."""
    broker = broker_factory()
    rest = broker.rest
    written: dict[str, list[bytes]] = {}
    for count in BACKLOGS:
        topic = f"backlog-{count}"
        assert rest.create_topic(topic, 1, configs={"table.flush.interval.ms": "10"}).status_code in (200, 201)
        written[topic] = [f"b{i}".encode() for i in range(count)]
    for topic, values in written.items():
        for i in range(0, len(values), 50):
            resp = rest.produce_binary(topic, [{"value": v} for v in values[i:i + 50]], acks="1")
            assert resp.status_code == 200, resp.text
    broker.kill9()
    broker.restart()
    for topic, values in written.items():
        table = wait_for_table(broker.table_path(topic), {0: len(values)})
        rows = rows_by_offset(table)
        assert [rows[(0, o)]["value"] for o in range(len(values))] == values
        assert table.num_rows == len(values)


def test_clean_shutdown_and_restart_keep_everything(broker_factory):
    broker = broker_factory()
    rest = broker.rest
    assert rest.create_topic("kept", 2, configs={"retention.ms": "-1"}).status_code in (200, 201)
    resp = rest.produce_binary("kept", [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(50)])
    assert resp.status_code == 200, resp.text
    acked = {(e["partition"], e["offset"]): f"v{i}".encode() for i, e in enumerate(resp.json()["offsets"])}
    cluster_id = rest.cluster_id

    # uvicorn re-raises the SIGTERM it handled once shutdown is complete, so a clean
    # exit is 0 or -SIGTERM; stop() returns None only when the broker had to be killed.
    code = broker.stop()
    assert code in (0, -signal.SIGTERM), f"the broker did not exit cleanly on SIGTERM ({code})\n{broker.output()}"
    broker.start()
    rest = broker.rest
    assert rest.cluster_id == cluster_id
    assert "kept" in rest.http.get("/topics").json()
    configs = rest.http.get(rest.v3("/topics/kept/configs")).json()["data"]
    assert {c["name"]: c["value"] for c in configs}["retention.ms"] == "-1"
    end = rest.end_offsets("kept")
    assert sum(end.values()) == 50
    for p in range(2):
        for r in rest.fetch_range("kept", p, 0, end[p]):
            assert acked[(p, r["offset"])] == decode_binary(r)["value"]
    rows = rows_by_offset(wait_for_table(broker.table_path("kept"), end))
    assert {k: v["value"] for k, v in rows.items()} == acked


def test_restart_after_hot_segments_left_for_the_table(broker_factory):
    """When most of a partition lives only in the table (tiered hot segments deleted),
    a crash and restart keeps the log end, serves old offsets from the table, and the
    next record gets the next offset, tiered once. A topic deleted before the crash
    stays deleted."""
    broker = broker_factory()
    rest = broker.rest
    configs = {"segment.bytes": "14", "local.retention.ms": "0", "table.flush.interval.ms": "20"}
    assert rest.create_topic("cold", 1, configs=configs).status_code in (200, 201)
    assert rest.create_topic("doomed", 1).status_code in (200, 201)
    for i in range(10):
        assert rest.produce_binary("cold", [{"value": f"c{i}".encode()}], acks="1").status_code == 200
    wait_for_table(broker.table_path("cold"), {0: 10})
    hot_dir = broker.data_dir / "logs" / "broker-0" / "cold-0"
    wait_until(lambda: len(list(hot_dir.iterdir())) < 5, f"tiered hot segments in {hot_dir} to be deleted", 90)
    assert rest.http.delete(rest.v3("/topics/doomed")).status_code == 204

    broker.kill9()
    broker.restart()
    rest = broker.rest
    assert "doomed" not in rest.http.get("/topics").json()
    assert not broker.table_path("doomed").exists()
    assert rest.offsets("cold", 0)[1] == 10
    assert [decode_binary(r)["value"] for r in rest.fetch_range("cold", 0, 0, 10)] == [
        f"c{i}".encode() for i in range(10)]
    resp = rest.produce_binary("cold", [{"value": b"c10"}], acks="1")
    assert resp.status_code == 200 and resp.json()["offsets"][0]["offset"] == 10, resp.text
    table = wait_for_table(broker.table_path("cold"), {0: 11})
    rows = rows_by_offset(table)
    assert [rows[(0, o)]["value"] for o in range(11)] == [f"c{i}".encode() for i in range(11)]
    assert table.num_rows == 11


def test_kill9_during_topic_churn_leaves_a_consistent_catalog(broker_factory):
    """Creates and deletes are cut by a crash at an arbitrary point: after restart every
    acknowledged create exists and works, every acknowledged delete is gone, and a topic
    caught in the middle is either fully there (usable, tiered) or fully absent (its name
    can be created again)."""
    broker = broker_factory()
    created: list[str] = []
    deleted: list[str] = []
    deleting: list[str] = []  # deletes sent; the last may be cut by the crash either side
    attempted: list[str] = []
    stop = threading.Event()

    def churn():
        with httpx.Client(base_url=broker.url, timeout=30.0) as http:
            cluster = http.get("/v3/clusters").json()["data"][0]["cluster_id"]
            for i in itertools.count():
                if stop.is_set():
                    return
                name = f"churn-{i}"
                attempted.append(name)
                try:
                    resp = http.post(f"/v3/clusters/{cluster}/topics", json={
                        "topic_name": name, "partitions_count": 2,
                        "configs": [{"name": "table.flush.interval.ms", "value": "20"}]})
                    if resp.status_code != 201:
                        return
                    created.append(name)
                    if i % 3 == 2:
                        victim = created[-2]
                        deleting.append(victim)
                        if http.delete(f"/v3/clusters/{cluster}/topics/{victim}").status_code == 204:
                            deleted.append(victim)
                except httpx.TransportError:
                    return

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    wait_until(lambda: len(created) >= 12 or not worker.is_alive(), "12 topics created", 120)
    broker.kill9()
    stop.set()
    worker.join(60)
    assert len(created) >= 12, "topic creation failed before the crash"

    broker.restart()
    rest = broker.rest
    listed = set(rest.http.get("/topics").json())
    for name in set(created) - set(deleting):
        assert name in listed, f"acknowledged topic {name} is gone after the crash"
    for name in deleted:
        assert name not in listed, f"deleted topic {name} came back after the crash"
        assert not broker.table_path(name).exists(), f"deleted topic {name} left its table behind"
    for name in attempted:
        if name not in listed:
            resp = rest.create_topic(name, 2, configs={"table.flush.interval.ms": "20"})
            assert resp.status_code == 201, f"{name} can not be created again: {resp.status_code} {resp.text}"
    for name in set(attempted):
        assert rest.partition_ids(name) == [0, 1]
        resp = rest.produce_binary(name, [{"value": name.encode(), "partition": p} for p in (0, 1)], acks="1")
        assert resp.status_code == 200, f"{name}: {resp.text}"
        end = rest.end_offsets(name)
        table = wait_for_table(broker.table_path(name), end)
        rows = rows_by_offset(table)
        assert {rows[(p, end[p] - 1)]["value"] for p in (0, 1)} == {name.encode()}
