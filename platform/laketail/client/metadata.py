"""Cluster metadata as the clients need it: partition counts, and ``list_topics()``.

:class:`TopicCounts` caches each topic's partition count (the producer's partitioner
and the consumer's pattern subscriptions need it) for
``topic.metadata.refresh.interval.ms``; an unknown topic is remembered as unknown
for the same time. :func:`cluster_metadata` builds confluent-kafka's
``ClusterMetadata`` from the gateway's v2 and v3 documents (``list_topics()`` of the
Producer, the Consumer and the AdminClient). Thread-safe.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlsplit

from laketail.client.admin_types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from laketail.client.errors import KafkaError, KafkaException
from laketail.client.gateway import Gateway

UNKNOWN_TOPIC = KafkaError.UNKNOWN_TOPIC_OR_PART  # type: ignore[attr-defined]


class TopicCounts:
    """Partition counts per topic, refreshed after ``max_age_ms``."""

    def __init__(self, gateway: Gateway, max_age_ms: int) -> None:
        self.gateway = gateway
        self.max_age_s = max_age_ms / 1000.0
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int | None, float]] = {}

    def cached(self, topic: str) -> int | None | bool:
        """The count when fresh in the cache, None when known not to exist, False when
        the cache has nothing fresh (ask :meth:`lookup`)."""
        with self._lock:
            entry = self._counts.get(topic)
        if entry is None or time.monotonic() - entry[1] > self.max_age_s:
            return False
        return entry[0]

    def lookup(self, topic: str, timeout_s: float | None = None) -> int | None:
        """The topic's partition count from the gateway (None: no such topic).

        Raises ``KafkaException`` for anything but an unknown topic."""
        try:
            partitions = self.gateway.get_json(f"/topics/{topic}/partitions", timeout_s=timeout_s)
            count: int | None = len(partitions)
        except KafkaException as exc:
            if exc.args[0].code() != UNKNOWN_TOPIC:
                raise
            count = None
        with self._lock:
            self._counts[topic] = (count, time.monotonic())
        return count

    def count(self, topic: str, timeout_s: float | None = None) -> int | None:
        hit = self.cached(topic)
        return self.lookup(topic, timeout_s) if hit is False else hit  # type: ignore[return-value]

    def forget(self, topic: str) -> None:
        with self._lock:
            self._counts.pop(topic, None)


def _partition(doc: dict) -> PartitionMetadata:
    replicas = [r["broker"] for r in doc.get("replicas", [])]
    isrs = [r["broker"] for r in doc.get("replicas", []) if r.get("in_sync")]
    return PartitionMetadata(id=doc["partition"], leader=doc.get("leader", -1), replicas=replicas, isrs=isrs)


def _topic(gateway: Gateway, name: str, timeout_s: float | None) -> TopicMetadata:
    try:
        docs = gateway.get_json(f"/topics/{name}/partitions", timeout_s=timeout_s)
    except KafkaException as exc:
        return TopicMetadata(topic=name, error=exc.args[0])
    return TopicMetadata(topic=name, partitions={d["partition"]: _partition(d) for d in docs})


def cluster_metadata(gateway: Gateway, topic: str | None = None, timeout_s: float | None = None) -> ClusterMetadata:
    """confluent-kafka's ``list_topics(topic=None)``: every topic (internal ones too,
    as Kafka's metadata lists them), or only ``topic`` (with ``.error`` set when it
    does not exist)."""
    clusters = gateway.get_json("/v3/clusters", timeout_s=timeout_s)["data"]
    cluster = clusters[0] if clusters else {}
    meta = ClusterMetadata(cluster_id=cluster.get("cluster_id"))
    controller = (cluster.get("controller") or {}).get("related", "")
    if controller.rsplit("/", 1)[-1].lstrip("-").isdigit():
        meta.controller_id = int(controller.rsplit("/", 1)[-1])
    ids = gateway.get_json("/brokers", timeout_s=timeout_s).get("brokers", [])
    url = urlsplit(gateway.servers[0])
    for broker_id in ids:
        meta.brokers[broker_id] = BrokerMetadata(broker_id, url.hostname, url.port or 80)
    if ids:
        meta.orig_broker_id = ids[0]
        meta.orig_broker_name = f"{url.hostname}:{url.port or 80}/{ids[0]}"
    if topic is not None:
        names = [topic]
    else:
        docs = gateway.get_json(gateway.v3("/topics"), timeout_s=timeout_s)["data"]
        names = [d["topic_name"] for d in docs]
    for name in names:
        meta.topics[name] = _topic(gateway, name, timeout_s)
    return meta
