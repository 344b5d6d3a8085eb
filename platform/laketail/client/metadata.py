"""Cluster metadata as the clients need it: brokers, partition counts and leaders, and
``list_topics()``.

:class:`Metadata` caches, per topic, its partition count (the producer's partitioner
and the consumer's pattern subscriptions need it) and each partition's leader, for
``topic.metadata.refresh.interval.ms``; an unknown topic is remembered as unknown for
the same time. Where the answers come from (any broker gives them):

* ``GET /topics/{t}/partitions`` (Confluent v2): ``[{"partition", "leader",
  "replicas": [{"broker", "leader", "in_sync"}]}]``; ``leader`` is a broker id, -1
  while the partition has no live leader;
* ``GET /v3/clusters/{cid}/brokers``: ``{"data": [{"broker_id", "host", "port",
  "url"}]}``; a broker is reached at its ``url`` (the advertised one), else at
  ``http://host:port``. A broker without that list (a 4xx) gives only its ids, from v2's
  ``GET /brokers``: the client then knows no addresses and routes nothing.

:meth:`Metadata.leader_url` is where a partition's produce or fetch goes. None -- the
leader is unknown, offline (-1) or backed off as unreachable by the gateway -- sends
it to any server, which forwards it to the leader: routing saves a hop and is never
needed for a correct answer. A request that failed in a way that says leadership moved
or its broker is gone (:data:`REFRESH_CODES`) calls :meth:`Metadata.invalidate`; the
next ``leader_url`` for that topic asks again, at most once per ``retry.backoff.ms``
and one thread at a time (the others use what is cached). Brokers are asked for when a
leader's id is not among those known, or when they are older than the refresh
interval; the gateway learns their URLs as servers to fall back on.

:func:`cluster_metadata` builds confluent-kafka's ``ClusterMetadata`` from the same
documents (``list_topics()`` of the Producer, the Consumer and the AdminClient).
Thread-safe: one lock guards the caches; requests run without it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from laketail.client.admin_types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from laketail.client.errors import KafkaError, KafkaException
from laketail.client.gateway import Gateway

log = logging.getLogger(__name__)

UNKNOWN_TOPIC = KafkaError.UNKNOWN_TOPIC_OR_PART  # type: ignore[attr-defined]

#: Errors of a partition's request after which its leader is asked for again: the
#: leader moved or is gone, the ISR changed, or the broker did not answer.
REFRESH_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,  # type: ignore[attr-defined]
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,  # type: ignore[attr-defined]
    KafkaError.REQUEST_TIMED_OUT, KafkaError.BROKER_NOT_AVAILABLE,  # type: ignore[attr-defined]
    KafkaError.REPLICA_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,  # type: ignore[attr-defined]
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.UNKNOWN,  # type: ignore[attr-defined]
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT,  # type: ignore[attr-defined]
})


@dataclass(frozen=True)
class BrokerAddress:
    """One broker as metadata names it; ``url`` None when it gave no address."""

    id: int
    host: str | None = None
    port: int = -1
    url: str | None = None


def parse_brokers(doc: dict) -> dict[int, BrokerAddress]:
    """Brokers by id from a v3 broker list (``url``, else ``http://host:port``)."""
    out = {}
    for d in doc.get("data", []):
        broker_id, host, port = int(d["broker_id"]), d.get("host"), d.get("port")
        url = d.get("url") or (f"http://{host}:{port}" if host and port is not None else None)
        out[broker_id] = BrokerAddress(broker_id, host, -1 if port is None else int(port),
                                       url.rstrip("/") if url else None)
    return out


def parse_partition(doc: dict) -> PartitionMetadata:
    """One v2 partition document: its leader, replicas and in-sync replicas."""
    replicas = [r["broker"] for r in doc.get("replicas", [])]
    isrs = [r["broker"] for r in doc.get("replicas", []) if r.get("in_sync")]
    leader = doc.get("leader")
    return PartitionMetadata(id=doc["partition"], leader=-1 if leader is None else int(leader),
                             replicas=replicas, isrs=isrs)


def fetch_brokers(gateway: Gateway, timeout_s: float | None = None) -> dict[int, BrokerAddress]:
    """The live brokers, from the v3 list; from v2's ids (no addresses) when the
    answering broker has no v3 list."""
    try:
        return parse_brokers(gateway.get_json(gateway.v3("/brokers"), timeout_s=timeout_s))
    except KafkaException as exc:
        if exc.args[0].retriable():
            raise
    ids = gateway.get_json("/brokers", timeout_s=timeout_s).get("brokers", [])
    return {int(i): BrokerAddress(int(i)) for i in ids}


@dataclass
class _Topic:
    count: int | None  # None: the topic does not exist
    leaders: dict[int, int] = field(default_factory=dict)
    fetched_at: float = 0.0
    stale: bool = False


class Metadata:
    """Partition counts, partition leaders and broker addresses, refreshed after
    ``max_age_ms`` or on demand (:meth:`invalidate`), at most once per
    ``refresh_backoff_ms`` per topic."""

    def __init__(self, gateway: Gateway, max_age_ms: int, refresh_backoff_ms: int = 100,
                 monotonic: Callable[[], float] = time.monotonic, auto_create: bool = False) -> None:
        self.gateway = gateway
        #: Ask the broker to auto-create a missing topic (the producer's metadata
        #: requests do, as Kafka's producer's do; the broker's auto.create.topics.enable decides).
        self.auto_create = auto_create
        self.max_age_s = max_age_ms / 1000.0
        self.backoff_s = max(0.0, refresh_backoff_ms / 1000.0)
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._topics: dict[str, _Topic] = {}
        self._asked_at: dict[str, float] = {}  # the last refresh started for a topic
        self._refreshing: set[str] = set()
        self._brokers: dict[int, BrokerAddress] = {}
        self._brokers_asked_at: float | None = None
        self._brokers_fetched_at: float | None = None

    # -- partition counts -----------------------------------------------------------------------

    def cached(self, topic: str) -> int | None | bool:
        """The count when fresh in the cache, None when known not to exist, False when
        the cache has nothing fresh (ask :meth:`lookup`)."""
        with self._lock:
            entry = self._topics.get(topic)
        if entry is None or self.monotonic() - entry.fetched_at > self.max_age_s:
            return False
        return entry.count

    def lookup(self, topic: str, timeout_s: float | None = None) -> int | None:
        """The topic's partition count from the cluster (None: no such topic); its
        leaders are cached on the way.

        Raises ``KafkaException`` for anything but an unknown topic."""
        with self._lock:
            self._asked_at[topic] = self.monotonic()
        try:
            params = {"allow_auto_topic_creation": "true"} if self.auto_create else None
            docs = self.gateway.get_json(f"/topics/{topic}/partitions", params=params, timeout_s=timeout_s)
            partitions = [parse_partition(d) for d in docs]
            entry = _Topic(len(partitions), {p.id: p.leader for p in partitions})
        except KafkaException as exc:
            if exc.args[0].code() != UNKNOWN_TOPIC:
                raise
            entry = _Topic(None)
        entry.fetched_at = self.monotonic()
        with self._lock:
            self._topics[topic] = entry
        return entry.count

    def count(self, topic: str, timeout_s: float | None = None) -> int | None:
        hit = self.cached(topic)
        return self.lookup(topic, timeout_s) if hit is False else hit  # type: ignore[return-value]

    def forget(self, topic: str) -> None:
        with self._lock:
            self._topics.pop(topic, None)

    # -- leaders ----------------------------------------------------------------------------------

    def invalidate(self, topic: str) -> None:
        """The topic's leaders may be wrong: ask again before the next request."""
        with self._lock:
            entry = self._topics.get(topic)
            if entry is not None:
                entry.stale = True

    def leader(self, topic: str, partition: int) -> int:
        """The cached leader's broker id (-1: unknown or offline)."""
        with self._lock:
            entry = self._topics.get(topic)
            return -1 if entry is None else entry.leaders.get(partition, -1)

    def leader_url(self, topic: str, partition: int) -> str | None:
        """Where the partition's requests go: its leader's URL, or None for any
        server (leader unknown, offline or unreachable). Refreshes what is stale on
        the caller's thread; never raises (a failed refresh keeps what is cached)."""
        self._refresh_topic(topic)
        url = self._url_of(self.leader(topic, partition))
        if url is not None and not self.gateway.reachable(url):  # has leadership moved on?
            self.invalidate(topic)
            self._refresh_topic(topic)
            url = self._url_of(self.leader(topic, partition))
        return url if url is not None and self.gateway.reachable(url) else None

    def _url_of(self, broker_id: int) -> str | None:
        broker = None if broker_id < 0 else self._broker(broker_id)
        return None if broker is None else broker.url

    def _refresh_topic(self, topic: str) -> None:
        now = self.monotonic()
        with self._lock:
            entry = self._topics.get(topic)
            due = entry is None or entry.stale or now - entry.fetched_at > self.max_age_s
            if not due or topic in self._refreshing or now - self._asked_at.get(topic, -1e18) < self.backoff_s:
                return
            self._refreshing.add(topic)
        try:
            self.lookup(topic)
        except Exception as exc:  # routing is an optimisation: keep what is cached
            log.debug("metadata for %s: %r", topic, exc)
        finally:
            with self._lock:
                self._refreshing.discard(topic)

    # -- brokers ----------------------------------------------------------------------------------

    def _broker(self, broker_id: int) -> BrokerAddress | None:
        now = self.monotonic()
        with self._lock:
            known = self._brokers.get(broker_id)
            fetched, asked = self._brokers_fetched_at, self._brokers_asked_at
            old = fetched is None or now - fetched > self.max_age_s
            if (known is None or old) and (asked is None or now - asked >= self.backoff_s):
                self._brokers_asked_at = now
            else:
                return known
        try:
            self.refresh_brokers()
        except Exception as exc:  # as above: an address is only an optimisation
            log.debug("broker metadata: %r", exc)
        with self._lock:
            return self._brokers.get(broker_id)

    def refresh_brokers(self, timeout_s: float | None = None) -> dict[int, BrokerAddress]:
        """Ask for the live brokers now; the gateway learns their URLs."""
        brokers = fetch_brokers(self.gateway, timeout_s)
        with self._lock:
            self._brokers = brokers
            self._brokers_fetched_at = self.monotonic()
        self.gateway.learn([b.url for b in brokers.values() if b.url])
        return brokers

    def brokers(self) -> dict[int, BrokerAddress]:
        with self._lock:
            return dict(self._brokers)


# -- list_topics() --------------------------------------------------------------------------------


def _topic(gateway: Gateway, name: str, timeout_s: float | None) -> TopicMetadata:
    try:
        docs = gateway.get_json(f"/topics/{name}/partitions", timeout_s=timeout_s)
    except KafkaException as exc:
        return TopicMetadata(topic=name, error=exc.args[0])
    return TopicMetadata(topic=name, partitions={d["partition"]: parse_partition(d) for d in docs})


def cluster_metadata(gateway: Gateway, topic: str | None = None, timeout_s: float | None = None) -> ClusterMetadata:
    """confluent-kafka's ``list_topics(topic=None)``: the live brokers (host and port),
    every topic (internal ones too, as Kafka's metadata lists them) or only ``topic``
    (with ``.error`` set when it does not exist), each partition with its leader,
    replicas and in-sync replicas. ``orig_broker_id`` is the broker that answered."""
    clusters = gateway.get_json("/v3/clusters", timeout_s=timeout_s)["data"]
    answered = gateway.answered or gateway.servers[0]
    cluster = clusters[0] if clusters else {}
    meta = ClusterMetadata(cluster_id=cluster.get("cluster_id"))
    controller = (cluster.get("controller") or {}).get("related", "")
    if controller.rsplit("/", 1)[-1].lstrip("-").isdigit():
        meta.controller_id = int(controller.rsplit("/", 1)[-1])
    here = urlsplit(answered)
    for broker in fetch_brokers(gateway, timeout_s).values():
        if broker.host is None:  # no addresses: the one that answered stands for all
            broker = BrokerAddress(broker.id, here.hostname, here.port or 80, answered)
        meta.brokers[broker.id] = BrokerMetadata(broker.id, broker.host, broker.port)
        if broker.url == answered or meta.orig_broker_id < 0:
            meta.orig_broker_id = broker.id
            meta.orig_broker_name = str(meta.brokers[broker.id])
    if topic is not None:
        names = [topic]
    else:
        docs = gateway.get_json(gateway.v3("/topics"), timeout_s=timeout_s)["data"]
        names = [d["topic_name"] for d in docs]
    for name in names:
        meta.topics[name] = _topic(gateway, name, timeout_s)
    return meta
