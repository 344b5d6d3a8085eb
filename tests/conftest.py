"""Shared fixtures: real laketail brokers on 127.0.0.1, and fresh topics on them.

A :class:`BrokerProcess` is one ``python -m laketail.cli serve`` child process with
its own data directory and port. It is ready once ``GET /v3/clusters`` answers 200;
a broker that exits or stays deaf past :data:`READY_TIMEOUT_S` fails the test with
the tail of its stderr. ``kill9()`` is a crash (SIGKILL to the broker's process group,
then reap it), ``restart()`` starts it again on the same data directory and port,
``stop()`` is a clean shutdown (SIGTERM, SIGKILL only past a deadline). Test brokers
tier in a thread unless given :data:`WITH_TIER_CHILD` (see :data:`TIER_IN_PROCESS`).

Fixtures:

* ``broker`` -- one broker for the whole session, shared by every test that does not
  need a broker of its own; tests isolate themselves with fresh topics.
* ``broker_factory`` -- ``broker_factory(env=None)`` starts a private broker (for tests
  that kill, restart or reconfigure it); all are stopped at the end of the test.
* ``make_topic`` -- ``make_topic(partitions=1, configs=None, broker=None)`` creates a
  uniquely named topic (on the shared broker unless told otherwise) and returns its
  name. Topics get a small ``table.flush.interval.ms`` so tests that wait for the
  Delta table do not wait long; those on the shared broker are deleted after the test.
* ``topic`` -- a fresh one-partition topic on the shared broker.
* ``few_topics_broker`` -- a second session broker for the tests whose cost grows with
  the topics the shared one holds (views over every topic, a follower over all).
* ``spark`` -- the run's one SparkSession (one JVM for every test that uses it).

Markers (tests/README.md): a test gets ``integration`` when its fixtures start a broker
(``broker``, ``broker_factory``, ``make_topic``, ``topic``, ``cluster``, or any fixture
named ``*_broker``: the modules' own brokers, ``sasl_broker``, ...) and ``spark``
when it uses ``spark``, so ``make test-fast`` can leave them out by marker without each
file having to say so.

Waiting is always polling for a condition with a deadline; a deadline bounds how long
a broken broker can hang a test, it is not a claim about speed.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, TypeVar

import httpx
import pytest

#: How long a broker may take to answer its first request (imports, recovery).
READY_TIMEOUT_S = 120.0
#: How long a clean shutdown (SIGTERM) may take before the broker is killed.
STOP_TIMEOUT_S = 30.0
#: Per-request HTTP timeout of the test clients (a failure bound, not a speed claim).
HTTP_TIMEOUT_S = 60.0
#: ``table.flush.interval.ms`` of the topics tests create.
TEST_TABLE_FLUSH_MS = "100"

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
V2 = "application/vnd.kafka.v2+json"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, limit: int = 6000) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "<no output>"
    return text if len(text) <= limit else "...\n" + text[-limit:]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


class Rest:
    """A thin client for the gateway's HTTP API, returning raw ``httpx.Response``s.

    It builds request bodies in the documented shapes (Confluent v2 and v3, Redpanda's
    fetch) and leaves every assertion to the test. Thread-safe enough for the tests:
    each thread that produces concurrently should still make its own ``Rest``.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S)
        self._cluster_id: str | None = None

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Rest":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata --------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            resp = self.http.get("/v3/clusters")
            assert resp.status_code == 200, resp.text
            self._cluster_id = resp.json()["data"][0]["cluster_id"]
        return self._cluster_id

    def v3(self, path: str = "") -> str:
        return f"/v3/clusters/{self.cluster_id}{path}"

    def partition_ids(self, topic: str) -> list[int]:
        resp = self.http.get(f"/topics/{topic}/partitions", headers={"Accept": V2})
        assert resp.status_code == 200, resp.text
        return sorted(p["partition"] for p in resp.json())

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(beginning_offset, end_offset) of one partition, Confluent v2."""
        resp = self.http.get(f"/topics/{topic}/partitions/{partition}/offsets")
        assert resp.status_code == 200, resp.text
        body = resp.json()
        return body["beginning_offset"], body["end_offset"]

    def end_offsets(self, topic: str) -> dict[int, int]:
        return {p: self.offsets(topic, p)[1] for p in self.partition_ids(topic)}

    # -- admin -----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int | None = 1,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {"topic_name": name}
        if partitions is not None:
            body["partitions_count"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        if configs:
            body["configs"] = [{"name": k, "value": v} for k, v in configs.items()]
        return self.http.post(self.v3("/topics"), json=body)

    # -- produce ---------------------------------------------------------------------

    def produce_binary(
        self,
        topic: str,
        records: list[dict[str, Any]],
        *,
        partition: int | None = None,
        acks: str | None = None,
    ) -> httpx.Response:
        """v2 binary produce; record dicts hold ``key``/``value`` as bytes or None and
        an optional ``partition``. Keys left out of a dict are left out of the body."""
        body = {"records": [self._binary_record(r) for r in records]}
        return self.produce_v2_raw(topic, body, BINARY_V2, partition=partition, acks=acks)

    def produce_json(
        self,
        topic: str,
        records: list[dict[str, Any]],
        *,
        partition: int | None = None,
        acks: str | None = None,
    ) -> httpx.Response:
        """v2 json produce: ``key``/``value`` are embedded as JSON as given."""
        return self.produce_v2_raw(topic, {"records": records}, JSON_V2, partition=partition, acks=acks)

    def produce_v2_raw(
        self,
        topic: str,
        body: Any,
        content_type: str = BINARY_V2,
        *,
        partition: int | None = None,
        acks: str | None = None,
    ) -> httpx.Response:
        path = f"/topics/{topic}" if partition is None else f"/topics/{topic}/partitions/{partition}"
        params = {"acks": acks} if acks is not None else None
        headers = {"Content-Type": content_type, "Accept": V2}
        if isinstance(body, (bytes, str)):
            return self.http.post(path, content=body, headers=headers, params=params)
        return self.http.post(path, json=body, headers=headers, params=params)

    @staticmethod
    def _binary_record(record: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in ("key", "value"):
            if field in record:
                raw = record[field]
                out[field] = b64(raw) if isinstance(raw, (bytes, type(None))) else raw
        if record.get("partition") is not None:
            out["partition"] = record["partition"]
        return out

    def produce_v3(self, topic: str, body: Any, *, acks: str | None = None) -> httpx.Response:
        """v3 produce: one record (a dict), or a list sent as concatenated JSON (the
        streaming mode), or raw bytes/str sent as is."""
        params = {"acks": acks} if acks is not None else None
        path = self.v3(f"/topics/{topic}/records")
        headers = {"Content-Type": "application/json"}
        if isinstance(body, list):
            import json

            content = "".join(json.dumps(r) for r in body)
            return self.http.post(path, content=content, headers=headers, params=params)
        if isinstance(body, (bytes, str)):
            return self.http.post(path, content=body, headers=headers, params=params)
        return self.http.post(path, json=body, headers=headers, params=params)

    # -- fetch -----------------------------------------------------------------------

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        timeout_ms: int | None = 0,
        max_bytes: int | None = 50_000_000,
        max_records: int | None = None,
        fmt: str = "binary",
        http_timeout_s: float | None = None,
    ) -> httpx.Response:
        """Redpanda-style fetch by offset; ``fmt`` picks the Accept'ed embedded format."""
        params: dict[str, Any] = {"offset": offset}
        if timeout_ms is not None:
            params["timeout"] = timeout_ms
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        if max_records is not None:
            params["max_records"] = max_records
        accept = {"binary": BINARY_V2, "json": JSON_V2}[fmt]
        kwargs: dict[str, Any] = {}
        if http_timeout_s is not None:
            kwargs["timeout"] = http_timeout_s
        return self.http.get(
            f"/topics/{topic}/partitions/{partition}/records",
            params=params,
            headers={"Accept": accept},
            **kwargs,
        )

    def fetch_range(self, topic: str, partition: int, start: int, end: int) -> list[dict]:
        """Every record of ``[start, end)`` (binary format), fetched in as many requests
        as the broker's limits need; raw response entries."""
        out: list[dict] = []
        offset = start
        while offset < end:
            resp = self.fetch(topic, partition, offset)
            assert resp.status_code == 200, resp.text
            batch = resp.json()
            assert batch, f"fetch at {offset} of {topic}-{partition} returned nothing before {end}"
            out.extend(batch)
            offset = batch[-1]["offset"] + 1
        return [r for r in out if r["offset"] < end]


#: Test brokers tier in a worker thread, not in a tier child process: the same pass
#: (``laketail.storage.tierer.execute_pass``) without a second interpreter per broker.
#: Tests of the child itself, of the process layout and the Jepsen run pass
#: :data:`WITH_TIER_CHILD`, the production default.
TIER_IN_PROCESS = {"LAKETAIL_TIERER_PROCESS": "false"}
WITH_TIER_CHILD = {"LAKETAIL_TIERER_PROCESS": "true"}


class BrokerStartError(RuntimeError):
    """The broker process exited or did not answer before the deadline."""


class BrokerProcess:
    """One real ``laketail serve`` process, restartable on the same data and port."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        broker_id: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = self.data_dir.parent / f"{self.data_dir.name}-run"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.broker_id = broker_id
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._rest: Rest | None = None

    # -- process control ---------------------------------------------------------------

    @property
    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "laketail.cli", "serve",
            "--data", str(self.data_dir),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--broker-id", str(self.broker_id),
            "--no-maintenance",  # no spark-submit in the background of unrelated tests
        ]

    @property
    def stderr_path(self) -> Path:
        return self.run_dir / f"stderr-{self.starts}.log"

    @property
    def stdout_path(self) -> Path:
        return self.run_dir / f"stdout-{self.starts}.log"

    def _child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
        env["PYTHONUNBUFFERED"] = "1"
        env["LAKETAIL_REQUEST_PROCESSES"] = "1"  # not one per core: the suite's time budget; a test may ask for more
        env.update(TIER_IN_PROCESS)
        env.update(self.extra_env)
        return env

    def start(self) -> "BrokerProcess":
        """Start and wait until ready. On the very first start only, a port someone
        grabbed since :func:`free_port` picked it is swapped for another."""
        for attempt in range(3):
            try:
                return self._start_once()
            except BrokerStartError:
                taken = "address already in use" in self.output().lower()
                if self.starts > 1 + attempt or not taken or attempt == 2:
                    raise
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def _start_once(self) -> "BrokerProcess":
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # cwd is the run dir so that no conf/laketail.toml of the caller is read.
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.run_dir,
                env=self._child_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.wait_ready()
        return self

    def output(self) -> str:
        return (
            f"--- stderr ({self.stderr_path}) ---\n{_tail(self.stderr_path)}\n"
            f"--- stdout ({self.stdout_path}) ---\n{_tail(self.stdout_path, 2000)}"
        )

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        last_error = "no answer yet"
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise BrokerStartError(
                        f"broker {' '.join(self.argv)} exited with code {code} before "
                        f"answering GET /v3/clusters\n{self.output()}"
                    )
                try:
                    resp = client.get(f"{self.url}/v3/clusters")
                    if resp.status_code == 200:
                        return
                    last_error = f"HTTP {resp.status_code}: {resp.text[:500]}"
                except httpx.HTTPError as exc:
                    last_error = repr(exc)
                if time.monotonic() > deadline:
                    self._signal(signal.SIGKILL)
                    self.proc.wait()
                    raise BrokerStartError(
                        f"broker {' '.join(self.argv)} did not answer GET /v3/clusters within "
                        f"{timeout_s:.0f}s (last: {last_error})\n{self.output()}"
                    )
                time.sleep(0.05)

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """Crash the broker: SIGKILL, no chance to flush or close anything."""
        assert self.proc is not None
        self._signal(signal.SIGKILL)
        self.proc.wait()
        self._drop_client()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Clean shutdown; returns the exit code, or None when it had to be killed."""
        if self.proc is None:
            return None
        self._drop_client()
        if self.proc.poll() is not None:
            return self.proc.returncode
        self._signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait()
            return None

    def restart(self) -> "BrokerProcess":
        """Start again on the same data directory and port (stopping cleanly first if
        it is still running)."""
        if self.running:
            self.stop()
        return self.start()

    # -- clients ---------------------------------------------------------------------

    @property
    def rest(self) -> Rest:
        """A client for this broker (a new one after every restart)."""
        if self._rest is None:
            self._rest = Rest(self.url)
        return self._rest

    def new_client(self) -> Rest:
        """A client of its own (for a thread); the caller closes it."""
        return Rest(self.url)

    def _drop_client(self) -> None:
        if self._rest is not None:
            self._rest.close()
            self._rest = None

    def table_path(self, topic: str) -> Path:
        return self.data_dir / "topics" / topic


#: Broker settings that make group rebalances quick (no initial rebalance delay, session
#: timeouts from 500 ms): for module brokers of group tests.
QUICK_GROUPS = {
    "LAKETAIL_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    "LAKETAIL_GROUP_MIN_SESSION_TIMEOUT_MS": "500",
}


#: The shared broker's settings (see ``broker``).
SHARED_BROKER_ENV = {
    "LAKETAIL_OFFSETS_TOPIC_NUM_PARTITIONS": "4",
    "LAKETAIL_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "4",
}


_Proc = TypeVar("_Proc", bound="BrokerProcess")


def running(proc: _Proc) -> Iterator[_Proc]:
    """``proc`` started, for a fixture to ``yield from``; stopped after."""
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()


def running_broker(tmp_path_factory: pytest.TempPathFactory, name: str,
                   env: dict[str, str]) -> Iterator[BrokerProcess]:
    """A broker started with ``env`` for a module-scoped fixture to yield, stopped after."""
    return running(BrokerProcess(tmp_path_factory.mktemp(name) / "data", env=env))


#: Fixtures whose use makes a test ``integration``: each starts (or needs) broker processes.
BROKER_FIXTURES = frozenset({"broker", "broker_factory", "make_topic", "topic", "cluster"})


#: Directories whose tests run Spark in the pytest process (the ``spark`` fixture, or a
#: job's ``main`` that gets the session from ``getOrCreate``).
JVM_DIRS = ("spark", "jobs")


def _xdist_group(item: pytest.Item, fixtures: set[str]) -> str | None:
    """Under pytest-xdist (``-n N --dist loadgroup``): the group whose tests one worker
    runs one after another. Every test that runs Spark in process is in ``jvm``, so the
    run still starts one SparkSession; every other test that kills a process is in
    ``fault``, so kill tests never overlap each other. Everything else is spread."""
    tests = Path(__file__).parent
    top = item.path.relative_to(tests).parts[0] if item.path.is_relative_to(tests) else ""
    if "spark" in fixtures or top in JVM_DIRS or "spark" in item.path.name:
        return "jvm"
    if item.get_closest_marker("fault") is not None:
        return "fault"
    return None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    distributed = hasattr(config, "workerinput")  # collected by a pytest-xdist worker
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & BROKER_FIXTURES or any(name.endswith("_broker") for name in fixtures):
            item.add_marker(pytest.mark.integration)
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
        group = _xdist_group(item, fixtures) if distributed else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _unique_topic_name(request: pytest.FixtureRequest) -> str:
    stem = re.sub(r"[^a-zA-Z0-9-]+", "-", request.node.name).strip("-")[:60]
    return f"{stem}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The session's shared broker. Its internal topics have 4 partitions, not Kafka's
    50: a job that reads ``__consumer_offsets`` from the start (the lag query) then
    plans 4 Spark tasks instead of 50, and every tier pass walks 8 internal partitions."""
    yield from running_broker(tmp_path_factory, "shared-broker", SHARED_BROKER_ENV)


@pytest.fixture(scope="session")
def few_topics_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A second session broker, for the few tests whose cost grows with the topics the
    shared one holds by their turn: views over *every* topic (``register_topics``
    without names, a follower over all of them). On the shared broker, late in a full
    run, they took 56-103 s each; here they see only their own topics."""
    yield from running_broker(tmp_path_factory, "few-topics-broker", SHARED_BROKER_ENV)


@pytest.fixture
def broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``broker_factory(env=None, broker_id=0)``: a private, started broker."""
    started: list[BrokerProcess] = []

    def make(env: dict[str, str] | None = None, broker_id: int = 0) -> BrokerProcess:
        proc = BrokerProcess(
            tmp_path_factory.mktemp("broker") / "data", broker_id=broker_id, env=env
        )
        started.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in started:
            proc.stop()


@pytest.fixture
def make_topic(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make_topic(partitions=1, configs=None, broker=None) -> name``; the shared
    broker is only started when no other broker is given.

    Topics made on the shared broker are deleted after the test. Its tierer visits
    every topic each ``table.flush.interval.ms`` (100 ms here), idle or not: with the
    topics of every earlier test kept, the shared broker burnt a growing share of a
    core late in a run (22 % of one with 400 idle topics, 1.5 % for a broker with three),
    on a machine of two."""
    made: list[tuple[BrokerProcess, str]] = []

    def make(
        partitions: int = 1,
        configs: dict[str, str] | None = None,
        broker: BrokerProcess | None = None,
        name: str | None = None,
    ) -> str:
        target = broker or request.getfixturevalue("broker")
        name = name or _unique_topic_name(request)
        merged = {"table.flush.interval.ms": TEST_TABLE_FLUSH_MS, **(configs or {})}
        resp = target.rest.create_topic(name, partitions, configs=merged)
        assert resp.status_code in (200, 201), f"creating topic {name}: {resp.status_code} {resp.text}"
        if broker is None:
            made.append((target, name))
        return name

    yield make
    for target, name in made:
        rest = target.rest
        resp = rest.http.delete(rest.v3(f"/topics/{name}"))
        assert resp.status_code in (204, 404), f"deleting topic {name}: {resp.status_code} {resp.text}"


@pytest.fixture
def topic(make_topic: Any) -> str:
    """A fresh one-partition topic on the shared broker."""
    return make_topic()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The run's one SparkSession: local[2], two shuffle partitions, no UI, built by
    :func:`laketail.spark.session.local_session` -- the jobs build theirs the same way
    and get this one from ``getOrCreate``, so a run starts one JVM."""
    from laketail.spark.session import local_session

    session = local_session("laketail-tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    try:
        yield session
    finally:
        session.stop()
