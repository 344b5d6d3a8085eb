"""A three-broker laketail cluster on 127.0.0.1 for the replication fault tests.

The brokers are real ``laketail serve`` processes sharing one data root (the catalog
and the Delta tables), each with its own ``--log-dir`` (hot segments), port and run
directory (stdout/stderr of every start, kept for diagnosis). A test crashes a broker
with ``kill9()`` (SIGKILL to its process group), starts it again with ``restart()`` on
the same log dir and port, or freezes it with ``pause()``/``resume()`` (SIGSTOP and
SIGCONT), which keeps its sockets open but stops its heartbeats and fetches.

:class:`Cluster` knows which brokers should be alive (started, not killed, not
paused) and asks only those: metadata probes never wait on a frozen process.

Waiting is polling with a deadline, and the deadlines bound how long a broken cluster
can hang a test; the one deadline that is a claim is :data:`ELECTION_BOUND_S`, the
issue's "a new leader within the broker session timeout plus a few seconds".
"""

from __future__ import annotations

import base64
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

import httpx
from conftest import BINARY_V2, V2, BrokerProcess, Rest

T = TypeVar("T")

SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 300
REPLICA_LAG_TIME_MAX_MS = 2000

#: Broker settings of every test cluster (Kafka's keys, see the contract).
CLUSTER_ENV = {
    "LAKETAIL_BROKER_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
    "LAKETAIL_BROKER_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_INTERVAL_MS),
    "LAKETAIL_REPLICA_LAG_TIME_MAX_MS": str(REPLICA_LAG_TIME_MAX_MS),
}
#: ``table.flush.interval.ms`` of the topics the tests create.
TABLE_FLUSH_MS = "200"

#: The issue's bound: a partition whose leader was killed has a new leader within the
#: broker session timeout plus a few seconds (the only timed assertion).
ELECTION_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 6.0
#: Failure bound for anything else the cluster must get to (membership, ISR changes,
#: a restarted broker catching up). Not a speed claim: the test machine is loaded.
SETTLE_S = 120.0
#: HTTP timeout of metadata probes, so one slow answer cannot eat a deadline.
PROBE_TIMEOUT_S = 5.0

NOT_ENOUGH_REPLICAS = 50301


def wait_until(check: Callable[[], T], what: str, timeout_s: float = SETTLE_S, every_s: float = 0.1) -> T:
    """Poll ``check`` until it returns something truthy and return that; fail after
    ``timeout_s`` naming ``what`` and the last value (or exception) seen."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except (AssertionError, httpx.HTTPError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(every_s)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


def error_code(resp: httpx.Response) -> int | None:
    try:
        body = resp.json()
    except ValueError:
        return None
    return body.get("error_code") if isinstance(body, dict) else None


class ClusterBroker(BrokerProcess):
    """A :class:`BrokerProcess` on a shared data root with a log dir of its own."""

    def __init__(self, data_root: Path, base_dir: Path, broker_id: int, env: dict[str, str]) -> None:
        super().__init__(data_root, broker_id=broker_id, env=env)
        self.log_dir = base_dir / f"log-{broker_id}"
        # The shared data root must not make the brokers share their stderr files.
        self.run_dir = base_dir / f"run-{broker_id}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.paused = False
        self.starting = False

    @property
    def argv(self) -> list[str]:
        return super().argv + ["--log-dir", str(self.log_dir), "--advertised-url", self.url]

    @property
    def live(self) -> bool:
        """Started and ready, not killed, not frozen: it should answer."""
        return self.running and not self.paused and not self.starting

    def start(self) -> "ClusterBroker":
        self.starting = True
        try:
            super().start()
        finally:
            self.starting = False
        return self

    def pause(self) -> None:
        """SIGSTOP: the process keeps its port but stops answering and heartbeating."""
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        self.paused = False

    def kill9(self) -> None:
        super().kill9()  # SIGKILL ends a stopped process too
        self.paused = False

    def __repr__(self) -> str:
        state = "paused" if self.paused else "starting" if self.starting else "live" if self.running else "down"
        return f"<broker {self.broker_id} {self.url} {state}>"


class Cluster:
    """Three (or ``size``) brokers on one data root, and the probes tests wait on."""

    def __init__(self, base_dir: Path, size: int = 3, env: dict[str, str] | None = None) -> None:
        self.root = base_dir / "data"
        merged = {**CLUSTER_ENV, **(env or {})}
        self.brokers = {i: ClusterBroker(self.root, base_dir, i, merged) for i in range(size)}
        self.http = httpx.Client(timeout=PROBE_TIMEOUT_S)

    # -- processes -------------------------------------------------------------------

    def start(self) -> "Cluster":
        """Start every broker (in parallel) and wait until each lists all of them."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            for future in [pool.submit(b.start) for b in self.brokers.values()]:
                future.result()
        self.wait_members(set(self.brokers))
        return self

    def close(self) -> None:
        """Crash whatever still runs (teardown; the brokers' logs stay on disk)."""
        self.http.close()
        for b in self.brokers.values():
            if b.running:
                b.kill9()

    def __getitem__(self, broker_id: int) -> ClusterBroker:
        return self.brokers[broker_id]

    def live(self) -> list[ClusterBroker]:
        return [b for b in self.brokers.values() if b.live]

    def live_ids(self) -> set[int]:
        return {b.broker_id for b in self.live()}

    def others(self, *ids: int) -> list[ClusterBroker]:
        """The live brokers other than ``ids``."""
        return [b for b in self.live() if b.broker_id not in ids]

    def output(self) -> str:
        """Where each broker's logs are, with the tail of the current stderr."""
        return "\n".join(f"=== broker {i} ===\n{b.output()}" for i, b in self.brokers.items())

    # -- metadata --------------------------------------------------------------------

    def get(self, broker: ClusterBroker, path: str, **kwargs: Any) -> httpx.Response:
        assert broker.live, f"asking {broker!r}"
        return self.http.get(f"{broker.url}{path}", **kwargs)

    def members_seen_by(self, broker: ClusterBroker) -> set[int]:
        resp = self.get(broker, "/brokers", headers={"Accept": V2})
        assert resp.status_code == 200, f"GET /brokers on {broker!r}: {resp.status_code} {resp.text}"
        return set(resp.json()["brokers"])

    def wait_members(self, expected: set[int]) -> None:
        """Until every live broker's ``GET /brokers`` lists exactly ``expected``."""

        def agreed() -> bool:
            seen = {b.broker_id: sorted(self.members_seen_by(b)) for b in self.live()}
            assert all(ids == sorted(expected) for ids in seen.values()), f"GET /brokers per broker: {seen}"
            return True

        wait_until(agreed, f"every live broker to list brokers {sorted(expected)}")

    def partitions(self, topic: str, via: ClusterBroker | None = None) -> dict[int, dict]:
        """``GET /topics/{topic}/partitions`` on ``via`` (or the first live broker),
        keyed by partition."""
        via = via or self.live()[0]
        resp = self.get(via, f"/topics/{topic}/partitions", headers={"Accept": V2})
        assert resp.status_code == 200, f"partitions of {topic} on {via!r}: {resp.status_code} {resp.text}"
        return {p["partition"]: p for p in resp.json()}

    @staticmethod
    def in_sync(partition: dict) -> set[int]:
        return {r["broker"] for r in partition["replicas"] if r["in_sync"]}

    @staticmethod
    def replica_ids(partition: dict) -> list[int]:
        return [r["broker"] for r in partition["replicas"]]

    def leader(self, topic: str, partition: int, via: ClusterBroker | None = None) -> int:
        return self.partitions(topic, via)[partition]["leader"]

    def assert_healthy(self, topic: str) -> bool:
        """Every live broker agrees that every partition has a live leader and every
        replica is live and in sync (an AssertionError says where not)."""
        live = self.live_ids()
        views = {}
        for b in self.live():
            view = {}
            for p, part in self.partitions(topic, b).items():
                replicas = set(self.replica_ids(part))
                assert part["leader"] in live and replicas <= live and self.in_sync(part) == replicas, (
                    f"broker {b.broker_id} sees partition {p} as {part} (live brokers: {sorted(live)})"
                )
                view[p] = (part["leader"], sorted(replicas))
            views[b.broker_id] = view
        assert len({repr(v) for v in views.values()}) == 1, f"the brokers disagree: {views}"
        return True

    def wait_healthy(self, topic: str, what: str = "") -> None:
        wait_until(
            lambda: self.assert_healthy(topic),
            f"{topic}: every partition led and fully in sync on every live broker {what}".strip(),
        )

    def wait_view(self, topic: str, partition: int, check: Callable[[dict], bool], what: str,
                  via: list[ClusterBroker] | None = None, timeout_s: float = SETTLE_S) -> None:
        """Until ``check(partition state)`` holds on every broker of ``via`` (default:
        every live broker)."""

        def holds() -> bool:
            for b in via or self.live():
                state = self.partitions(topic, b)[partition]
                assert check(state), f"broker {b.broker_id} sees {state}"
            return True

        wait_until(holds, f"{topic}-{partition}: {what}", timeout_s)

    def wait_new_leaders(self, topic: str, partitions: list[int], dead: int, killed_at: float) -> dict[int, int]:
        """Poll the live brokers until, for each partition, one reports a live leader
        other than ``dead``; fail past :data:`ELECTION_BOUND_S` after ``killed_at``.
        Returns the new leaders."""
        found: dict[int, int] = {}
        seen: dict[int, Any] = {}
        while True:
            for b in self.live():
                try:
                    view = self.partitions(topic, b)
                except (AssertionError, httpx.HTTPError) as exc:
                    seen[b.broker_id] = repr(exc)[:200]
                    continue
                seen[b.broker_id] = {p: view[p]["leader"] for p in partitions}
                live = self.live_ids()
                for p in partitions:
                    leader = view[p]["leader"]
                    if p not in found and leader != dead and leader in live:
                        found[p] = leader
            if len(found) == len(partitions):
                return found
            waited = time.monotonic() - killed_at
            assert waited <= ELECTION_BOUND_S, (
                f"{topic}: partitions {sorted(set(partitions) - set(found))} had no new live leader "
                f"{waited:.1f}s after their leader {dead} was killed (the bound is the session "
                f"timeout {SESSION_TIMEOUT_MS} ms plus a few seconds: {ELECTION_BOUND_S:.0f}s); "
                f"leaders last seen per broker: {seen}"
            )
            time.sleep(0.05)

    # -- topics, produce, fetch ------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None, via: ClusterBroker | None = None) -> httpx.Response:
        merged = {"table.flush.interval.ms": TABLE_FLUSH_MS, **(configs or {})}
        with Rest((via or self.live()[0]).url) as rest:
            return rest.create_topic(name, partitions, replication_factor, merged)

    def make_topic(self, name: str, partitions: int, replication_factor: int,
                   configs: dict[str, str] | None = None) -> str:
        """Create a topic and wait until every live broker sees it led and in sync."""
        resp = self.create_topic(name, partitions, replication_factor, configs)
        assert resp.status_code in (200, 201), f"creating {name}: {resp.status_code} {resp.text}"
        self.wait_healthy(name, "after creation")
        return name

    def produce(self, via: ClusterBroker, topic: str, partition: int, values: list[str],
                acks: str = "all") -> httpx.Response:
        """One v2 binary produce of ``values`` to a partition, sent to ``via``."""
        body = {"records": [{"value": b64(v)} for v in values]}
        return httpx.post(
            f"{via.url}/topics/{topic}/partitions/{partition}",
            json=body,
            params={"acks": acks},
            headers={"Content-Type": BINARY_V2, "Accept": V2},
            timeout=60.0,
        )

    def read(self, topic: str, partition: int, end: int, via: ClusterBroker) -> list[tuple[int, str]]:
        """``(offset, value)`` of every record of ``[0, end)``, fetched through ``via``."""
        with Rest(via.url) as rest:
            entries = rest.fetch_range(topic, partition, 0, end)
        return [(e["offset"], base64.b64decode(e["value"]).decode()) for e in entries]

    def end_offset(self, topic: str, partition: int, via: ClusterBroker) -> int:
        resp = self.get(via, f"/topics/{topic}/partitions/{partition}/offsets")
        assert resp.status_code == 200, f"offsets of {topic}-{partition} on {via!r}: {resp.text}"
        return resp.json()["end_offset"]

    def settled_end_offsets(self, topic: str, partitions: list[int], via: ClusterBroker) -> dict[int, int]:
        """End offsets once two reads a few heartbeats apart agree (no producer runs,
        so only the high watermark catching up can still move them)."""
        previous: dict[int, int] = {}

        def stable() -> dict[int, int] | None:
            nonlocal previous
            now = {p: self.end_offset(topic, p, via) for p in partitions}
            same = now == previous
            previous = now
            return now if same else None

        return wait_until(stable, f"end offsets of {topic} to settle", every_s=1.0)

    def read_all(self, topic: str, partitions: list[int], via: ClusterBroker) -> tuple[dict, dict]:
        """(logs, end offsets) of every partition, read through ``via`` from 0."""
        ends = self.settled_end_offsets(topic, partitions, via)
        return {p: self.read(topic, p, ends[p], via) for p in partitions}, ends
