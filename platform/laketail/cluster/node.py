"""Membership: how a broker joins the cluster and keeps up with it.

At start a broker registers itself in ``_system/brokers`` (id, advertised URL, a fresh
incarnation), then finds the controller named in ``_system/controller`` and
heartbeats to it every ``broker.heartbeat.interval.ms``. Heartbeats carry the log end
offsets of the broker's replicas; answers carry the cluster image whenever it changed.
The controller also pushes each new image to every live broker at once, so elections
and new topics reach everyone without waiting for a heartbeat.

When there is no controller yet, when the named one is this broker (restarted), or
when the controller stayed unreachable for ``broker.session.timeout.ms``, the broker
tries to become controller with a conflict-checked write of ``_system/controller``;
the loser of a race simply follows the winner, which gets a whole session of its own
to answer before anyone claims over it.

A broker that could not reach any controller for a whole session is *fenced*: it
stops acknowledging writes and answering replica fetches as a leader, since the
controller has probably moved its partitions elsewhere.

Brokers talk to each other over the gateway's ``/internal/v1`` routes, on each peer's
inter-broker listener (:attr:`BrokerRegistration.peer_url`, learnt from its
authenticated registration only), showing the cluster secret (:mod:`laketail.security.peers`);
calls to this broker itself short-cut to the in-process objects.

Seams (for tests that run a cluster in one process, ``tests/cluster/harness.py``): every
decision that depends on time reads the injected :class:`~laketail.clock.Clock` (session
and liveness deadlines, ISR lag, registration times), every call to a peer goes through
the injected :class:`~laketail.cluster.transport.PeerTransport`, and the
:class:`~laketail.cluster.store.ClusterStore` is handed in. The defaults are the system
clock, the network and the store under ``settings.data``. The background loops only
*wait* in real time (``asyncio.sleep``); one round of each is a method of its own
(:meth:`ClusterNode.beat`, :meth:`ReplicaManager.check_isr`) a test can call.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

import httpx

from laketail.clock import Clock, SystemClock
from laketail.cluster.controller import Controller
from laketail.cluster.forwarding import ForwardedAppends
from laketail.cluster.metadata import NO_LEADER, BrokerRegistration, ClusterImage, PartitionRegistration
from laketail.cluster.replicas import ReplicaManager
from laketail.cluster.store import ClusterStore, Conflict
from laketail.cluster.transport import Link, NetworkTransport, PeerTransport, Pool
from laketail.cluster.wire import PeerResponse, PeerUnreached, raise_for_error
from laketail.errors import (
    LaketailError,
    LeaderNotAvailable,
    NotController,
    NotLeaderOrFollower,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from laketail.security.listeners import advertised_endpoints
from laketail.security.peers import peer_headers

if TYPE_CHECKING:
    from laketail.cluster.ports import ClusterHost

log = logging.getLogger(__name__)

INTERNAL = "/internal/v1"
#: Kafka's client defaults ``retry.backoff.ms`` and ``retry.backoff.max.ms``: a forward's
#: wait between calls to a leader that answered it does not lead the partition yet.
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
#: How long a forward keeps calling while the leader's image and ours disagree (an
#: election, a topic just created: the images converge within a metadata push).
LEADER_RETRY_S = 5.0


def _unknown_partition(resp: PeerResponse) -> bool:
    """The leader answered UNKNOWN_TOPIC_OR_PARTITION for a partition (its cluster image
    does not have it yet: a topic created a moment ago)."""
    if resp.status_code != UnknownTopicOrPartition.http_status:
        return False
    try:
        return resp.json().get("error_code") == 40402
    except (ValueError, AttributeError):
        return False


class ClusterNode:
    """This broker's membership of the cluster (see the module docstring). ``host`` is
    the broker as the cluster parts see it (:class:`~laketail.cluster.ports.ClusterHost`);
    ``clock``, ``transport`` and ``store`` are the seams the module docstring names
    (defaults: the system clock, the network, the store under ``settings.data``).
    Event loop thread only."""

    def __init__(self, host: "ClusterHost", *, clock: Clock | None = None, transport: PeerTransport | None = None,
                 store: ClusterStore | None = None) -> None:
        self.host = host
        self.settings = host.settings
        self.broker_id = host.settings.broker_id
        self.clock: Clock = clock or SystemClock()
        self.store = store or ClusterStore(host.settings.data)
        self.incarnation = uuid.uuid4().hex
        self.registration = BrokerRegistration(
            self.broker_id, host.settings.url, self.incarnation, True, self.clock.now_ms(), self._own_peer_url(),
            advertised_endpoints(host.settings),
        )
        self.peer_headers = peer_headers(host.settings.inter_broker_secret)
        self.peer_ssl = _peer_ssl_context(host.settings)
        self.transport: PeerTransport = transport or NetworkTransport(self.peer_headers, self.peer_ssl)
        self.image = ClusterImage()
        self.isr_shrinks = 0  # of partitions this broker leads (metrics: Kafka's IsrShrinksPerSec)
        self.isr_expands = 0
        self.controller: Controller | None = None
        self.replicas = ReplicaManager(self)
        self._http: httpx.AsyncClient | None = None
        self._beat_http: httpx.AsyncClient | None = None
        self._links: dict[int, Link] = {}  # replica fetches, per leader broker
        self._pools: dict[int, Pool] = {}  # forwarded produce and fetch, per leader broker
        #: internal idempotent identities of forwarded appends (a retry is a duplicate the leader drops)
        self.forwarded = ForwardedAppends(host.allocate_producer_ids)
        self._last_contact = self.clock.monotonic()
        self._tasks: list[asyncio.Task] = []
        #: run the heartbeat and ISR loops; a test that runs their rounds itself (:meth:`beat`,
        #: :meth:`ReplicaManager.check_isr`) turns this off before :meth:`start`
        self.loops = True
        self._apply_lock = asyncio.Lock()
        self._claiming = False
        self._heard_from: tuple[int, int] = (NO_LEADER, 0)  # the controller (id, epoch) last answering
        self._learned: tuple[tuple[int, int], float] = ((NO_LEADER, 0), 0.0)  # one not heard from yet, and since when

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = self.transport.http_client()
        return self._http

    @property
    def beat_http(self) -> httpx.AsyncClient:
        """Heartbeats' own client. In the shared pool (:attr:`http`) a heartbeat queued
        behind client requests passed to the controller (a JoinGroup holds its connection
        for a whole rebalance) and ISR changes, timed out in the pool, and the broker then
        claimed the controller (PoolTimeout in the Jepsen run's logs)."""
        if self._beat_http is None:
            self._beat_http = self.transport.http_client()
        return self._beat_http

    @property
    def is_controller(self) -> bool:
        return self.active_controller is not None

    @property
    def active_controller(self) -> Controller | None:
        """The controller when this broker is the active one, else None."""
        controller = self.controller
        return controller if controller is not None and controller.active else None

    @property
    def fenced(self) -> bool:
        """No controller heard from for a whole session (and not the controller)."""
        if self.is_controller:
            return False
        return self.clock.monotonic() - self._last_contact > self.settings.broker_session_timeout_ms / 1000

    async def start(self) -> None:
        """Register, then join: returns once this broker has a cluster image. Then the
        heartbeat loop runs :meth:`beat` every ``broker.heartbeat.interval.ms`` (unless
        :attr:`loops` was turned off before: a test runs the rounds)."""
        await asyncio.to_thread(self.store.register_broker, self.broker_id, self.settings.url, self.incarnation,
                                self._own_peer_url(), self.registration.endpoints)
        controller_id, epoch = await asyncio.to_thread(self.store.controller)
        if controller_id in (NO_LEADER, self.broker_id):
            await self._claim(epoch, presumed_dead=set())
        deadline = self.clock.monotonic() + self.settings.broker_session_timeout_ms / 1000
        while self.image.version == 0:
            try:
                await self._heartbeat()
            except Exception as exc:
                if self.clock.monotonic() > deadline:
                    controller_id, epoch = await asyncio.to_thread(self.store.controller)
                    await self._claim(epoch, presumed_dead={controller_id} - {NO_LEADER, self.broker_id})
                    deadline = self.clock.monotonic() + self.settings.broker_session_timeout_ms / 1000
                else:
                    log.info("waiting for the controller: %s", exc)
                    await asyncio.sleep(self.settings.broker_heartbeat_interval_ms / 1000)
        if self.loops:
            self._tasks.append(asyncio.create_task(self._heartbeat_loop(), name="laketail-heartbeat"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.replicas.stop()
        for link in self._links.values():
            link.close()
        for pool in self._pools.values():
            pool.close()
        for client in (self._http, self._beat_http):
            if client is not None:
                await client.aclose()

    # -- controller election ------------------------------------------------------------------------

    async def _claim(self, seen_epoch: int, presumed_dead: set[int]) -> bool:
        if self._claiming:
            return False
        self._claiming = True
        try:
            try:
                epoch = await asyncio.to_thread(self.store.claim_controller, self.broker_id, seen_epoch)
            except Conflict:
                return False  # someone else won: heartbeats will find them
            controller = Controller(self, epoch)
            self.controller = controller
            try:
                await controller.activate(presumed_dead)
            except Conflict:
                return False
            self._last_contact = self.clock.monotonic()
            self.host.take_over_coordinators()  # they run on the controller; refuse until loaded
            return True
        finally:
            self._claiming = False

    def controller_deposed(self, controller: Controller) -> None:
        if self.controller is controller:
            self.controller = None
            self.host.give_up_coordinators()

    # -- heartbeats ------------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.broker_heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval if not self.is_controller else min(interval, 0.2))
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the catalog unreadable while claiming: try again next round
                log.warning("heartbeat round failed: %s", exc)

    async def beat(self) -> None:
        """One round of the heartbeat loop: the controller's :meth:`Controller.tick`, or a
        heartbeat to the controller; after a session of failed ones, a claim of the
        controller (when the one named has had its session, :meth:`_gave_a_session`)."""
        session = self.settings.broker_session_timeout_ms / 1000
        try:
            controller = self.active_controller
            if controller is not None:
                await controller.tick()
                return
            await self._heartbeat()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            silent = self.clock.monotonic() - self._last_contact
            log.info("heartbeat to controller %d failed (%.1f s without one): %s",
                     self.image.controller_id, silent, exc)
            if silent > session:
                controller_id, epoch = await asyncio.to_thread(self.store.controller)
                if self._gave_a_session(controller_id, epoch, session):
                    await self._claim(epoch, presumed_dead={controller_id} - {NO_LEADER, self.broker_id})

    def _gave_a_session(self, controller_id: int, epoch: int, session: float) -> bool:
        """Whether the controller named in the catalog has had a whole session to answer.

        The one this broker last heard from has (the silence is what brought us here). A
        controller elected since (another broker claimed first) gets a session of its
        own from the moment this broker learns of it: it may still be taking over, and
        claiming over it would depose a healthy controller and declare it dead."""
        if (controller_id, epoch) == self._heard_from or controller_id == NO_LEADER:
            return True
        now = self.clock.monotonic()
        if self._learned[0] != (controller_id, epoch):
            self._learned = ((controller_id, epoch), now)
            log.info("controller %d (epoch %d) was elected meanwhile: talking to it", controller_id, epoch)
            return False
        return now - self._learned[1] > session

    def leos(self) -> dict[str, int]:
        """This broker's replicas' log end offsets, by ``topic/partition`` (heartbeats carry them)."""
        return {f"{plog.topic}/{plog.partition}": plog.log_end_offset for plog in self.host.logs.all()}

    async def _heartbeat(self) -> None:
        controller_id, epoch = await asyncio.to_thread(self.store.controller)
        if controller_id == NO_LEADER:
            raise NotController("no controller has been elected yet")
        body: dict[str, Any] = {
            "broker_id": self.broker_id, "url": self.settings.url, "broker_url": self._own_peer_url(),
            "incarnation": self.incarnation, "endpoints": self.registration.endpoints,
            "leos": self.leos(), "known_version": self.image.version,
        }
        if controller_id == self.broker_id:
            controller = self.active_controller
            if controller is None:
                raise NotController("this broker is named controller but is not active")
            answer = await controller.heartbeat(**body)
        else:
            url = await self._broker_url(controller_id)
            timeout = max(0.5, min(self.settings.broker_session_timeout_ms / 2000, 5.0))
            resp = await self._post(url, f"{INTERNAL}/heartbeat", json=body, timeout=timeout, client=self.beat_http)
            answer = resp.json()
        self._last_contact = self.clock.monotonic()
        self._heard_from = (controller_id, epoch)
        if "image" in answer:
            await self.apply_image(ClusterImage.from_json(answer["image"]))

    async def refresh_metadata(self) -> None:
        try:
            await self._heartbeat()
        except Exception as exc:
            log.debug("metadata refresh failed: %s", exc)

    async def apply_image(self, image: ClusterImage) -> None:
        async with self._apply_lock:
            if image.version <= self.image.version and image.controller_epoch <= self.image.controller_epoch:
                return
            shrinks, expands = self.image.isr_changes(image, self.broker_id)
            self.isr_shrinks += shrinks
            self.isr_expands += expands
            self.image = image
            await self.host.apply_topics(image)
            await self.replicas.apply(image)
        if self.is_controller:
            for b in image.brokers.values():
                if b.alive and b.broker_id != self.broker_id:
                    asyncio.get_running_loop().create_task(self._push(b.peer_url, image))

    async def _push(self, url: str, image: ClusterImage) -> None:
        try:
            await self._post(url, f"{INTERNAL}/metadata", json=image.to_json(), timeout=2.0)
        except Exception as exc:
            log.debug("pushing metadata to %s failed: %s", url, exc)

    # -- calls to other brokers ------------------------------------------------------------------------

    async def _broker_url(self, broker_id: int) -> str:
        known = self.image.brokers.get(broker_id)
        if known is not None:
            return known.peer_url
        brokers = await asyncio.to_thread(self.store.brokers)
        if broker_id not in brokers:
            raise LeaderNotAvailable(f"broker {broker_id} is not registered")
        return brokers[broker_id].peer_url

    async def _post(self, url: str, path: str, timeout: float | None = None, client: httpx.AsyncClient | None = None,
                    **kwargs: Any) -> httpx.Response:
        resp = await (client or self.http).post(url + path, timeout=timeout or httpx.USE_CLIENT_DEFAULT, **kwargs)
        raise_for_error(resp)
        return resp

    async def call_leader(
        self, topic: str, partition: int, method: str, path: str, *,
        params: dict[str, Any] | None = None, content: bytes = b"", content_type: str | None = None,
        timeout: float | None = None,
    ) -> PeerResponse:
        """Forward a request to the partition's leader (the gateway answers for it).

        While the broker called says it does not lead the partition or does not know it
        yet (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION: its image or ours is a
        step behind the controller's), refresh the image and call again, as a Kafka
        client retries those errors: at once when the leader changed, else after
        ``retry.backoff.ms`` doubling to ``retry.backoff.max.ms``, for at most
        ``LEADER_RETRY_S``. Reads are safe to repeat; a forwarded append carries an
        idempotent identity (§8.5), so one the old leader wrote before it lost the
        partition is answered by the new leader with its offsets, not written twice."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_RETRY_S
        backoff = RETRY_BACKOFF_S
        while True:
            reg = self.image.partitions.get((topic, partition))
            if reg is None or reg.leader == NO_LEADER:
                raise LeaderNotAvailable(f"{topic}-{partition} has no leader right now")
            url = await self._broker_url(reg.leader)
            pool = _peer(self._pools, reg.leader, url, self.transport.pool)
            try:
                resp = await pool.request(method, path, params=params, content=content, content_type=content_type,
                                          timeout_s=timeout or 30.0)
            except PeerUnreached as exc:  # nothing was sent
                raise LeaderNotAvailable(
                    f"the leader of {topic}-{partition} (broker {reg.leader}) is unreachable: {exc}"
                ) from exc
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                # Sent, and no answer: the leader may have acted on it (an append may be
                # written). Kafka's word for an outcome nobody knows, never one that
                # says nothing was done.
                raise RequestTimedOut(
                    f"the leader of {topic}-{partition} (broker {reg.leader}) did not answer: "
                    f"{type(exc).__name__} {exc}; whether it acted on the request is unknown"
                ) from exc
            retriable = resp.status_code == NotLeaderOrFollower.http_status or _unknown_partition(resp)
            if retriable and loop.time() < deadline:
                await self.refresh_metadata()
                now = self.image.partitions.get((topic, partition))
                if now is not None and now.leader == reg.leader:  # the same leader: give it time
                    await asyncio.sleep(min(backoff, max(0.0, deadline - loop.time())))
                    backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
                continue
            raise_for_error(resp)
            return resp

    async def call_controller(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        controller_id, _ = await asyncio.to_thread(self.store.controller)
        url = await self._broker_url(controller_id)
        try:
            resp = await self.http.request(method, url + path, **kwargs)
        except httpx.TransportError as exc:
            raise _controller_failure(controller_id, exc) from exc
        raise_for_error(resp)
        return resp

    async def call_controller_raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A client's request, passed to the controller as is (its answer too, errors
        included)."""
        controller_id = self.image.controller_id
        url = await self._broker_url(controller_id)
        try:
            # A join may wait a whole rebalance timeout: no read deadline of ours.
            return await self.http.request(method, url + path, timeout=httpx.Timeout(None, connect=2.0), **kwargs)
        except httpx.TransportError as exc:
            raise _controller_failure(controller_id, exc) from exc

    async def alter_partition(self, reg: PartitionRegistration, isr: list[int]) -> PartitionRegistration:
        args: dict[str, Any] = dict(topic=reg.topic, partition=reg.partition, leader=self.broker_id,
                                    leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch, isr=isr)
        controller = self.active_controller
        if controller is not None:
            return await controller.alter_partition(**args)
        resp = await self.call_controller("POST", f"{INTERNAL}/alter-partition", json=args)
        return PartitionRegistration(**resp.json())

    async def replica_fetch(self, leader: int, body: dict) -> bytes:
        if leader == self.broker_id:
            raise LeaderNotAvailable("a broker does not fetch from itself")
        url = await self._broker_url(leader)
        link = _peer(self._links, leader, url, self.transport.link)
        timeout = self.settings.replica_fetch_wait_max_ms / 1000 + 10
        return await link.post_json(f"{INTERNAL}/replica-fetch", body, timeout)

    def _own_peer_url(self) -> str:
        url = self.settings.inter_broker_url
        return "" if url == self.settings.url else url


def _peer_ssl_context(settings: Any) -> Any:
    """The TLS context for calling peers: the cluster's CA (``ssl.truststore.location``)
    verifies their certificates, and this broker shows its own certificate (so an inter-broker
    listener with ``ssl.client.auth=required`` admits it); None when neither is configured."""
    if not settings.ssl_truststore_location and not settings.ssl_keystore_certificate_chain:
        return None
    import ssl

    ctx = ssl.create_default_context(cafile=settings.ssl_truststore_location or None)
    if settings.ssl_keystore_certificate_chain and settings.ssl_keystore_key:
        ctx.load_cert_chain(settings.ssl_keystore_certificate_chain, settings.ssl_keystore_key)
    return ctx


def _controller_failure(controller_id: int, exc: httpx.TransportError) -> LaketailError:
    """A call to the controller that failed in transit: NOT_CONTROLLER when no connection
    was made (nothing was sent), else REQUEST_TIMED_OUT, since the controller may have
    acted on it (a proxied transactional produce may be written)."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return NotController(f"the controller (broker {controller_id}) is unreachable: {type(exc).__name__} {exc}")
    return RequestTimedOut(f"the controller (broker {controller_id}) did not answer: {type(exc).__name__} {exc}; "
                           f"whether it acted on the request is unknown")


def _peer(peers: dict, broker_id: int, url: str, make):
    """The link or pool to ``broker_id`` in ``peers``, made anew when the broker's
    advertised URL changed."""
    peer = peers.get(broker_id)
    if peer is None or peer.url != url:
        if peer is not None:
            peer.close()
        peer = peers[broker_id] = make(url)
    return peer
