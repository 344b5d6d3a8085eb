"""Request processes: one machine's broker served by several processes (issue 18).

One Python process serves requests on about one core: its event loop holds the GIL
while it parses, plans, frames and answers (bench/README.md, "The lean produce path").
With ``laketail.request.processes=N`` (``laketail serve --processes N``) the broker runs
N processes, and each one owns what it leads outright: its partitions' hot logs, group
commits, producer state and tier child. Nothing is shared between them but the data root,
the client port and the hand-off sockets. Not set, N is the number of usable cores
(:func:`usable_cores`: the affinity mask and the cgroup's CPU quota; :func:`decide`),
so ``laketail serve`` uses the machine as it is given; ``--processes 1`` runs one.

How they divide the work:

* **Each process is a member of the cluster on the data root**, with an id of its own
  (process ``k`` is ``broker.id + k *`` :data:`PROCESS_ID_STRIDE`, so that brokers
  numbered 0, 1, 2 each with several processes never share an id), its own hot-log directory (``log.dirs`` of the
  first, with ``-k`` appended for the others, when set) and its own tier child. The
  controller spreads new topics' leaders round-robin over live brokers, so each process
  leads its share of the partitions. To clients they are one broker: the gateway and
  the console show every member as its broker (:func:`broker_id_of`), so ``GET /brokers``
  lists ``broker.id`` once and a partition led by any process is led by it.
* **They share the client port** through ``SO_REUSEPORT``: the kernel spreads client
  connections over the processes. A keyless produce lands on a partition that the
  process it reached leads (the sticky partitioner choosing among those,
  :meth:`laketail.partitioner.StickyPartitioner.next_batch_among`), so it is never
  forwarded. Keyed records and explicit partitions led by another process are parsed and
  framed where they arrived and their appends handed to the leading process over a Unix
  socket (:mod:`laketail.handoff`), one hand-off per request and sibling. The rest
  (fetches the process cannot read from the leader's files, the coordinators on the
  controller) is forwarded over the inter-broker listener exactly as between the brokers
  of any cluster.
* **Each process listens for its peers on a loopback port of its own**
  (``inter.broker.listener.name=BROKER``), where they authenticate with
  ``laketail.inter.broker.secret``: the configured one, else a random one the first
  process makes and hands to the others in their environment.

The first process (the one ``serve`` started) supervises the others
(:class:`Supervisor`): it starts them, starts again one that exits, and stops them
(SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`) when it stops itself. Killed with
``kill -9`` it takes them along (:mod:`laketail.parent_death`); ``serve`` again starts
all of them on the same ids and directories.

Explicit ``listeners`` (TLS, SASL) are split the same way: every configured listener,
the configured inter-broker one included, becomes a client listener all the processes
bind, and each process adds its loopback listener for its peers (``BROKER``, or
``REQUEST_PROCESSES`` when the configuration names one ``BROKER``). Request processes
are one machine's broker: brokers on other machines cannot reach those loopback
listeners. Not split: port 0 (every process must bind the same ports; refused when N is
set, one process when it is not).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import mmap
import os
import secrets
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from laketail.config import BrokerSettings
from laketail.errors import InvalidConfig
from laketail.parent_death import die_with_parent_preexec
from laketail.security.listeners import parse_entries
from laketail.storage import object_store

log = logging.getLogger("laketail.request_processes")

#: More processes than this on one machine is a typing error, not a plan.
MAX_PROCESSES = 64
#: How long a stopping process waits for the others' orderly shutdown before SIGKILL.
STOP_TIMEOUT_S = 30.0
#: Pause before starting a process again that exited; doubles while it keeps exiting
#: within :data:`HEALTHY_AFTER_S`, up to :data:`MAX_BACKOFF_S`.
RESTART_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0
HEALTHY_AFTER_S = 30.0

CLIENT_LISTENER = "CLIENT"
BROKER_LISTENER = "BROKER"
#: the processes' own inter-broker listener when the configured listeners use BROKER
PEER_LISTENER = "REQUEST_PROCESSES"


#: Request process ``k`` of broker ``b`` is cluster member ``b + k * PROCESS_ID_STRIDE``:
#: consecutive broker ids (0, 1, 2) stay apart whatever their processes, and every id
#: fits Kafka's int32 (:data:`MAX_PROCESSES` strides).
PROCESS_ID_STRIDE = 1_000_000


def process_id(broker_id: int, index: int) -> int:
    """The cluster member id of request process ``index`` of broker ``broker_id``."""
    return broker_id + index * PROCESS_ID_STRIDE


def broker_id_of(member_id: int) -> int:
    """The broker a cluster member is to clients: request process ``k`` of broker ``b``
    (member ``b + k *`` :data:`PROCESS_ID_STRIDE`) is broker ``b``; -1 (no leader) stays.
    The one mapping of the outward views (the REST gateway's brokers, partitions and
    replicas, the console): inside the cluster (controller, ISR, sessions, ``/internal``,
    the ``_system`` tables) the members stay distinct."""
    return member_id % PROCESS_ID_STRIDE if member_id >= 0 else member_id


def broker_ids_of(member_ids: Iterable[int]) -> list[int]:
    """:func:`broker_id_of` of each, in order, each broker once: a partition's replicas or
    ISR as clients see them (a broker is in sync when any of its members is)."""
    return list(dict.fromkeys(broker_id_of(m) for m in member_ids))


#: Where the kernel shows cgroups, and which ones this process is in.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
#: ``laketail.request.processes`` when not set: one per usable core (:func:`decide`).
AUTO = 0


def usable_cores(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP,
                 affinity: int | None = None) -> int:
    """The cores this process may run on: the CPUs of its affinity mask
    (``os.sched_getaffinity``, what ``taskset`` and a container's cpuset leave), capped by
    the tightest CPU quota of its cgroup and the cgroup's ancestors (cgroup v2
    ``cpu.max``, or v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``: what ``docker run
    --cpus`` and a Kubernetes CPU limit set), rounded up; at least 1.
    ``cgroup_root`` and ``proc_cgroup`` are the kernel's files (a test gives its own)."""
    cores = len(os.sched_getaffinity(0)) if affinity is None else affinity
    quota = _cgroup_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def _cgroup_quota(root: Path, proc_cgroup: Path) -> float | None:
    """The tightest CPU quota, in cores, over this process's cgroups; None when none is set."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and not controllers:
            base, v2 = root, True  # the unified hierarchy
        elif "cpu" in controllers.split(","):
            base, v2 = (root / "cpu" if (root / "cpu").is_dir() else root / controllers), False
        else:
            continue
        rel = Path(path.lstrip("/"))
        for directory in (rel, *rel.parents):
            quota = _quota_v2(base / directory) if v2 else _quota_v1(base / directory)
            if quota is not None:
                quotas.append(quota)
    return min(quotas) if quotas else None


def _quota_v2(directory: Path) -> float | None:
    try:
        limit, period = (directory / "cpu.max").read_text().split()[:2]
        return None if limit == "max" else int(limit) / int(period)
    except (OSError, ValueError):
        return None


def _quota_v1(directory: Path) -> float | None:
    try:
        limit = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if limit <= 0 or period <= 0 else limit / period


def decide(settings: BrokerSettings, cores: int | None = None) -> tuple[BrokerSettings, str]:
    """``settings`` with the number of request processes decided, and why. Set
    (``--processes``, the key), it stands (:func:`check` then refuses what cannot be
    split). Not set (:data:`AUTO`): one per usable core (:func:`usable_cores`, ``cores``
    in a test), capped at :data:`MAX_PROCESSES`; one where several cannot share what
    the configuration asks for: a port 0 (each process would bind a port of its own),
    or an advertised URL, advertised listeners or an inter-broker listener (brokers on
    other hosts would have to reach every process, whose peer listeners are on
    loopback). A Kafka-protocol listener is shared like the HTTP one (every process
    serves it, :mod:`laketail.kafka.server`)."""
    if settings.request_processes != AUTO:
        return settings, "configured"
    if 0 in _ports(settings):
        why = "1 (laketail.request.processes not set, and port 0 cannot be shared by several processes)"
        return dataclasses.replace(settings, request_processes=1), why
    if settings.advertised_url or settings.advertised_listeners or settings.inter_broker_listener_name:
        # The processes reach one another on loopback listeners only; brokers on other
        # hosts could not reach the partitions a second process leads.
        why = ("1 (laketail.request.processes not set, and advertised.url, advertised.listeners or "
               "inter.broker.listener.name says brokers on other hosts reach this one)")
        return dataclasses.replace(settings, request_processes=1), why
    n = min(MAX_PROCESSES, usable_cores() if cores is None else cores)
    return dataclasses.replace(settings, request_processes=n), f"{n}, one per usable core"


def _ports(settings: BrokerSettings) -> list[int]:
    if settings.listeners:
        return [port for _, _, port in parse_entries(settings.listeners, "listeners")]
    return [settings.port]


def check(settings: BrokerSettings) -> None:
    """Refuse what the processes cannot share (raised before anything starts)."""
    n = settings.request_processes
    if not 1 <= n <= MAX_PROCESSES:
        raise InvalidConfig(f"laketail.request.processes={n}: between 1 and {MAX_PROCESSES}")
    if settings.broker_id >= PROCESS_ID_STRIDE:
        # Ids from the stride up are request processes' members, shown to clients as
        # their broker's (broker_id_of): a broker configured with one would be shown as another.
        raise InvalidConfig(f"broker.id={settings.broker_id}: below {PROCESS_ID_STRIDE}, as process k of a "
                            f"broker is cluster member broker.id + k * {PROCESS_ID_STRIDE}")
    if n == 1:
        return
    if 0 in _ports(settings):
        raise InvalidConfig(f"laketail.request.processes={n} needs fixed ports: every process binds the same "
                            "ones, and port 0 would give each its own; name a port, or run one process")


def process_settings(settings: BrokerSettings, index: int) -> BrokerSettings:
    """Process ``index``'s settings: its broker id and hot logs, the shared client
    listener and an inter-broker listener on a free loopback port of its own."""
    def log_dir(k: int) -> str:
        if settings.log_dir and k:
            return f"{settings.log_dir.rstrip('/')}-{k}"
        return str(dataclasses.replace(settings, broker_id=process_id(settings.broker_id, k)).hot_log_dir)

    own = dataclasses.replace(
        settings,
        broker_id=process_id(settings.broker_id, index),
        log_dir=log_dir(index),
        request_process_log_dirs={process_id(settings.broker_id, k): log_dir(k)
                                  for k in range(settings.request_processes)},
        inter_broker_secret=settings.inter_broker_secret or secrets.token_urlsafe(32),
    )
    peer = f"://127.0.0.1:{_free_loopback_port()}"
    entries = parse_entries(settings.listeners, "listeners") if settings.listeners else []
    kafka_names = {n.strip().upper() for n in settings.kafka_listener_names.split(",") if n.strip()}
    if all(name in kafka_names for name, _, _ in entries):
        # No HTTP listener named (none at all, or only Kafka-protocol ones): HTTP serves
        # host:port as the CLIENT listener, the Kafka ones stay as configured.
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        kafka = "".join(f"{n}://{f'[{h}]' if ':' in h else h}:{p}," for n, h, p in entries)
        protocols = settings.listener_security_protocol_map.strip().rstrip(",")
        return dataclasses.replace(
            own,
            advertised_url=settings.advertised_url or f"http://{host}:{settings.port}",
            listeners=f"{CLIENT_LISTENER}://{host}:{settings.port},{kafka}{BROKER_LISTENER}{peer}",
            listener_security_protocol_map=(f"{protocols}," if protocols and entries else "")
            + f"{CLIENT_LISTENER}:PLAINTEXT,{BROKER_LISTENER}:PLAINTEXT",
            inter_broker_listener_name=BROKER_LISTENER,
        )
    # Explicit listeners (TLS, SASL): every one of them is a client listener that all the
    # processes bind, and the processes reach one another on a loopback listener each.
    names = {name for name, _, _ in entries}
    name = BROKER_LISTENER if BROKER_LISTENER not in names else PEER_LISTENER
    protocols = settings.listener_security_protocol_map.strip().rstrip(",")
    return dataclasses.replace(
        own,
        listeners=f"{settings.listeners.strip().rstrip(',')},{name}{peer}",
        listener_security_protocol_map=f"{protocols},{name}:PLAINTEXT" if protocols else f"{name}:PLAINTEXT",
        inter_broker_listener_name=name,
    )


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shared_socket(host: str, port: int) -> socket.socket:
    """The client port, bound with ``SO_REUSEPORT`` so that every request process can
    bind it too (uvicorn listens on it when it serves)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class Supervisor:
    """The first process's keeper of the others: processes ``1 .. count-1``, each run
    with ``command(index)`` in ``env``, started again when one exits, stopped with it.

    One thread does all of it: children are forked from that thread, so their parent
    death signal (which the kernel sends when the forking *thread* ends) fires only when
    the first process is gone."""

    def __init__(self, count: int, command: Callable[[int], list[str]], env: dict[str, str]) -> None:
        self.count = count
        self.command = command
        self.env = env
        self._stopping = threading.Event()
        self._procs: dict[int, subprocess.Popen] = {}  # the supervising thread's alone
        self._thread = threading.Thread(target=self._run, name="laketail-request-processes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _spawn(self, index: int) -> None:
        proc = subprocess.Popen(
            self.command(index),
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the first process only; it stops the others
            preexec_fn=die_with_parent_preexec(),  # gone with the first process, even after kill -9
        )
        self._procs[index] = proc
        log.info("request process %d started (pid %d)", index, proc.pid)

    def _run(self) -> None:
        started: dict[int, float] = {}
        backoff: dict[int, float] = {}
        for index in range(1, self.count):
            self._spawn(index)
            started[index] = time.monotonic()
        while not self._stopping.wait(0.2):
            exited = [(i, p.returncode) for i, p in self._procs.items() if p.poll() is not None]
            for index, code in exited:
                ran = time.monotonic() - started[index]
                delay = RESTART_BACKOFF_S if ran >= HEALTHY_AFTER_S else min(
                    MAX_BACKOFF_S, 2 * backoff.get(index, RESTART_BACKOFF_S / 2))
                backoff[index] = delay
                log.warning("request process %d exited (code %s) after %.1f s; starting it again in %.1f s",
                            index, code, ran, delay)
                if self._stopping.wait(delay):
                    break
                self._spawn(index)
                started[index] = time.monotonic()
        self._stop_children()

    def _stop_children(self) -> None:
        procs = list(self._procs.values())
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("request process pid %d did not stop in %.0f s: killed", proc.pid, STOP_TIMEOUT_S)
                proc.kill()
                proc.wait()

    def begin_stop(self) -> None:
        """Tell the others to stop (orderly), without waiting: called when this process
        is told to stop, so that all of them close at once."""
        self._stopping.set()

    def stop(self) -> None:
        """Stop the others (orderly) and wait until they have exited."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()


def child_env(settings: BrokerSettings) -> dict[str, str]:
    """The environment of the other processes: this one's, with the group's secret."""
    env = dict(os.environ)
    env["LAKETAIL_INTER_BROKER_SECRET"] = settings.inter_broker_secret
    return env


def local_dir(settings: BrokerSettings) -> Path:
    """The directory of what the request processes share on this host (the connection
    board, the hand-off sockets): the data root, or beside the hot logs when the data
    root is an object store."""
    return settings.hot_log_dir.parent if object_store.is_remote(settings.data) else Path(settings.data)


class ConnectionBoard:
    """How many client connections each request process holds, in a file every process
    maps (``DATA/request-processes/broker-<first id>.connections``): a slot per process of
    its pid and its count, each written only by its own process.

    The kernel's ``SO_REUSEPORT`` hash spreads connections evenly only when there are
    many. A client keeps its connection for as long as it runs (a producer, a consumer,
    wrk's 8), so a few clients can end up mostly on one process while another idles.
    When a process holds more than its share of the live processes' connections, it
    answers the next request on one of them with ``Connection: close``; the client
    connects again, and the kernel places it anew. One such close at a time per process,
    so the connections move one by one until no process holds more than its share.
    Thread-safety: event loop thread only (each process writes its own slot)."""

    _SLOT = struct.Struct("<qq")  # pid, open connections

    def __init__(self, path: Path, index: int, processes: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = self._SLOT.size * processes
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.index = index
        self.processes = processes
        self.mine = 0
        self.closing = False  # a Connection: close is under way; wait for it before another
        self._pid = os.getpid()
        self._write()

    @classmethod
    def of(cls, settings: BrokerSettings) -> "ConnectionBoard | None":
        """This request process's board; None outside request-process mode."""
        ids = sorted(settings.request_process_log_dirs)
        if len(ids) < 2:
            return None
        path = local_dir(settings) / "request-processes" / f"broker-{ids[0]}.connections"
        return cls(path, ids.index(settings.broker_id), len(ids))

    def _write(self) -> None:
        self._SLOT.pack_into(self._map, self.index * self._SLOT.size, self._pid, self.mine)

    def opened(self) -> None:
        self.mine += 1
        self._write()

    def closed(self, was_closing: bool) -> None:
        self.mine -= 1
        if was_closing:
            self.closing = False
        self._write()

    def over_share(self) -> bool:
        """Whether this process holds more connections than its share of the live
        processes' (and no close is under way already)."""
        if self.closing:
            return False
        slots = [self._SLOT.unpack_from(self._map, k * self._SLOT.size) for k in range(self.processes)]
        if self.mine <= -(-sum(max(0, count) for _, count in slots) // self.processes):
            return False  # the common answer, without a system call
        live = [max(0, count) for k, (pid, count) in enumerate(slots) if k == self.index or _alive(pid)]
        return self.mine > -(-sum(live) // len(live))  # a process that exited holds nothing now


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
