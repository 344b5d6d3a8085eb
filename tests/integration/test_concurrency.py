"""Many producers at once get dense, unique offsets; a fetch parked at the log end
(long poll) wakes up with the record that arrives."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from .support import decode_binary, wait_until

pytestmark = pytest.mark.integration

THREADS = 8
REQUESTS_PER_THREAD = 40
#: A parked fetch's timeout: far longer than the test needs, so a fetch that returns
#: empty was not woken (the test then fails on content, never on time).
LONG_POLL_MS = 60_000
#: Head start given to a fetch before the record is produced. Correctness does not
#: depend on it: if the produce wins the race the fetch finds the record anyway.
HEAD_START_S = 0.5


def _produce_many(broker, topic: str, thread: int, partitions: int) -> list[tuple[int, int, bytes]]:
    """Send REQUESTS_PER_THREAD requests of 1-3 records; return (partition, offset,
    value) of every acknowledged record."""
    acked = []
    with broker.new_client() as rest:
        for i in range(REQUESTS_PER_THREAD):
            count = 1 + (thread + i) % 3
            records = [
                {"value": f"t{thread}-r{i}-{j}".encode(), "partition": (thread + i + j) % partitions}
                for j in range(count)
            ]
            resp = rest.produce_binary(topic, records, acks="1" if i % 2 else "all")
            assert resp.status_code == 200, resp.text
            offsets = resp.json()["offsets"]
            assert len(offsets) == count, offsets
            for record, entry in zip(records, offsets):
                assert entry["partition"] == record["partition"], entry
                acked.append((entry["partition"], entry["offset"], record["value"]))
            # Within one request, records of one partition get consecutive offsets.
            for p in {r["partition"] for r in records}:
                mine = [e["offset"] for r, e in zip(records, offsets) if r["partition"] == p]
                assert mine == list(range(mine[0], mine[0] + len(mine))), offsets
    return acked


@pytest.mark.parametrize("partitions", [1, 3])
def test_concurrent_producers_get_dense_unique_offsets(broker, make_topic, partitions):
    topic = make_topic(partitions=partitions)
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(_produce_many, broker, topic, t, partitions) for t in range(THREADS)]
        acked = [a for f in futures for a in f.result()]

    rest = broker.rest
    by_partition: dict[int, dict[int, bytes]] = {}
    for p, offset, value in acked:
        assert offset not in by_partition.setdefault(p, {}), f"offset {offset} of partition {p} given twice"
        by_partition[p][offset] = value
    assert rest.end_offsets(topic) == {p: len(by_partition.get(p, {})) for p in range(partitions)}
    for p, values in by_partition.items():
        assert sorted(values) == list(range(len(values)))
        fetched = {r["offset"]: decode_binary(r)["value"] for r in rest.fetch_range(topic, p, 0, len(values))}
        assert fetched == values


class _ParkedFetch(threading.Thread):
    """A fetch at ``offset`` with a long timeout, run in its own thread."""

    def __init__(self, broker, topic: str, partition: int, offset: int) -> None:
        super().__init__(daemon=True)
        self.args_ = (broker, topic, partition, offset)
        self.response = None
        self.error: BaseException | None = None

    def run(self) -> None:
        broker, topic, partition, offset = self.args_
        try:
            with broker.new_client() as rest:
                self.response = rest.fetch(
                    topic, partition, offset, timeout_ms=LONG_POLL_MS, http_timeout_s=LONG_POLL_MS / 1000 + 60
                )
        except BaseException as exc:  # reported by result()
            self.error = exc

    def result(self) -> list[dict]:
        self.join(LONG_POLL_MS / 1000 + 90)
        assert not self.is_alive(), "the parked fetch never returned"
        if self.error is not None:
            raise self.error
        assert self.response.status_code == 200, self.response.text
        return [decode_binary(r) for r in self.response.json()]


def test_long_poll_wakes_when_a_record_arrives(broker, topic):
    fetch = _ParkedFetch(broker, topic, 0, 0)
    fetch.start()
    time.sleep(HEAD_START_S)
    resp = broker.rest.produce_binary(topic, [{"key": b"k", "value": b"wake up"}])
    assert resp.status_code == 200, resp.text
    records = fetch.result()
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [(0, b"k", b"wake up")]


def test_long_poll_past_existing_records_wakes_only_for_its_partition(broker, make_topic):
    topic = make_topic(partitions=2)
    rest = broker.rest
    assert rest.produce_binary(topic, [{"value": b"old"}] * 3, partition=0).status_code == 200
    fetch = _ParkedFetch(broker, topic, 0, 3)
    fetch.start()
    time.sleep(HEAD_START_S)
    assert rest.produce_binary(topic, [{"value": b"elsewhere"}], partition=1).status_code == 200
    assert rest.produce_binary(topic, [{"value": b"here"}], partition=0).status_code == 200
    records = fetch.result()
    assert [(r["partition"], r["offset"], r["value"]) for r in records] == [(0, 3, b"here")]


def test_every_parked_fetch_wakes(broker, topic):
    fetches = [_ParkedFetch(broker, topic, 0, 0) for _ in range(3)]
    for f in fetches:
        f.start()
    time.sleep(HEAD_START_S)
    assert broker.rest.produce_binary(topic, [{"value": b"for all"}]).status_code == 200
    for f in fetches:
        assert [r["value"] for r in f.result()] == [b"for all"]


def test_long_poll_that_times_out_returns_an_empty_list(broker, topic):
    resp = broker.rest.fetch(topic, 0, 0, timeout_ms=200)
    assert resp.status_code == 200, resp.text
    assert resp.json() == []


def test_racing_creates_of_one_name_make_one_topic(broker):
    import uuid

    name = f"race-{uuid.uuid4().hex[:10]}"

    def create(_):
        with broker.new_client() as rest:
            return rest.create_topic(name, 2)

    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(create, range(6)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [400] * 5, [(r.status_code, r.text[:200]) for r in responses]
    for r in responses:
        if r.status_code == 400:  # Confluent's v3: 400 with its Kafka bad-request code
            assert r.json()["error_code"] == 40002 and "TOPIC_ALREADY_EXISTS" in r.json()["message"]
    assert broker.rest.partition_ids(name) == [0, 1]


def test_readers_racing_tiering_and_hot_segment_deletion(broker, make_topic):
    """Fetches from offset 0 while records are appended, tiered and their hot segments
    deleted must always answer, with the right records, from whichever tier has them."""
    topic = make_topic(configs={"segment.bytes": "14", "local.retention.ms": "0", "table.flush.interval.ms": "20"})
    total = 150
    done = threading.Event()
    problems: list[str] = []

    def read_loop():
        try:
            read_until_done()
        except Exception as exc:  # reported by the test, not as a thread warning
            problems.append(repr(exc))

    def read_until_done():
        with broker.new_client() as rest:
            while not problems:
                end = rest.offsets(topic, 0)[1]
                offset = 0
                while offset < end:
                    resp = rest.fetch(topic, 0, offset, max_records=37)
                    if resp.status_code != 200:
                        problems.append(f"fetch at {offset}: {resp.status_code} {resp.text[:300]}")
                        return
                    batch = resp.json()
                    if not batch:
                        problems.append(f"empty fetch at {offset} below end {end}")
                        return
                    for r in batch:
                        if r["offset"] != offset or decode_binary(r)["value"] != f"r{offset}".encode():
                            problems.append(f"fetch at {offset} skipped to or returned a wrong record: {r}")
                            return
                        offset += 1
                if done.is_set():
                    return

    readers = [threading.Thread(target=read_loop, daemon=True) for _ in range(3)]
    for t in readers:
        t.start()
    with broker.new_client() as rest:
        for i in range(total):
            resp = rest.produce_binary(topic, [{"value": f"r{i}".encode()}], acks="1")
            assert resp.status_code == 200, resp.text
            if problems:
                break
    done.set()
    for t in readers:
        t.join(120)
    assert not problems, problems[:3]


def test_deleting_a_topic_under_producers_and_fetchers(broker_factory, make_topic):
    """Requests racing a delete get a 200 (before) or UNKNOWN_TOPIC_OR_PARTITION (after;
    40401, or 40402 for one caught between its topic and partition lookups), never a
    server error; afterwards the name can be created again, empty. (With Kafka's default
    auto.create.topics.enable the producers would create the topic again: off here.)"""
    broker = broker_factory(env={"LAKETAIL_AUTO_CREATE_TOPICS_ENABLE": "false"})
    topic = make_topic(partitions=2, broker=broker)
    stop = threading.Event()
    seen: list[tuple[int, int | None]] = []

    def hammer(kind: str):
        with broker.new_client() as rest:
            while not stop.is_set():
                if kind == "produce":
                    resp = rest.produce_binary(topic, [{"value": b"x", "partition": len(seen) % 2}], acks="1")
                else:
                    resp = rest.fetch(topic, 0, 0, max_records=10)
                body = resp.json() if resp.headers.get("content-type", "").endswith("json") else None
                code = body.get("error_code") if isinstance(body, dict) else None
                seen.append((resp.status_code, code))

    workers = [threading.Thread(target=hammer, args=(k,), daemon=True) for k in ("produce", "produce", "fetch")]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: len(seen) >= 30, "some traffic before the delete")
        resp = broker.rest.http.delete(broker.rest.v3(f"/topics/{topic}"))
        assert resp.status_code == 204, resp.text
        wait_until(lambda: seen[-3:] and all(s == (404, 40401) for s in seen[-3:]), "requests to see the topic gone")
    finally:
        stop.set()
        for w in workers:
            w.join(60)
    bad = [s for s in seen if s[0] != 200 and s not in ((404, 40401), (404, 40402))]
    assert not bad, f"requests racing a delete got {sorted(set(bad))}"
    assert broker.rest.create_topic(topic, 1).status_code == 201
    assert broker.rest.end_offsets(topic) == {0: 0}


def test_one_request_with_ten_thousand_records(broker, topic):
    rest = broker.rest
    records = [{"key": f"{i}".encode() if i % 2 else None, "value": f"v{i}".encode()} for i in range(10_000)]
    resp = rest.produce_binary(topic, records)
    assert resp.status_code == 200, resp.text
    assert [o["offset"] for o in resp.json()["offsets"]] == list(range(10_000))
    fetched = rest.fetch_range(topic, 0, 0, 10_000)
    assert [decode_binary(r)["value"] for r in fetched] == [r["value"] for r in records]
