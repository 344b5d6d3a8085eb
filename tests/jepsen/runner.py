"""A Jepsen-style run: clients against a three-broker cluster while a nemesis breaks it.

What runs (one thread each, every answer written to a :class:`~.history.History`):

* two plain ``acks=all`` producers: one to five fresh values per request, to one
  partition (``POST /topics/{t}/partitions/{p}``) or spread over partitions
  (``POST /topics/{t}``); a failed request is never resent, the next one has new values;
* an idempotent producer (``POST /v1/producers``, then ``producer_id`` /
  ``producer_epoch`` / ``sequence``): a request that fails is resent with the same
  sequence until acknowledged (up to :data:`IDEMPOTENT_TRIES`), then the producer
  starts a new session;
* a transactional producer: begin, one to three produce requests (each partition added
  to the transaction first), commit (or, one time in three, abort); after an error it
  aborts, or starts its session again (which fences the old one and aborts its
  transaction);
* a consumer group's committer: every second it commits, for each partition, a
  non-decreasing offset up to the end offset (what a consumer that read that far
  commits), with ``generation_id`` -1 as Kafka's standalone commit;
* a reader of the group's committed offsets, every second;
* the nemesis: every ``fault_every_s`` (seeded) a kill -9 of a partition's leader, of
  the controller or of a random broker, restarted after ``down_s``; or a SIGSTOP of a
  random broker for ``pause_s``. Every (re)start is recorded.

At the end the nemesis stops, every broker is resumed and started, the clients stop,
and the whole topic is read back under both isolation levels. :func:`run` returns the
history; :func:`write_report` writes ``report.md``, ``findings.json`` and
``history.json``. ``python -m jepsen.runner --minutes 30`` (PYTHONPATH=tests; see
``make soak``) runs it from the command line.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from conftest import WITH_TIER_CHILD
from replication.support import Cluster, ClusterBroker, wait_until

# tests/ is on sys.path: pytest puts it there (rootdir conftest), `make soak` sets PYTHONPATH.
from jepsen.history import (
    BrokerStart,
    Finding,
    Grant,
    History,
    OffsetCommit,
    OffsetRead,
    Produce,
    Txn,
    check,
    summary,
)
from laketail.cluster.store import ClusterStore
from laketail.errors import LaketailError, for_kafka_name

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
TOPIC = "jepsen"
GROUP = "jepsen-group"
TRANSACTIONAL_ID = "jepsen-txn"
#: Tries of one idempotent batch before the producer starts a new session.
IDEMPOTENT_TRIES = 5
#: Client request timeout: longer than a broker session timeout plus an election.
REQUEST_TIMEOUT_S = 30.0
#: Rounds of starting every stopped broker after the run before it is given up on.
HEAL_ROUNDS = 3
#: Failure bound on the cluster settling (every partition led, every replica in sync)
#: after the last fault: a broken cluster ends the run as ``unfinished`` after it. Not a
#: speed claim: on the shared 2-core test machine a restarted broker's heartbeats lagged
#: 20 s behind, and 120 s (the replication tests' bound) was not always enough.
HEAL_S = 300.0


@dataclass(frozen=True)
class Plan:
    """How long, how hard, and the seed of the nemesis' schedule."""

    seed: int = 35
    seconds: float = 150.0
    partitions: int = 3
    fault_every_s: tuple[float, float] = (15.0, 25.0)
    down_s: tuple[float, float] = (2.0, 8.0)
    pause_s: tuple[float, float] = (5.0, 15.0)


def error_name(code: Any, message: Any) -> str:
    """The Kafka error name of an answer's ``error_code`` / ``message``."""
    name = str(message or "").partition(":")[0].strip()
    if for_kafka_name(name) is not LaketailError:
        return name
    classes, todo = [], [LaketailError]
    while todo:
        classes.append(todo.pop())
        todo.extend(classes[-1].__subclasses__())
    for cls in classes:
        if code is not None and code in (cls.rest_code, cls.kafka_code) and cls.kafka_name:
            return cls.kafka_name
    return f"UNKNOWN_{code}"


def answer_of(resp: httpx.Response, records: list[tuple[int, str]]) -> list[int | str]:
    """Per record: the offset it was acknowledged at, or the error name it got."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code != 200 or not isinstance(body, dict) or "offsets" not in body:
        code = body.get("error_code") if isinstance(body, dict) else resp.status_code
        message = body.get("message") if isinstance(body, dict) else resp.text
        return [error_name(code, message)] * len(records)
    out: list[int | str] = []
    for (partition, _), entry in zip(records, body["offsets"], strict=True):
        if entry.get("error_code") or entry.get("error"):
            out.append(error_name(entry.get("error_code"), entry.get("error")))
        elif entry.get("partition", partition) != partition:
            out.append(f"WRONG_PARTITION_{entry.get('partition')}")
        else:
            out.append(int(entry["offset"]))
    return out


def transport_error(exc: httpx.HTTPError) -> str:
    return "REQUEST_TIMED_OUT" if isinstance(exc, httpx.TimeoutException) else "NETWORK_EXCEPTION"


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode("ascii")


class Run:
    """One run's shared state: the cluster, the history, the stop flag, the clock."""

    def __init__(self, cluster: Cluster, plan: Plan) -> None:
        self.cluster = cluster
        self.plan = plan
        self.history = History()
        self.stop_clients = threading.Event()
        self.stop_nemesis = threading.Event()
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self._requests = 0

    def now(self) -> float:
        return time.monotonic() - self.started

    def request_id(self, producer: str) -> str:
        with self.lock:
            self._requests += 1
            return f"{producer}-{self._requests}"

    def broker_url(self, rng: random.Random) -> str:
        live = self.cluster.live() or list(self.cluster.brokers.values())
        return rng.choice(live).url

    def add(self, kind: str, *items: Any) -> None:
        """Append ``items`` to the history's list ``kind`` (``produces``, ``txns``, ...)."""
        with self.lock:
            getattr(self.history, kind).extend(items)

    def answered(self, produce: Produce, answer: list[int | str]) -> None:
        with self.lock:
            produce.answer(answer)

    # -- producers ---------------------------------------------------------------------

    def plain_producer(self, name: str, rng: random.Random) -> None:
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            n = 0
            while not self.stop_clients.is_set():
                count = rng.randint(1, 5)
                spread = rng.random() < 0.3
                records = []
                for _ in range(count):
                    n += 1
                    p = rng.randrange(self.plan.partitions) if spread or not records else records[0][0]
                    records.append((p, f"{name}-{n}"))
                produce = Produce(self.request_id(name), name, records)
                self.add("produces", produce)
                url = self.broker_url(rng)
                try:
                    if spread:
                        resp = http.post(f"{url}/topics/{TOPIC}", params={"acks": "all"},
                                         json={"records": [{"partition": p, "value": b64(v)} for p, v in records]},
                                         headers={"Content-Type": BINARY_V2, "Accept": V2})
                    else:
                        resp = http.post(f"{url}/topics/{TOPIC}/partitions/{records[0][0]}", params={"acks": "all"},
                                         json={"records": [{"value": b64(v)} for _, v in records]},
                                         headers={"Content-Type": BINARY_V2, "Accept": V2})
                    answer = answer_of(resp, records)
                except httpx.HTTPError as exc:
                    answer = [transport_error(exc)] * len(records)
                self.answered(produce, answer)
                if any(isinstance(a, str) for a in answer):
                    time.sleep(0.3)

    def _session(self, http: httpx.Client, rng: random.Random, transactional_id: str | None) -> tuple[int, int]:
        """A new producer session, retried until a broker hands one out."""
        while True:
            try:
                resp = http.post(f"{self.broker_url(rng)}/v1/producers", json={
                    "transactional_id": transactional_id, "transaction_timeout_ms": 60_000})
                if resp.status_code == 200:
                    pid, epoch = resp.json()["producer_id"], resp.json()["producer_epoch"]
                    grant = Grant(transactional_id, pid, epoch, self.now())
                    self.add("grants", grant)
                    return pid, epoch
            except httpx.HTTPError:
                pass
            if self.stop_clients.is_set():
                raise _Stopped
            time.sleep(0.5)

    def idempotent_producer(self, name: str, rng: random.Random) -> None:
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            try:
                pid, epoch = self._session(http, rng, None)
            except _Stopped:
                return
            sequences: dict[int, int] = {}
            n = 0
            while not self.stop_clients.is_set():
                p = rng.randrange(self.plan.partitions)
                records = []
                for _ in range(rng.randint(1, 5)):
                    n += 1
                    records.append((p, f"{name}-{n}"))
                produce = Produce(self.request_id(name), name, records)
                self.add("produces", produce)
                sequence = sequences.get(p, 0)
                acked = False
                for _ in range(IDEMPOTENT_TRIES):
                    try:
                        resp = http.post(
                            f"{self.broker_url(rng)}/topics/{TOPIC}/partitions/{p}",
                            params={"acks": "all", "producer_id": pid, "producer_epoch": epoch, "sequence": sequence},
                            json={"records": [{"value": b64(v)} for _, v in records]},
                            headers={"Content-Type": BINARY_V2, "Accept": V2})
                        answer = answer_of(resp, records)
                    except httpx.HTTPError as exc:
                        answer = [transport_error(exc)] * len(records)
                    self.answered(produce, answer)
                    if all(isinstance(a, int) for a in answer):
                        acked = True
                        break
                    if "OUT_OF_ORDER_SEQUENCE_NUMBER" in answer or self.stop_clients.is_set():
                        break
                    time.sleep(0.5)
                if acked:
                    sequences[p] = sequence + len(records)
                else:  # where the sequence stands is unknown: a new session starts from 0
                    try:
                        pid, epoch = self._session(http, rng, None)
                    except _Stopped:
                        return
                    sequences = {}

    def transactional_producer(self, name: str, rng: random.Random) -> None:
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            try:
                self._transactions(http, name, rng)
            except _Stopped:
                return

    def _transactions(self, http: httpx.Client, name: str, rng: random.Random) -> None:
        base = f"/v1/transactions/{quote(TRANSACTIONAL_ID, safe='')}"
        pid, epoch = self._session(http, rng, TRANSACTIONAL_ID)
        sequences: dict[int, int] = {}  # per partition, for the session (not per transaction)
        n = 0
        while not self.stop_clients.is_set():
            ident = {"producer_id": pid, "producer_epoch": epoch}
            txn = Txn(TRANSACTIONAL_ID, pid, epoch, [])
            ok = self._txn_call(http, rng, f"{base}/begin", ident)
            added: set[int] = set()
            for _ in range(rng.randint(1, 3) if ok else 0):
                p = rng.randrange(self.plan.partitions)
                if p not in added:  # AddPartitionsToTxn first, as Kafka's producer does
                    if not self._txn_call(http, rng, f"{base}/partitions",
                                          {**ident, "partitions": [{"topic": TOPIC, "partition": p}]}):
                        ok = False
                        break
                    added.add(p)
                records = []
                for _ in range(rng.randint(1, 3)):
                    n += 1
                    records.append((p, f"{name}-{n}"))
                txn.values.extend(v for _, v in records)
                produce = Produce(self.request_id(name), name, records)
                self.add("produces", produce)
                try:
                    resp = http.post(
                        f"{self.broker_url(rng)}/topics/{TOPIC}/partitions/{p}",
                        params={"acks": "all", "producer_id": pid, "producer_epoch": epoch,
                                "sequence": sequences.get(p, 0), "transactional": "true"},
                        json={"records": [{"value": b64(v)} for _, v in records]},
                        headers={"Content-Type": BINARY_V2, "Accept": V2})
                    answer = answer_of(resp, records)
                except httpx.HTTPError as exc:
                    answer = [transport_error(exc)] * len(records)
                self.answered(produce, answer)
                if not all(isinstance(a, int) for a in answer):
                    ok = False
                    break
                sequences[p] = sequences.get(p, 0) + len(records)
            if ok and rng.random() >= 1 / 3:
                if self._txn_call(http, rng, f"{base}/commit", ident):
                    txn.outcome = "committed"
            elif self._txn_call(http, rng, f"{base}/abort", ident):
                txn.outcome = "aborted"
            self.add("txns", txn)
            if txn.outcome == "unknown" or not ok:
                pid, epoch = self._session(http, rng, TRANSACTIONAL_ID)
                sequences = {}
                time.sleep(0.3)

    def _txn_call(self, http: httpx.Client, rng: random.Random, path: str, body: dict[str, Any]) -> bool:
        try:
            return http.post(f"{self.broker_url(rng)}{path}", json=body).status_code == 200
        except httpx.HTTPError:
            return False

    # -- the consumer group ------------------------------------------------------------

    def committer(self, rng: random.Random) -> None:
        position = {p: 0 for p in range(self.plan.partitions)}
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            while not self.stop_clients.wait(1.0):
                url = self.broker_url(rng)
                offsets = {}
                for p in position:
                    try:
                        resp = http.get(f"{url}/topics/{TOPIC}/partitions/{p}/offsets")
                    except httpx.HTTPError:
                        continue
                    if resp.status_code == 200:
                        end = int(resp.json()["end_offset"])
                        offsets[p] = position[p] = max(position[p], min(end, position[p] + rng.randint(1, 200)))
                if not offsets:
                    continue
                commits = [OffsetCommit(GROUP, p, o, sent=self.now()) for p, o in offsets.items()]
                try:
                    resp = http.post(f"{url}/v1/groups/{GROUP}/commit", json={
                        "generation_id": -1, "member_id": "",
                        "offsets": [{"topic": TOPIC, "partition": p, "offset": o} for p, o in offsets.items()]})
                    ok = resp.status_code == 200
                except httpx.HTTPError:
                    ok = False
                answered = self.now()
                for c in commits:
                    c.answered, c.ok = answered, ok
                self.add("commits", *commits)

    def offset_reader(self, rng: random.Random) -> None:
        partitions = [{"topic": TOPIC, "partition": p} for p in range(self.plan.partitions)]
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            while not self.stop_clients.wait(1.0):
                sent = self.now()
                try:
                    resp = http.post(f"{self.broker_url(rng)}/v1/groups/{GROUP}/committed",
                                     json={"partitions": partitions})
                except httpx.HTTPError:
                    continue
                if resp.status_code != 200:
                    continue
                answered = self.now()
                reads = [OffsetRead(GROUP, o["partition"], int(o["offset"]), sent, answered)
                         for o in resp.json()["offsets"]]
                self.add("reads", *reads)

    # -- the nemesis -------------------------------------------------------------------

    def nemesis(self, rng: random.Random) -> None:
        while not self.stop_nemesis.wait(rng.uniform(*self.plan.fault_every_s)):
            action = rng.choice(["kill-leader", "kill-controller", "kill-random", "pause"])
            target = self._target(action, rng)
            if target is None:
                continue
            event = {"t": round(self.now(), 3), "action": action, "broker": target.broker_id}
            self.add("nemesis", event)
            if action == "pause":
                target.pause()
                self.stop_nemesis.wait(rng.uniform(*self.plan.pause_s))
                target.resume()
            else:
                target.kill9()
                self.stop_nemesis.wait(rng.uniform(*self.plan.down_s))
                self.start(target)
            done = {"t": round(self.now(), 3), "action": "resume" if action == "pause" else "restart",
                    "broker": target.broker_id}
            self.add("nemesis", done)

    def _target(self, action: str, rng: random.Random) -> ClusterBroker | None:
        live = self.cluster.live()
        if len(live) < len(self.cluster.brokers):
            self.heal()  # one fault at a time: a broker that failed to start is tried again
            return None
        by_id = {b.broker_id: b for b in live}
        chosen: int | None = None
        try:
            if action == "kill-leader":
                chosen = self.cluster.leader(TOPIC, rng.randrange(self.plan.partitions), via=rng.choice(live))
            elif action == "kill-controller":
                doc = self.cluster.get(rng.choice(live), "/v3/clusters").json()
                chosen = int(doc["data"][0]["controller"]["related"].rstrip("/").rsplit("/", 1)[1])
        except (AssertionError, httpx.HTTPError, KeyError, ValueError):
            chosen = None
        return by_id.get(chosen) if chosen in by_id else rng.choice(live)  # type: ignore[arg-type]

    def start(self, broker: ClusterBroker) -> bool:
        at = self.now()
        try:
            broker.start()
        except Exception as exc:  # BrokerStartError, or anything else that kept it down
            start = BrokerStart(broker.broker_id, at, False, f"{exc}"[-2000:])
            self.add("starts", start)
            return False
        ok = BrokerStart(broker.broker_id, at, True)
        self.add("starts", ok)
        return True

    def heal(self) -> None:
        """Resume every paused broker and start every stopped one (each once)."""
        for b in self.cluster.brokers.values():
            if b.paused:
                b.resume()
            elif not b.running:
                self.start(b)

    # -- reading back ------------------------------------------------------------------

    def read_back(self) -> None:
        via = self.cluster.live()[0]
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            for p in range(self.plan.partitions):
                rows = read_partition(http, via.url, p, "read_uncommitted")
                committed = read_partition(http, via.url, p, "read_committed")
                with self.lock:
                    self.history.log[p] = rows
                    self.history.committed_log[p] = [v for _, v in committed]


class _Stopped(Exception):
    """The clients were stopped while a producer waited for a session."""


def read_partition(http: httpx.Client, url: str, partition: int, isolation: str) -> list[tuple[int, str]]:
    """``(offset, value)`` of every record a consumer at ``isolation`` sees, to the end."""
    resp = http.get(f"{url}/topics/{TOPIC}/partitions/{partition}/offsets", params={"isolation_level": isolation})
    assert resp.status_code == 200, f"end offset of {TOPIC}-{partition}: {resp.status_code} {resp.text}"
    end = int(resp.json()["end_offset"])
    out: list[tuple[int, str]] = []
    offset = 0
    while offset < end:
        resp = http.get(f"{url}/topics/{TOPIC}/partitions/{partition}/records",
                        params={"offset": offset, "isolation_level": isolation, "max_records": 1000},
                        headers={"Accept": BINARY_V2})
        assert resp.status_code == 200, f"fetch {TOPIC}-{partition}@{offset}: {resp.status_code} {resp.text}"
        batch = resp.json()
        if not batch:
            break  # only markers or aborted records were left below the end
        out.extend((r["offset"], base64.b64decode(r["value"]).decode()) for r in batch if r["offset"] < end)
        offset = batch[-1]["offset"] + 1
    return out


def run(cluster: Cluster, plan: Plan, holder: dict[str, Run] | None = None) -> History:
    """Drive a started ``cluster`` for ``plan.seconds`` under the nemesis, heal it, read
    the topic back, and return the history (``holder["run"]``: the run, for a caller
    that wants the history when this raises)."""
    cluster.make_topic(TOPIC, plan.partitions, 3, {"min.insync.replicas": "2"})
    state = Run(cluster, plan)
    if holder is not None:
        holder["run"] = state
    seeds = random.Random(plan.seed)
    clients = [
        threading.Thread(target=state.plain_producer, args=("plain-0", random.Random(seeds.random()))),
        threading.Thread(target=state.plain_producer, args=("plain-1", random.Random(seeds.random()))),
        threading.Thread(target=state.idempotent_producer, args=("idem-0", random.Random(seeds.random()))),
        threading.Thread(target=state.transactional_producer, args=("txn-0", random.Random(seeds.random()))),
        threading.Thread(target=state.committer, args=(random.Random(seeds.random()),)),
        threading.Thread(target=state.offset_reader, args=(random.Random(seeds.random()),)),
    ]
    nemesis = threading.Thread(target=state.nemesis, args=(random.Random(seeds.random()),))
    for t in clients:
        t.daemon = True
        t.start()
    nemesis.start()
    time.sleep(plan.seconds)
    state.stop_nemesis.set()
    nemesis.join()
    for _ in range(HEAL_ROUNDS):  # a broker that failed to start is started again
        state.heal()
        if len(cluster.live()) == len(cluster.brokers):
            break
    try:
        wait_until(lambda: cluster.assert_healthy(TOPIC), f"{TOPIC}: every partition led and in sync after the run",
                   HEAL_S)
        time.sleep(3.0)  # the clients see the healed cluster for a moment
    finally:
        state.stop_clients.set()
        deadline = time.monotonic() + REQUEST_TIMEOUT_S * IDEMPOTENT_TRIES  # one client's longest request run
        for t in clients:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
    cluster.wait_healthy(TOPIC, "before reading back")
    state.read_back()
    state.history.controller_epoch = ClusterStore(str(cluster.root)).controller()[1]
    return state.history


def run_to_history(cluster: Cluster, plan: Plan) -> tuple[History, str]:
    """:func:`run`, and when the run could not finish (brokers that would not start,
    a topic without a leader) what broke: the history then holds every answer so far
    but no log read back, so only the checks that need no log mean anything."""
    holder: dict[str, Run] = {}
    try:
        return run(cluster, plan, holder), ""
    except Exception as exc:  # noqa: BLE001 - reported, with the brokers' logs
        partial = holder["run"].history if "run" in holder else History()
        partial.log, partial.committed_log = {}, {}
        return partial, f"the run did not finish: {exc}"


def write_report(out: Path, plan: Plan, history: History, findings: list[Finding], note: str = "") -> Path:
    """``report.md``, ``findings.json`` and ``history.json`` under ``out``; returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "history.json").write_text(history.to_json())
    counts = summary(findings)
    (out / "findings.json").write_text(json.dumps({
        "plan": plan.__dict__, "summary": counts, "findings": [f.__dict__ for f in findings]}, indent=1))
    acked = sum(1 for p in history.produces for a in p.answers if any(isinstance(x, int) for x in a))
    sent = sum(len(p.records) for p in history.produces)
    faults = [e for e in history.nemesis if e["action"] not in ("resume", "restart")]
    lines = [
        f"# Jepsen-style run, seed {plan.seed}, {plan.seconds:.0f} s", "",
        note,
        f"- records sent {sent}, acknowledged {acked}; log: "
        + ", ".join(f"p{p} {len(rows)}" for p, rows in sorted(history.log.items())),
        f"- transactions: {Counter_of(t.outcome for t in history.txns)}",
        f"- offset commits {len(history.commits)} ({sum(c.ok for c in history.commits)} acknowledged), "
        f"reads {len(history.reads)}",
        f"- producer ids handed out {len(history.grants)}; broker starts {len(history.starts)} "
        f"({sum(not s.ok for s in history.starts)} failed)",
        f"- faults {len(faults)}: {Counter_of(e['action'] for e in faults)}; controller claimed "
        f"{history.controller_epoch} times (a controller that flaps claims far more often than faults kill one)", "",
        "| check | findings |", "|---|---|", *[f"| {k} | {v} |" for k, v in counts.items()], "",
        "## Findings", "", *([f"- {f}" for f in findings[:200]] or ["none"]), "",
        "## Nemesis", "", *[f"- t={e['t']}: {e['action']} broker {e['broker']}" for e in history.nemesis],
    ]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def Counter_of(items: Any) -> dict[str, int]:  # noqa: N802 - reads as the collections.Counter it wraps
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jepsen.runner", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--out", type=Path, default=Path("results/jepsen"))
    args = parser.parse_args(argv)
    plan = Plan(seed=args.seed, seconds=args.minutes * 60)
    # Absolute: each broker runs in a directory of its own, where a relative data root would
    # name three roots, and three clusters of one broker each (make soak did that).
    out = args.out.resolve() / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    cluster = Cluster(out / "cluster", env=WITH_TIER_CHILD)  # the production layout
    try:
        history, broke = run_to_history(cluster.start(), plan)
        logs = cluster.output() if broke else ""
    finally:
        cluster.close()
    findings = check(history, finished=not broke)
    note = f"**{broke}**\n\n```\n{logs[-6000:]}\n```\n" if broke else ""
    report = write_report(out, plan, history, findings, note)
    print(report.read_text())
    print(f"report: {report}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
