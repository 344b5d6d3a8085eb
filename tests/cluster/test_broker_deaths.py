"""Brokers dying under a replicated topic, on the in-process cluster
(``tests/cluster/harness.py``), through the REST routes every client uses.

These were real-process tests in tests/replication (three ``laketail serve`` processes
per test, SIGKILL and SIGSTOP, a minute or more each); the properties are the
cluster's decisions, which the harness reaches in milliseconds: a broker "killed" here
reaches no one, is reached by no one and runs no round (``Cluster.stop``), a frozen one
is the same until ``Cluster.resume``, and the manual clock is moved past the session
timeout instead of waited for. The real-process SIGKILL proofs that stay are listed in
tests/README.md (acks=all through repeated leader kills, an unclean election with the
old leader restarted from its files).

* a replication factor above the live brokers is refused, and nothing is created;
* a dead follower leaves the ISR (in every broker's metadata and in
  ``_system/replicas``), acks=all goes on with min.insync.replicas, and a second dead
  follower makes acks=all NOT_ENOUGH_REPLICAS (nothing written) while acks=1 succeeds;
* unclean.leader.election.enable=false: a partition whose only ISR member died stays
  offline (leader -1, LEADER_NOT_AVAILABLE) for session after session, and leads again
  with every acknowledged record when that member returns;
* unclean.leader.election.enable=true: the out-of-sync replica takes over; the old
  leader, restarted, gives up its divergent suffix and serves the new leader's log;
* a produce whose records span a dead partition and a live one is answered per record
  (v2, v3 and Arrow), the live partition's records written once.
"""

from __future__ import annotations

import base64
from typing import Any, Awaitable, Callable

import httpx
import orjson
import pyarrow as pa
from deltalake import DeltaTable

from tests.cluster.harness import HEARTBEAT_MS, SESSION_MS, Cluster, run_three
from tests.replication.history import History, check, describe

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
ARROW = "application/vnd.apache.arrow.stream"

NOT_ENOUGH_REPLICAS = 50301
LEADER_NOT_AVAILABLE = 50303
INVALID_REPLICATION_FACTOR = 40002

#: A dead broker is declared dead by the controller within this much clock time.
DEATH_MS = SESSION_MS + 2 * HEARTBEAT_MS


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


# -- the REST probes the real-process tests used (tests/replication/support.py) ----------------------------


async def get(c: Cluster, via: int, path: str, **kwargs: Any) -> httpx.Response:
    async with c.client(via) as http:
        return await http.get(path, **kwargs)


async def partitions(c: Cluster, topic: str, via: int) -> dict[int, dict]:
    resp = await get(c, via, f"/topics/{topic}/partitions", headers={"Accept": V2})
    assert resp.status_code == 200, f"partitions of {topic} on {via}: {resp.status_code} {resp.text}"
    return {p["partition"]: p for p in resp.json()}


def in_sync(part: dict) -> set[int]:
    return {r["broker"] for r in part["replicas"] if r["in_sync"]}


def replica_ids(part: dict) -> list[int]:
    return [r["broker"] for r in part["replicas"]]


def live_ids(c: Cluster) -> list[int]:
    return [b.broker_id for b in c.live()]


async def until(c: Cluster, what: str, check_: Callable[[], Awaitable[Any]], rounds: int = 60) -> Any:
    """Poll ``check_`` with a heartbeat round (the clock moved one interval, the ISR
    checked) between looks: the cluster's time passing, as the real tests waited for it.
    Fails naming ``what`` after ``rounds`` looks (a bound on a hang, not a timing claim)."""
    last: Any = None
    for _ in range(rounds):
        try:
            last = await check_()
            if last:
                return last
        except AssertionError as exc:
            last = exc
        await c.advance(HEARTBEAT_MS)
        c.check_isr()
        await c.settle()
    raise AssertionError(f"never happened: {what}; last: {last!r}")


async def wait_view(c: Cluster, topic: str, partition: int, holds: Callable[[dict], bool], what: str,
                    via: list[int] | None = None) -> None:
    """Until ``holds(partition state)`` on every broker of ``via`` (default: the live ones)."""

    async def every() -> bool:
        for b in via or live_ids(c):
            state = (await partitions(c, topic, b))[partition]
            assert holds(state), f"broker {b} sees {state}"
        return True

    await until(c, f"{topic}-{partition}: {what}", every)


async def healthy(c: Cluster, topic: str) -> bool:
    """Every live broker agrees every partition has a live leader and every replica is
    live and in sync."""
    live = set(live_ids(c))
    views = {}
    for b in sorted(live):
        view = {}
        for p, part in (await partitions(c, topic, b)).items():
            replicas = set(replica_ids(part))
            assert part["leader"] in live and replicas <= live and in_sync(part) == replicas, (
                f"broker {b} sees partition {p} as {part} (live: {sorted(live)})")
            view[p] = (part["leader"], sorted(replicas))
        views[b] = view
    assert len({repr(v) for v in views.values()}) == 1, f"the brokers disagree: {views}"
    return True


async def create_topic(c: Cluster, via: int, name: str, partitions_: int, rf: int,
                       configs: dict[str, str] | None = None) -> httpx.Response:
    body: dict[str, Any] = {"topic_name": name, "partitions_count": partitions_, "replication_factor": rf}
    if configs:
        body["configs"] = [{"name": k, "value": v} for k, v in configs.items()]
    async with c.client(via) as http:
        cluster_id = (await http.get("/v3/clusters")).json()["data"][0]["cluster_id"]
        return await http.post(f"/v3/clusters/{cluster_id}/topics", json=body)


async def make_topic(c: Cluster, name: str, partitions_: int, rf: int, configs: dict[str, str] | None = None) -> str:
    resp = await create_topic(c, live_ids(c)[0], name, partitions_, rf, configs)
    assert resp.status_code in (200, 201), f"creating {name}: {resp.status_code} {resp.text}"
    await until(c, f"{name} led and in sync everywhere", lambda: healthy(c, name))
    return name


async def produce(c: Cluster, via: int, topic: str, partition: int, values: list[str], acks: str) -> httpx.Response:
    async with c.client(via) as http:
        return await http.post(f"/topics/{topic}/partitions/{partition}", params={"acks": acks},
                               json={"records": [{"value": b64(v)} for v in values]},
                               headers={"Content-Type": BINARY_V2, "Accept": V2})


async def produce_ok(c: Cluster, history: History, via: int, topic: str, values: list[str], acks: str) -> None:
    history.invoke(0, values)
    resp = await produce(c, via, topic, 0, values, acks)
    assert resp.status_code == 200, f"acks={acks} via {via}: {resp.status_code} {resp.text}"
    for value, entry in zip(values, resp.json()["offsets"]):
        history.ok(value, entry["partition"], entry["offset"])


async def read_all(c: Cluster, topic: str, partition: int, via: int) -> tuple[dict, dict]:
    """``({partition: [(offset, value)]}, {partition: end offset})`` read through ``via``."""
    async with c.client(via) as http:
        resp = await http.get(f"/topics/{topic}/partitions/{partition}/offsets")
        assert resp.status_code == 200, resp.text
        end = resp.json()["end_offset"]
        out: list[tuple[int, str]] = []
        while len(out) < end:
            resp = await http.get(f"/topics/{topic}/partitions/{partition}/records",
                                  params={"offset": len(out), "timeout": 0}, headers={"Accept": BINARY_V2})
            assert resp.status_code == 200 and resp.json(), resp.text
            out.extend((e["offset"], base64.b64decode(e["value"]).decode()) for e in resp.json())
    return {partition: [e for e in out if e[0] < end]}, {partition: end}


def replicas_table(c: Cluster, topic: str) -> dict[tuple[int, int], dict]:
    """Rows of ``ROOT/_system/replicas`` for ``topic``, keyed by (partition, broker)."""
    try:
        rows = DeltaTable(str(c.root / "_system" / "replicas")).to_pyarrow_table().to_pylist()
    except Exception as exc:  # not there yet: polled again
        raise AssertionError(f"reading _system/replicas: {exc!r}") from exc
    return {(r["partition"], r["broker"]): r for r in rows if r["topic"] == topic}


async def members_seen_by(c: Cluster, via: int) -> set[int]:
    resp = await get(c, via, "/brokers", headers={"Accept": V2})
    assert resp.status_code == 200, resp.text
    return set(resp.json()["brokers"])


# -- a replication factor above the live brokers -----------------------------------------------------------


async def _assert_invalid_replication_factor(c: Cluster, name: str, factor: int) -> None:
    resp = await create_topic(c, live_ids(c)[0], name, 1, factor)
    assert resp.status_code == 400, f"replication factor {factor} on {live_ids(c)}: {resp.text}"
    body = resp.json()
    assert body["error_code"] == INVALID_REPLICATION_FACTOR, body
    assert body["message"].startswith("INVALID_REPLICATION_FACTOR"), body


def test_a_replication_factor_above_the_live_brokers_is_refused(tmp_path):
    async def scenario(c: Cluster) -> None:
        await _assert_invalid_replication_factor(c, "four", 4)

        c.stop(3)
        await c.advance(DEATH_MS)

        async def two_members() -> bool:
            seen = {b: await members_seen_by(c, b) for b in live_ids(c)}
            assert all(ids == {1, 2} for ids in seen.values()), f"GET /brokers per broker: {seen}"
            return True

        await until(c, "brokers 1 and 2 listed, 3 gone", two_members)
        await _assert_invalid_replication_factor(c, "three", 3)
        for b in live_ids(c):
            resp = await get(c, b, "/topics/three")
            assert resp.status_code == 404, f"the refused topic exists on broker {b}: {resp.text}"

        topic = await make_topic(c, "two", 2, 2)
        for part in (await partitions(c, topic, 1)).values():
            assert sorted(replica_ids(part)) == [1, 2], part

    run_three(tmp_path, scenario)


# -- the ISR and min.insync.replicas -----------------------------------------------------------------------


async def _wait_isr_rows(c: Cluster, topic: str, expected: dict[int, bool]) -> None:
    async def rows_match() -> bool:
        rows = {b: row["in_isr"] for (p, b), row in replicas_table(c, topic).items() if p == 0}
        assert rows == expected, f"in_isr per broker: {rows}"
        return True

    await until(c, f"_system/replicas to hold in_isr {expected} for {topic}-0", rows_match)


def test_a_dead_follower_leaves_the_isr_and_a_second_one_stops_acks_all(tmp_path):
    async def scenario(c: Cluster) -> None:
        topic = await make_topic(c, "isr", 1, 3, {"min.insync.replicas": "2"})
        part = (await partitions(c, topic, 1))[0]
        leader = part["leader"]
        first, second = [b for b in replica_ids(part) if b != leader]
        history = History()
        await produce_ok(c, history, first, topic, ["all-three-0", "all-three-1"], "all")
        await _wait_isr_rows(c, topic, {1: True, 2: True, 3: True})

        c.stop(first)
        await wait_view(c, topic, 0, lambda p: in_sync(p) == {leader, second} and p["leader"] == leader,
                        f"broker {first} out of the ISR, {leader} still leading")
        replicas = replica_ids((await partitions(c, topic, leader))[0])
        assert first in replicas, f"the dead broker must stay a replica, only out of the ISR: {replicas}"
        await _wait_isr_rows(c, topic, {leader: True, second: True, first: False})
        rows = replicas_table(c, topic)
        assert rows[(0, leader)]["role"] == "leader" and rows[(0, second)]["role"] == "follower", rows
        await produce_ok(c, history, second, topic, ["two-0", "two-1", "two-2"], "all")
        await produce_ok(c, history, leader, topic, ["two-3"], "all")

        c.stop(second)
        await wait_view(c, topic, 0, lambda p: in_sync(p) == {leader}, f"only {leader} in the ISR")
        end_before = c.brokers[leader].logs.get(topic, 0).log_end_offset
        history.invoke(0, ["refused"])
        resp = await produce(c, leader, topic, 0, ["refused"], "all")
        assert resp.status_code == 503, f"acks=all with an ISR of one: {resp.status_code} {resp.text}"
        body = resp.json()
        assert body["error_code"] == NOT_ENOUGH_REPLICAS and body["message"].startswith("NOT_ENOUGH_REPLICAS"), body
        history.failed(["refused"], "NOT_ENOUGH_REPLICAS")
        assert c.brokers[leader].logs.get(topic, 0).log_end_offset == end_before, "the refused record was written"
        await produce_ok(c, history, leader, topic, ["one-0", "one-1"], "1")
        await _wait_isr_rows(c, topic, {leader: True, second: False, first: False})

        logs, ends = await read_all(c, topic, 0, leader)
        problems = check(history, logs, ends)
        assert not problems, describe(problems, history)
        assert ends == {0: 8}, ends

    run_three(tmp_path, scenario)


# -- unclean leader election -------------------------------------------------------------------------------


async def _leave_only_the_leader_in_sync(c: Cluster, topic: str, history: History) -> tuple[int, int, int]:
    """Freeze the follower until it leaves the ISR, with acknowledged records before and
    after; returns (leader, follower, third broker)."""
    part = (await partitions(c, topic, 1))[0]
    leader = part["leader"]
    (follower,) = [b for b in replica_ids(part) if b != leader]
    (third,) = [b for b in c.brokers if b not in (leader, follower)]
    await produce_ok(c, history, third, topic, [f"in-sync-{i}" for i in range(5)], "all")

    c.stop(follower)  # frozen: SIGSTOP keeps the process and its state
    await wait_view(c, topic, 0, lambda p: in_sync(p) == {leader}, f"frozen broker {follower} out of the ISR",
                    via=[leader])
    await produce_ok(c, history, third, topic, [f"leader-only-{i}" for i in range(3)], "all")
    return leader, follower, third


def test_without_unclean_election_a_partition_with_a_dead_isr_stays_offline(tmp_path):
    async def scenario(c: Cluster) -> None:
        topic = await make_topic(c, "clean", 1, 2, {"unclean.leader.election.enable": "false"})
        history = History()
        leader, follower, third = await _leave_only_the_leader_in_sync(c, topic, history)

        c.stop(leader)
        c.resume(follower)
        await wait_view(c, topic, 0, lambda p: p["leader"] == -1, "offline once its only ISR member died")

        refused = 0
        for _ in range(3 * SESSION_MS // HEARTBEAT_MS):  # session after session, every broker declared
            for b in live_ids(c):  # dead or alive again several times over
                state = (await partitions(c, topic, b))[0]
                assert state["leader"] == -1, (
                    f"broker {b} reports leader {state['leader']} for {topic}-0 whose ISR {{{leader}}} is dead "
                    f"(unclean election is off); state: {state}")
                value = f"offline-{refused}"
                history.invoke(0, [value])
                resp = await produce(c, b, topic, 0, [value], "1")
                assert resp.status_code == 503 and resp.json()["error_code"] == LEADER_NOT_AVAILABLE, (
                    f"produce via broker {b} to the offline {topic}-0: {resp.status_code} {resp.text}")
                assert resp.json()["message"].startswith("LEADER_NOT_AVAILABLE"), resp.text
                history.failed([value], "LEADER_NOT_AVAILABLE while offline")
                refused += 1
            await c.advance(HEARTBEAT_MS)
            c.check_isr()
        assert refused >= 3 * SESSION_MS // HEARTBEAT_MS * 2

        async def offline_rows() -> bool:
            roles = {b: row["role"] for (_, b), row in replicas_table(c, topic).items()}
            assert roles == {leader: "offline", follower: "offline"}, f"roles: {roles}"
            return True

        await until(c, f"_system/replicas to show the replicas of {topic}-0 offline", offline_rows)

        await c.restart(leader)
        await wait_view(c, topic, 0, lambda p: p["leader"] == leader, f"broker {leader} leading again")
        await produce_ok(c, history, third, topic, ["after-0", "after-1"], "1")
        await until(c, f"broker {follower} caught up", lambda: healthy(c, topic))
        logs, ends = await read_all(c, topic, 0, follower)
        problems = check(history, logs, ends)
        assert not problems, describe(problems, history)
        assert ends == {0: 10}, ends

    run_three(tmp_path, scenario)


def test_with_unclean_election_an_out_of_sync_replica_takes_over(tmp_path):
    async def scenario(c: Cluster) -> None:
        topic = await make_topic(c, "unclean", 1, 2)
        history = History()
        leader, follower, third = await _leave_only_the_leader_in_sync(c, topic, history)
        async with c.client(third) as http:
            cluster_id = (await http.get("/v3/clusters")).json()["data"][0]["cluster_id"]
            resp = await http.put(f"/v3/clusters/{cluster_id}/topics/{topic}/configs/unclean.leader.election.enable",
                                  json={"value": "true"})
        assert resp.status_code == 204, resp.text

        c.stop(leader)
        c.resume(follower)
        await wait_view(c, topic, 0, lambda p: p["leader"] == follower, f"out-of-sync broker {follower} elected")
        # What L alone acknowledged is gone with an unclean election: unknown, not lost.
        history.unknown([op.value for op in history.ops() if op.value.startswith("leader-only")], "unclean")

        attempt = 0

        async def produced() -> bool:
            nonlocal attempt
            value = f"new-{attempt}"
            attempt += 1
            history.invoke(0, [value])
            resp = await produce(c, third, topic, 0, [value], "1")
            if resp.status_code != 200:
                history.unknown([value], f"HTTP {resp.status_code}")
                return False
            history.ok(value, 0, resp.json()["offsets"][0]["offset"])
            return True

        await until(c, f"acks=1 produce to {topic}-0 led by broker {follower}", produced)
        await produce_ok(c, history, third, topic, ["new-last"], "1")

        await c.restart(leader)
        await until(c, f"broker {leader} following {follower}", lambda: healthy(c, topic))
        assert (await partitions(c, topic, third))[0]["leader"] == follower
        logs, ends = await read_all(c, topic, 0, leader)
        problems = check(history, logs, ends)
        assert not problems, f"read through broker {leader}: " + describe(problems, history)

        # L must have given up its divergent suffix: leading again, it serves F's log.
        c.stop(follower)
        await wait_view(c, topic, 0, lambda p: p["leader"] == leader, f"broker {leader} leading again")
        logs, ends = await read_all(c, topic, 0, third)
        problems = check(history, logs, ends)
        assert not problems, f"read from broker {leader} after it led again: " + describe(problems, history)

    run_three(tmp_path, scenario)


# -- a produce spanning a dead partition and a live one (issue 35, item 4) ---------------------------------


def _arrow_stream(values: list[str], partitions_: list[int]) -> bytes:
    table = pa.table({"value": pa.array([v.encode() for v in values], pa.binary()),
                      "partition": pa.array(partitions_, pa.int32())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_records_of_a_failed_partition_are_answered_per_record_and_the_rest_written(tmp_path):
    """Before: the whole request got ``503 LEADER_NOT_AVAILABLE`` while the records for
    the other partitions were written, so a client retried them all and made duplicates.
    Confluent's v2 answer has ``error_code`` and ``error`` per record in ``offsets[i]``
    (kafka-rest ``AbstractProduceAction.produceResultsToResponse``: 50003 for a retriable
    Kafka error); v3 answers each record of a batch with its own report."""

    async def scenario(c: Cluster) -> None:
        topic = await make_topic(c, "partial", 3, 1)
        view = await partitions(c, topic, 1)
        leaders = {p: view[p]["leader"] for p in range(3)}
        dead = 0
        victim = leaders[dead]
        alive = next(p for p, b in leaders.items() if b != victim)
        via = next(b for b in live_ids(c) if b != victim)
        c.stop(victim)
        await wait_view(c, topic, dead, lambda state: state["leader"] in (-1, None),
                        "offline after its only replica was killed", via=[via])

        async with c.client(via) as http:
            resp = await http.post(f"/topics/{topic}", json={"records": [
                {"value": b64("to-dead"), "partition": dead}, {"value": b64("to-alive"), "partition": alive},
            ]}, headers={"Content-Type": BINARY_V2, "Accept": V2})
            assert resp.status_code == 200, resp.text
            failed, written = resp.json()["offsets"]
            assert failed["offset"] is None and failed["error_code"] == 50003, failed  # retriable, as kafka-rest
            assert failed["error"].startswith("LEADER_NOT_AVAILABLE"), failed
            assert written == {"partition": alive, "offset": 0, "error_code": None, "error": None}

            cluster_id = (await http.get("/v3/clusters")).json()["data"][0]["cluster_id"]
            v3 = await http.post(f"/v3/clusters/{cluster_id}/topics/{topic}/records",
                                 content=orjson.dumps({"partition_id": dead, "value": {"data": b64("v3-dead")}})
                                 + orjson.dumps({"partition_id": alive, "value": {"data": b64("v3-alive")}}),
                                 headers={"Content-Type": "application/json"})
            assert v3.status_code == 200, v3.text
            reports = [orjson.loads(line) for line in v3.content.splitlines() if line.strip()]
            assert reports[0]["error_code"] == LEADER_NOT_AVAILABLE, reports
            assert reports[0]["message"].startswith("LEADER_NOT_AVAILABLE"), reports
            assert reports[1]["error_code"] == 200 and reports[1]["offset"] == 1, reports

            resp = await http.post(f"/v1/topics/{topic}/records", content=_arrow_stream(
                ["arrow-dead", "arrow-alive"], [dead, alive]), headers={"Content-Type": ARROW})
            assert resp.status_code == 200, resp.text
            answer = resp.json()
            assert answer["offsets"] == [{"partition": alive, "base_offset": 2, "last_offset": 2, "count": 1}], answer
            failed, written = answer["records"]
            assert failed["partition"] == dead and failed["offset"] is None and failed["error_code"] == 50003, failed
            assert failed["error"].startswith("LEADER_NOT_AVAILABLE"), failed
            assert written == {"partition": alive, "offset": 2, "error_code": None, "error": None}

            got = await http.get(f"/topics/{topic}/partitions/{alive}/records", params={"offset": 0},
                                 headers={"Accept": BINARY_V2})
            values = [base64.b64decode(r["value"]).decode() for r in got.json()]
            assert values == ["to-alive", "v3-alive", "arrow-alive"]

    run_three(tmp_path, scenario)
