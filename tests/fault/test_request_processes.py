"""Request processes (issue 18): ``laketail.request.processes=2`` serves one port from
two processes, each leading its share of the partitions.

Real processes on one port (``SO_REUSEPORT``), a fresh connection per request wherever
the process that answers matters (the kernel picks a process per connection), real
``kill -9``. What must hold: a connection's keyless records stay on partitions the
process it reached leads; keyed records, explicit partitions, fetches and consumer
groups work from either process; to clients the two are one broker (broker 0, the
configured ``broker.id``, in every view of brokers and partitions); a killed request
process is started again and loses nothing; the group stops on SIGTERM, dies with its
first process and starts again on the same data. Which process leads what is read from
the cluster's ``_system`` tables, where the two stay distinct members.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from conftest import WITH_TIER_CHILD, BrokerProcess, running_broker

from laketail.cluster.store import ClusterStore
from laketail.partitioner import partition_for_key
from laketail.request_processes import PROCESS_ID_STRIDE
from tests.integration.support import child_processes, process_alive, wait_until

V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
#: Two request processes, each with its tier child: the production layout under test.
PROCESSES = {"LAKETAIL_REQUEST_PROCESSES": "2", **WITH_TIER_CHILD}
#: the cluster member ids of the two processes of broker 0
FIRST, SECOND = 0, PROCESS_ID_STRIDE


def _group(broker_factory):
    broker = broker_factory(env=PROCESSES)
    _wait_for_both(broker)
    return broker


@pytest.fixture(scope="module")
def processes_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One two-process broker for the tests that kill, freeze and count nothing of it
    (each adds topics of its own): a start is two request processes and two tier
    children, done once for them instead of once per test."""
    for broker in running_broker(tmp_path_factory, "request-processes", PROCESSES):
        _wait_for_both(broker)
        yield broker


def _wait_for_both(broker) -> None:
    """Until both processes are live cluster members, while every connection sees one
    broker, the configured broker.id."""

    def listed() -> bool:
        alive = {b for b, r in ClusterStore(str(broker.data_dir)).brokers().items() if r.alive}
        return alive == {FIRST, SECOND} and all(
            _fresh(broker, "GET", "/brokers").json().get("brokers") == [FIRST] for _ in range(4))

    wait_until(listed, "both request processes to be live members, and GET /brokers to list broker 0 once")


def _fresh(broker, method: str, path: str, **kwargs) -> httpx.Response:
    """One request on a connection of its own (so on whichever process the kernel picks)."""
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        return client.request(method, path, **kwargs)


def _leaders(broker, topic: str) -> dict[int, int]:
    """The request process (member id) leading each partition, from the ``_system`` tables."""
    return {p: reg.leader for (t, p), reg in ClusterStore(str(broker.data_dir)).partitions().items() if t == topic}


def _shown_leaders(broker, topic: str) -> dict[int, int]:
    """Each partition's leader as a client sees it (GET /topics/{t}/partitions)."""
    resp = _fresh(broker, "GET", f"/topics/{topic}/partitions", headers={"Accept": V2})
    assert resp.status_code == 200, resp.text
    return {p["partition"]: p["leader"] for p in resp.json()}


def _topic(broker, name: str, partitions: int) -> dict[int, int]:
    """Create ``name``; its leading processes once the metadata names a leader for every
    partition (the broker, whichever process leads)."""
    resp = broker.rest.create_topic(name, partitions)
    assert resp.status_code in (200, 201), resp.text
    def led() -> dict[int, int] | None:
        if _shown_leaders(broker, name) != {p: FIRST for p in range(partitions)}:
            return None
        ls = _leaders(broker, name)
        return ls if set(ls.values()) <= {FIRST, SECOND} and len(ls) == partitions else None

    return wait_until(led, f"leaders for {name}")


def _produce(client: httpx.Client, topic: str, records: list[dict], partition: int | None = None) -> list[dict]:
    path = f"/topics/{topic}" if partition is None else f"/topics/{topic}/partitions/{partition}"
    body = {"records": [{k: base64.b64encode(v).decode() for k, v in r.items()} for r in records]}
    resp = client.post(path, json=body, headers={"Content-Type": BINARY})
    assert resp.status_code == 200, resp.text
    offsets = resp.json()["offsets"]
    assert all(o.get("error_code") is None for o in offsets), resp.text
    return offsets


def _values(broker, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record of the partition, ``(offset, value)``, fetched on fresh connections."""
    out: list[tuple[int, bytes]] = []
    while True:
        resp = _fresh(broker, "GET", f"/topics/{topic}/partitions/{partition}/records",
                      params={"offset": len(out), "timeout": 0}, headers={"Accept": BINARY})
        assert resp.status_code == 200, resp.text
        batch = resp.json()
        if not batch:
            return out
        out.extend((r["offset"], base64.b64decode(r["value"])) for r in batch)


def _request_process(broker, not_in: frozenset[int] = frozenset()) -> int:
    def one() -> int | None:
        kids = [k for k in child_processes(broker.proc.pid, b"--request-process") if k not in not_in]
        return kids[0] if len(kids) == 1 else None

    return wait_until(one, f"the second request process of {broker.proc.pid}")


def test_a_connections_keyless_records_stay_on_the_partitions_its_process_leads(processes_broker):
    broker = processes_broker
    leaders = _topic(broker, "keyless", 4)
    assert sorted(leaders.values()) == [FIRST, FIRST, SECOND, SECOND], leaders  # each process leads two
    reached = []
    sent: dict[bytes, int] = {}
    for c in range(24):
        # One client, one connection at a time: a new one only after an answer that said
        # Connection: close (the processes moving a connection to even their counts).
        connections: list[set[int]] = [set()]
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            for i in range(6):
                value = f"c{c}-r{i}".encode()
                resp = client.post("/topics/keyless", headers={"Content-Type": BINARY},
                                   json={"records": [{"value": base64.b64encode(value).decode()}]})
                assert resp.status_code == 200, resp.text
                (offset,) = resp.json()["offsets"]
                connections[-1].add(offset["partition"])
                sent[value] = offset["partition"]
                if resp.headers.get("connection", "").lower() == "close":
                    connections.append(set())
        for partitions in filter(None, connections):
            owners = {leaders[p] for p in partitions}
            assert len(owners) == 1, f"client {c}: one connection wrote to {sorted(partitions)}, led by {owners}"
            reached.append(owners.pop())
    assert set(reached) == {FIRST, SECOND}, f"{len(reached)} connections all reached process {reached[0]}"
    got = {}
    for p in range(4):
        records = _values(broker, "keyless", p)
        assert [o for o, _ in records] == list(range(len(records)))
        got.update({v: p for _, v in records})
    assert got == sent  # every record once, on the partition its answer named


def test_a_partition_is_served_as_soon_as_the_metadata_names_its_leader(processes_broker):
    """Once GET /topics/{t}/partitions names a leader, a produce and a fetch of the
    partition succeed from either process: a process the image names leader waits for
    its replica manager to take the partition up (it answered NOT_LEADER_OR_FOLLOWER
    naming itself before, about once in a few hundred such requests)."""
    broker = processes_broker
    for t in range(8):
        name = f"fresh-{t}"
        _topic(broker, name, 4)  # returns as soon as the metadata names every leader
        for p in range(4):
            with httpx.Client(base_url=broker.url, timeout=30) as client:
                (offset,) = _produce(client, name, [{"value": b"first"}], partition=p)
            assert offset["offset"] == 0
            assert _values(broker, name, p) == [(0, b"first")]


def test_keyed_records_explicit_partitions_and_groups_work_from_either_process(processes_broker):
    broker = processes_broker
    _topic(broker, "routed", 4)
    expected: dict[int, list[bytes]] = {p: [] for p in range(4)}
    for i in range(24):  # a connection each: half of them reach the process that leads none of these
        key, value = f"key-{i}".encode(), f"keyed-{i}".encode()
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            (keyed,) = _produce(client, "routed", [{"key": key, "value": value}])
            assert keyed["partition"] == partition_for_key(key, 4)
            expected[keyed["partition"]].append(value)
            (explicit,) = _produce(client, "routed", [{"value": f"explicit-{i}".encode()}], partition=i % 4)
            assert explicit["partition"] == i % 4
            expected[i % 4].append(f"explicit-{i}".encode())
    for p in range(4):
        assert [v for _, v in _values(broker, "routed", p)] == expected[p]

    # A v2 consumer through fresh connections: the instance lives where the coordinator runs.
    created = _fresh(broker, "POST", "/consumers/g1", json={"name": "c1", "auto.offset.reset": "earliest"},
                     headers={"Content-Type": V2})
    assert created.status_code == 200, created.text
    base = "/consumers/g1/instances/c1"
    resp = _fresh(broker, "POST", base + "/subscription", json={"topics": ["routed"]}, headers={"Content-Type": V2})
    assert resp.status_code == 204, resp.text
    seen: list[bytes] = []

    def consumed() -> bool:
        resp = _fresh(broker, "GET", base + "/records", params={"timeout": 200}, headers={"Accept": BINARY})
        assert resp.status_code == 200, resp.text
        seen.extend(base64.b64decode(r["value"]) for r in resp.json())
        return len(seen) >= 48

    wait_until(consumed, "the consumer to read all 48 records")
    assert sorted(seen) == sorted(v for vs in expected.values() for v in vs)
    resp = _fresh(broker, "POST", base + "/offsets", headers={"Content-Type": V2})
    assert resp.status_code == 200, resp.text
    committed = _fresh(broker, "GET", base + "/offsets", headers={"Content-Type": V2},
                       content=b'{"partitions": [' + b",".join(
                           b'{"topic": "routed", "partition": %d}' % p for p in range(4)) + b"]}")
    assert committed.status_code == 200, committed.text
    assert {o["partition"]: o["offset"] for o in committed.json()["offsets"]} == {
        p: len(vs) for p, vs in expected.items()}


def _handoff_counters(broker) -> dict[str, dict[str, float]]:
    """Per process (its broker id), its hand-offs ``sent`` and ``received`` and its
    ``http`` forwards, scraped from /metrics on fresh connections until both answered."""
    seen: dict[str, dict[str, float]] = {}

    def both() -> bool:
        text = _fresh(broker, "GET", "/metrics").text
        found = dict(re.findall(r'laketail_request_process_handoffs_total\{process="(\d+)",role="sent"\} (\S+)', text))
        ((process, sent),) = found.items()
        (received,) = re.findall(
            rf'laketail_request_process_handoffs_total\{{process="{process}",role="received"\}} (\S+)', text)
        (http,) = re.findall(r"^laketail_produce_forwards_http_total (\S+)", text, re.M)
        seen[process] = {"sent": float(sent), "received": float(received), "http": float(http)}
        return len(seen) == 2

    wait_until(both, "a scrape of /metrics from each process")
    return seen


def _since(before: dict[str, dict[str, float]], now: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each process's counters counted from ``before`` on."""
    return {p: {k: v - before[p][k] for k, v in c.items()} for p, c in now.items()}


def test_keyed_records_are_parsed_once_and_handed_to_the_leading_process(processes_broker):
    """A keyed batch of 100 records over 4 partitions, two led by each process: the
    process the connection reached appends its two and hands the other two to its
    sibling in one local hand-off (never an HTTP forward); every record lands on its
    key's partition, the offsets dense."""
    broker = processes_broker
    leaders = _topic(broker, "handed", 4)
    assert sorted(leaders.values()) == [FIRST, FIRST, SECOND, SECOND], leaders
    expected: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(4)}
    before = _handoff_counters(broker)  # the shared broker's earlier tests handed off too
    requests = 10
    for r in range(requests):  # a connection each: both processes take some
        records = [{"key": f"key-{r}-{i}".encode(), "value": f"value-{r}-{i}".encode()} for i in range(100)]
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            offsets = _produce(client, "handed", records)
        assert len({o["partition"] for o in offsets}) == 4
        for record, offset in zip(records, offsets):
            assert offset["partition"] == partition_for_key(record["key"], 4)
            expected[offset["partition"]].append((offset["offset"], record["value"]))
    counters = _since(before, _handoff_counters(broker))
    assert sum(c["sent"] for c in counters.values()) == requests, counters  # one per request
    assert sum(c["received"] for c in counters.values()) == requests, counters
    for p in range(4):  # explicit partitions too, to either process
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            (offset,) = _produce(client, "handed", [{"value": f"explicit-{p}".encode()}], partition=p)
        expected[p].append((offset["offset"], f"explicit-{p}".encode()))
    for p in range(4):
        stored = _values(broker, "handed", p)
        assert [o for o, _ in stored] == list(range(len(stored)))  # dense
        assert stored == sorted(expected[p])
    counters = _since(before, _handoff_counters(broker))
    assert all(c["http"] == 0 for c in counters.values()), counters
    assert sum(c["sent"] for c in counters.values()) == sum(c["received"] for c in counters.values()), counters
    _assert_one_broker(broker, "handed", leaders)
    # one broker cannot hold two copies: the processes are not brokers of their own
    resp = broker.rest.create_topic("twice", 1, replication_factor=2)
    assert resp.status_code == 400 and resp.json()["error_code"] == 40002, resp.text


def _assert_one_broker(broker, topic: str, leaders: dict[int, int]) -> None:
    """Whichever process answers, the two are broker 0 to a client: listed once (v2, v3,
    the console), the second's member id no broker's (404), and broker 0 the leader and
    the one in-sync replica of every partition, those the second process leads included.
    Asked on connections until each process has answered all of it."""
    rest = broker.rest
    theirs = next(p for p, b in leaders.items() if b == SECOND)
    answered: set[str] = set()

    def round_on_one_connection() -> bool:
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            responses = []

            def get(path: str, **kwargs) -> httpx.Response:
                responses.append(resp := client.get(path, **kwargs))
                return resp

            (process,) = re.findall(r'laketail_request_process_handoffs_total\{process="(\d+)",role="sent"\}',
                                    get("/metrics").text)
            assert get("/brokers", headers={"Accept": V2}).json() == {"brokers": [FIRST]}
            assert [b["broker_id"] for b in get(rest.v3("/brokers")).json()["data"]] == [FIRST]
            assert get(rest.v3(f"/brokers/{FIRST}")).json()["broker_id"] == FIRST
            unknown = get(rest.v3(f"/brokers/{SECOND}"))
            assert unknown.status_code == 404 and unknown.json()["error_code"] == 40408, unknown.text
            assert get(rest.v3()).json()["controller"]["related"].endswith(f"/brokers/{FIRST}")
            for p in get(rest.v3(f"/topics/{topic}/partitions")).json()["data"]:
                assert p["leader"]["related"].endswith(f"/partitions/{p['partition_id']}/replicas/{FIRST}"), p
            replicas = get(rest.v3(f"/topics/{topic}/partitions/{theirs}/replicas")).json()["data"]
            assert [(r["broker_id"], r["is_leader"], r["is_in_sync"]) for r in replicas] == [(FIRST, True, True)]
            assert get(rest.v3(f"/topics/{topic}/partitions/{theirs}/replicas/{SECOND}")).status_code == 404
            held = get(rest.v3(f"/brokers/{FIRST}/partition-replicas")).json()["data"]
            assert {r["partition_id"] for r in held if r["topic_name"] == topic} == set(leaders)
            configs = get(rest.v3(f"/brokers/{FIRST}/configs")).json()["data"]
            assert {c["name"]: c["value"] for c in configs}["broker.id"] == str(FIRST)
            assert get(f"/topics/{topic}/partitions/{theirs}", headers={"Accept": V2}).json()["replicas"] == [
                {"broker": FIRST, "leader": True, "in_sync": True}]
            overview = get("/v1/console/overview").json()
            assert overview["broker_id"] == FIRST and overview["controller_id"] == FIRST
            assert overview["brokers"] == [{"broker_id": FIRST, "url": broker.url, "alive": True, "controller": True}]
            rows = get(f"/v1/console/topics/{topic}/partitions").json()["data"]
            assert {(r["leader"], tuple(r["replicas"]), tuple(r["isr"])) for r in rows} == {(FIRST, (FIRST,), (FIRST,))}
            # the same process answered all of it unless one answer moved the connection
            if all(r.headers.get("connection", "").lower() != "close" for r in responses[:-1]):
                answered.add(process)
        return answered == {str(FIRST), str(SECOND)}

    wait_until(round_on_one_connection, "both processes to answer as broker 0")


@pytest.mark.fault
def test_a_fetch_is_served_from_the_leading_processs_files_while_that_process_is_frozen(broker_factory):
    """A fetch reaching the process that does not lead the partition reads the leader's
    segments itself: with the leader stopped (SIGSTOP), a forwarded fetch could not be
    answered, yet every connection that reached the other process gets the records, up
    to the high watermark and no further. A long poll at the end is still forwarded.
    (The session timeout is long so that the frozen process stays the partition's leader.)"""
    broker = broker_factory(env={**PROCESSES, "LAKETAIL_BROKER_SESSION_TIMEOUT_MS": "600000"})
    _wait_for_both(broker)
    leaders = _topic(broker, "frozen", 2)
    theirs = next(p for p, b in leaders.items() if b == SECOND)
    sent = [f"r{i}".encode() * 30 for i in range(40)]
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        for i in range(0, 40, 10):
            _produce(client, "frozen", [{"value": v} for v in sent[i:i + 10]], partition=theirs)
    records_path = f"/topics/frozen/partitions/{theirs}/records"
    child = _request_process(broker)
    os.kill(child, signal.SIGSTOP)
    try:
        answered: list[httpx.Client] = []
        for _ in range(40):
            client = httpx.Client(base_url=broker.url, timeout=2, headers={"Accept": BINARY})
            try:
                resp = client.get(records_path, params={"offset": 5, "max_records": 100})
            except httpx.TimeoutException:
                client.close()  # this connection reached the frozen process
                continue
            answered.append(client)
            assert resp.status_code == 200, resp.text
            records = resp.json()
            assert [r["offset"] for r in records] == list(range(5, 40))
            assert [base64.b64decode(r["value"]) for r in records] == sent[5:]
            if len(answered) == 3:
                break
        assert len(answered) == 3, "no connection reached the running process in 40 tries"
        try:  # the same connection, so the same process: a long poll at the end needs the leader
            answered[0].get(records_path, params={"offset": 40, "timeout": 500})
            raise AssertionError("a fetch at the high watermark was answered without its leader")
        except httpx.TimeoutException:
            pass
        for client in answered:
            client.close()
    finally:
        os.kill(child, signal.SIGCONT)
    assert [v for _, v in _values(broker, "frozen", theirs)] == sent

    # Deleted and created again under the same name: no process serves the old records
    # (the one that read the old log's files must notice they are gone).
    resp = _fresh(broker, "DELETE", broker.rest.v3("/topics/frozen"))
    assert resp.status_code == 204, resp.text
    wait_until(lambda: all(_fresh(broker, "GET", "/topics/frozen", headers={"Accept": V2}).status_code == 404
                           for _ in range(6)), "every process to forget the deleted topic")
    theirs = next(p for p, b in _topic(broker, "frozen", 2).items() if b == SECOND)
    again = [f"again-{i}".encode() for i in range(7)]
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        _produce(client, "frozen", [{"value": v} for v in again], partition=theirs)
    for _ in range(12):  # fresh connections: both processes, each reading its own way
        assert [v for _, v in _values(broker, "frozen", theirs)] == again


def _board(broker) -> list[tuple[int, int]]:
    """The request processes' connection board: (pid, client connections) per process."""
    raw = (broker.data_dir / "request-processes" / "broker-0.connections").read_bytes()
    return [struct.unpack_from("<qq", raw, 16 * k) for k in range(2)]


def test_a_processs_extra_connections_move_until_each_holds_its_share(broker_factory):
    """Eight keep-alive clients, as wrk's eight connections: however the kernel first
    spreads them, a process holding more than half answers with Connection: close until
    each process holds four. The clients notice nothing but a new connection."""
    broker = _group(broker_factory)
    child = _request_process(broker)
    clients = [httpx.Client(base_url=broker.url, timeout=30) for _ in range(8)]
    try:
        seen = []
        for _ in range(200):
            for client in clients:
                resp = client.get("/brokers")
                assert resp.status_code == 200 and resp.json()["brokers"] == [FIRST]
            seen.append([count for _, count in _board(broker)])
            if seen[-1] == [4, 4]:
                break
        assert seen[-1] == [4, 4], f"connections per process after {len(seen)} rounds: {seen[:3]} ... {seen[-3:]}"
        assert [pid for pid, _ in _board(broker)] == [broker.proc.pid, child]
    finally:
        for client in clients:
            client.close()
    wait_until(lambda: [count for _, count in _board(broker)] == [0, 0], "the closed connections to leave the board")


@pytest.mark.fault
def test_a_killed_request_process_is_started_again_and_loses_nothing(broker_factory):
    broker = _group(broker_factory)
    leaders = _topic(broker, "survive", 2)
    theirs = next(p for p, b in leaders.items() if b == SECOND)  # the partition the second process leads
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        for p in (0, 1):
            _produce(client, "survive", [{"value": f"before-{p}-{i}".encode()} for i in range(50)], partition=p)
    child = _request_process(broker)
    tier_children = child_processes(child, b"laketail.storage.tier_child")
    assert len(tier_children) == 1
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: not process_alive(tier_children[0]), "the killed process's tier child to die with it")
    replacement = _request_process(broker, frozenset({child}))
    assert replacement != child

    def produced_again() -> bool:
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            resp = client.post(f"/topics/survive/partitions/{theirs}", headers={"Content-Type": BINARY},
                               json={"records": [{"value": base64.b64encode(b"after").decode()}]})
        return resp.status_code == 200 and resp.json()["offsets"][0].get("error_code") is None

    wait_until(produced_again, f"partition {theirs} to take records again after its process was killed")
    for p in (0, 1):
        values = [v for _, v in _values(broker, "survive", p)]
        befores = [f"before-{p}-{i}".encode() for i in range(50)]
        assert values[:50] == befores and set(values[50:]) <= {b"after"}
    assert _leaders(broker, "survive") == leaders  # the same process leads it again


@pytest.mark.fault
def test_the_processes_stop_together_die_with_the_first_and_start_again(broker_factory):
    broker = _group(broker_factory)
    _topic(broker, "lifecycle", 2)
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        for p in (0, 1):
            _produce(client, "lifecycle", [{"value": f"one-{p}".encode()}], partition=p)
    child = _request_process(broker)
    os.kill(broker.proc.pid, signal.SIGKILL)  # the first process alone: the second is in a session of its own
    broker.proc.wait()
    wait_until(lambda: not process_alive(child), "the second process to die with the first")

    broker.start()
    _wait_for_both(broker)
    child = _request_process(broker)

    def both_partitions_answer() -> bool:
        return all(len(_values(broker, "lifecycle", p)) == 1 for p in (0, 1))

    wait_until(both_partitions_answer, "both partitions to be served again")
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        for p in (0, 1):
            _produce(client, "lifecycle", [{"value": f"two-{p}".encode()}], partition=p)
    assert broker.stop() is not None  # SIGTERM: an orderly stop of both, without SIGKILL
    assert not process_alive(child)
    assert f"Finished server process [{child}]" in broker.output()  # the second one shut down, not killed

    broker.start()
    _wait_for_both(broker)
    wait_until(lambda: all(len(_values(broker, "lifecycle", p)) == 2 for p in (0, 1)),
               "both partitions with both records after an orderly restart")
    for p in (0, 1):
        assert [v for _, v in _values(broker, "lifecycle", p)] == [f"one-{p}".encode(), f"two-{p}".encode()]


def _serve_error(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
    environment.update(env or {})
    done = subprocess.run([sys.executable, "-m", "laketail.cli", "serve", "--data", str(tmp_path / "d"), *args],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stderr
    return done.stderr


@pytest.mark.subprocess
def test_serve_refuses_request_processes_it_cannot_split(tmp_path):
    assert "needs fixed ports" in _serve_error(tmp_path, "--processes", "2", "--port", "0")
    err = _serve_error(tmp_path, "--processes", "2", env={
        "LAKETAIL_LISTENERS": "PLAINTEXT://127.0.0.1:8082,OTHER://127.0.0.1:0",
        "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "OTHER:PLAINTEXT", "LAKETAIL_INTER_BROKER_LISTENER_NAME": "OTHER"})
    assert "needs fixed ports" in err, err
    assert "--processes" in _serve_error(tmp_path, "--processes", "0")
    assert "laketail.request.processes=99" in _serve_error(tmp_path, env={"LAKETAIL_REQUEST_PROCESSES": "99"})
