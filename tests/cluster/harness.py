"""A cluster of real brokers in one process, on an in-memory network and a manual clock.

Each :class:`~laketail.broker.Broker` is the real one (catalog, hot logs, Delta tables and
the ``_system`` store under one ``tmp_path``, its gateway app built by ``create_app``);
what is not real is only what the cluster's seams let a test replace:

* the network: :class:`Network` delivers a peer call to the target broker's gateway app
  in-process (``httpx.ASGITransport``), or refuses it as a connection that could not be
  made (``httpx.ConnectError`` / ``PeerUnreached``: nothing sent) when either end is
  isolated or the pair cut -- a network partition a test opens and heals at will (the
  ``_system`` store is shared storage, reachable by all, as object storage would be);
* time: one :class:`~laketail.clock.ManualClock` for every broker, moved by the test
  (session timeouts, ISR lag, liveness);
* the loops: the heartbeat and ISR-check loops are off; :meth:`Cluster.beat` and
  :meth:`Cluster.check_isr` run one round of each on every broker reachable. Replica
  fetches and the controller's metadata pushes run as they do in a broker (event-driven
  tasks), so :meth:`Cluster.settle` waits for them to quiesce.

A broker is started with ``tier_enabled``, ``maintenance_enabled`` and the tier child off.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx

from laketail.api.app import create_app
from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.cluster.metadata import NO_LEADER, PartitionRegistration
from laketail.cluster.wire import PeerResponse, PeerUnreached, raise_for_error
from laketail.config import load_settings

SESSION_MS = 9_000
HEARTBEAT_MS = 2_000
LAG_MS = 10_000
#: The network address of the test's own REST clients (brokers are 1, 2, 3, ...).
CLIENT = 0


class Network:
    """Which broker answers at which URL, and which brokers are cut off."""

    def __init__(self) -> None:
        self.apps: dict[str, tuple[int, httpx.ASGITransport]] = {}  # by netloc
        self.isolated: set[int] = set()  # reaches no one, reached by no one
        self.cuts: set[frozenset[int]] = set()  # pairs that cannot reach each other
        self.calls = 0

    def add(self, broker_id: int, url: str, app: Any) -> None:
        self.apps[httpx.URL(url).netloc.decode()] = (broker_id, httpx.ASGITransport(app=app))

    def reachable(self, src: int, dst: int) -> bool:
        if src == dst:
            return True
        return src not in self.isolated and dst not in self.isolated and frozenset((src, dst)) not in self.cuts

    def heal(self) -> None:
        self.isolated.clear()
        self.cuts.clear()

    async def deliver(self, src: int, request: httpx.Request) -> httpx.Response:
        target = self.apps.get(request.url.netloc.decode())
        if target is None or not self.reachable(src, target[0]):
            raise httpx.ConnectError(f"broker {src} cannot reach {request.url.netloc.decode()}", request=request)
        self.calls += 1
        return await target[1].handle_async_request(request)


class _Route(httpx.AsyncBaseTransport):
    def __init__(self, network: Network, src: int) -> None:
        self.network = network
        self.src = src

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.network.deliver(self.src, request)


class _Peer:
    """A link and a pool at once, over the in-memory network (``cluster/transport.py``'s
    failure contract: PeerUnreached when nothing was sent)."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url

    async def request(self, method: str, path: str, *, params: dict | None = None, content: bytes = b"",
                      content_type: str | None = None, timeout_s: float = 30.0, **_: Any) -> PeerResponse:
        headers = {"content-type": content_type} if content_type else {}
        try:
            resp = await self.client.request(method, self.url + path, params=params, content=content,
                                             headers=headers, timeout=timeout_s)
        except httpx.ConnectError as exc:
            raise PeerUnreached(str(exc)) from exc
        return PeerResponse(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.content)

    async def post_json(self, path: str, payload: dict, timeout_s: float) -> bytes:
        try:
            resp = await self.client.post(self.url + path, json=payload, timeout=timeout_s)
        except httpx.ConnectError as exc:
            raise PeerUnreached(str(exc)) from exc
        raise_for_error(resp)
        return resp.content

    def close(self) -> None:
        pass


class InProcessTransport:
    """A broker's :class:`~laketail.cluster.transport.PeerTransport` on a :class:`Network`."""

    def __init__(self, network: Network, broker_id: int) -> None:
        self.network = network
        self.broker_id = broker_id
        self._client = self.http_client()

    def http_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=_Route(self.network, self.broker_id), timeout=30.0)

    def link(self, url: str) -> _Peer:
        return _Peer(self._client, url)

    def pool(self, url: str) -> _Peer:
        return _Peer(self._client, url)


@dataclass
class Cluster:
    root: Path
    clock: ManualClock = field(default_factory=ManualClock)
    network: Network = field(default_factory=Network)
    brokers: dict[int, Broker] = field(default_factory=dict)
    #: brokers whose rounds do not run: a stalled process (SIGSTOP, a long pause)
    paused: set[int] = field(default_factory=set)

    def url(self, broker_id: int) -> str:
        return f"http://broker-{broker_id}.test:9092"

    async def start(self, broker_id: int, **overrides: Any) -> Broker:
        """Start broker ``broker_id`` (a fresh process of it, when it ran before)."""
        settings = load_settings(
            None, env={}, data=str(self.root), broker_id=broker_id, advertised_url=self.url(broker_id),
            tier_enabled=False, tier_process=False, maintenance_enabled=False,
            broker_session_timeout_ms=SESSION_MS, broker_heartbeat_interval_ms=HEARTBEAT_MS,
            replica_lag_time_max_ms=LAG_MS, replica_fetch_wait_max_ms=200,
            offsets_topic_num_partitions=1, transaction_state_log_num_partitions=1, **overrides,
        )
        broker = Broker(settings, clock=self.clock, peer_transport=InProcessTransport(self.network, broker_id))
        broker.cluster.loops = False  # the test runs the rounds (beat, check_isr)
        self.network.add(broker_id, self.url(broker_id), create_app(settings, broker))
        self.brokers[broker_id] = broker
        await broker.start()
        return broker

    async def close(self) -> None:
        for broker in self.brokers.values():
            with contextlib.suppress(Exception):
                await broker.close()

    # -- the rounds a test drives -----------------------------------------------------------------

    def live(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.broker_id not in self.network.isolated]

    def stop(self, broker_id: int) -> None:
        """Broker ``broker_id`` as a killed process: it reaches no one, no one reaches it,
        and none of its rounds runs (its state stays as the kill left it)."""
        self.network.isolated.add(broker_id)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        """A stopped or stalled broker runs and is reachable again (SIGCONT)."""
        self.network.isolated.discard(broker_id)
        self.paused.discard(broker_id)

    async def restart(self, broker_id: int) -> Broker:
        """A fresh process of broker ``broker_id`` on the same hot logs and data root,
        the old one closed first (as a supervisor would start it after a crash)."""
        old = self.brokers[broker_id]
        with contextlib.suppress(Exception):
            await old.close()
        self.resume(broker_id)
        return await self.start(broker_id)

    def client(self, broker_id: int) -> httpx.AsyncClient:
        """A REST client of broker ``broker_id`` over the network (the test's address is
        ``CLIENT``: a broker isolated or stopped cannot be reached by it either)."""
        return httpx.AsyncClient(transport=_Route(self.network, CLIENT), base_url=self.url(broker_id), timeout=60.0)

    async def beat(self, brokers: list[Broker] | None = None) -> None:
        """One heartbeat round on each broker not paused (the controller's tick on the controller)."""
        for broker in brokers if brokers is not None else list(self.brokers.values()):
            if broker.broker_id not in self.paused:
                await broker.cluster.beat()

    async def advance(self, ms: int, step_ms: int = HEARTBEAT_MS) -> None:
        """Move the clock ``ms`` forward, a heartbeat round at each ``step_ms``."""
        while ms > 0:
            self.clock.advance(min(step_ms, ms))
            ms -= step_ms
            await self.beat()
            await self.settle()

    def check_isr(self) -> None:
        for broker in self.brokers.values():
            if broker.broker_id not in self.paused:
                broker.cluster.replicas.check_isr()

    async def settle(self, rounds: int = 5) -> None:
        """Let the event-driven work (metadata pushes, ISR changes, replica fetches)
        run: yield to the loop a few times, for a few milliseconds each."""
        for _ in range(rounds):
            await asyncio.sleep(0.01)

    async def until(self, what: str, check: Callable[[], bool], step: Callable[[], Awaitable[None]] | None = None,
                    rounds: int = 500) -> None:
        """Wait for ``check`` (an event-driven effect), running ``step`` between looks;
        fails with ``what`` after ``rounds`` looks (a bound on a hang, not a timing claim)."""
        for _ in range(rounds):
            if check():
                return
            await (step() if step is not None else self.settle(1))
        raise AssertionError(f"never happened: {what}")

    # -- what the brokers believe -------------------------------------------------------------------

    def controller(self) -> Broker:
        active = [b for b in self.brokers.values() if b.cluster.is_controller]
        assert len(active) >= 1, "no active controller"
        return max(active, key=lambda b: b.cluster.active_controller.epoch)  # type: ignore[union-attr]

    def registration(self, topic: str, partition: int = 0) -> PartitionRegistration:
        """A copy of the controller's registration (the controller changes its own in place)."""
        reg = self.controller().cluster.active_controller.partitions[(topic, partition)]  # type: ignore[union-attr]
        return dataclasses.replace(reg, replicas=list(reg.replicas), isr=list(reg.isr))

    def converged(self, topic: str, partitions: int = 1) -> bool:
        """Every reachable broker applied the controller's latest image and took up its
        part in each partition: the leader leads, every other replica follows it."""
        controller = self.controller()
        version = controller.cluster.image.version
        for broker in self.live():
            node = broker.cluster
            if node.image.version != version:
                return False
            for p in range(partitions):
                reg = node.image.partitions.get((topic, p))
                if reg is None:
                    return False
                if node.replicas.leads(topic, p) != (reg.leader == broker.broker_id):
                    return False
                if broker.broker_id in reg.replicas and reg.leader != broker.broker_id:
                    if node.replicas.following.get((topic, p)) != reg:
                        return False
        return True

    def leader(self, topic: str, partition: int = 0) -> Broker:
        reg = self.registration(topic, partition)
        assert reg.leader != NO_LEADER, f"{topic}-{partition} is offline"
        return self.brokers[reg.leader]


def run_three(root: Path, scenario: Callable[[Cluster], Awaitable[None]]) -> None:
    """Run ``scenario`` on brokers 1, 2 and 3 started on ``root``, closing them after."""

    async def go() -> None:
        cluster = Cluster(root)
        try:
            for b in (1, 2, 3):
                await cluster.start(b)
            await scenario(cluster)
        finally:
            await cluster.close()

    asyncio.run(go())
