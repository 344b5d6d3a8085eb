"""Prometheus metrics for one gateway, served at ``GET /metrics``.

Request metrics are counters and histograms the routes update in line (Prometheus
derives rates with ``rate()``):

* ``laketail_produce_requests_total{api}``, ``laketail_produce_records_total{topic}``,
  ``laketail_produce_bytes_total{topic}`` (key + value bytes),
  ``laketail_produce_latency_seconds{api}`` (until the acks were satisfied);
* ``laketail_fetch_requests_total{api}``, ``laketail_fetch_records_total{topic}``,
  ``laketail_fetch_bytes_total{topic}``, ``laketail_fetch_latency_seconds{api}``
  (long-poll waiting included);
* ``laketail_request_errors_total{error}`` by Kafka error name.

Partition gauges are computed at scrape time from ``broker.partition_states`` so they
can never go stale: ``laketail_partition_log_start_offset``,
``laketail_partition_log_end_offset``, ``laketail_partition_high_watermark``,
``laketail_partition_last_stable_offset``, ``laketail_partition_tiered_offset``
(labels ``topic``, ``partition``), and ``laketail_partition_damaged_offsets``: how many
offsets of the partition's table reads refuse since the last validation of the table
found them damaged (0 when sound; see ``storage.table_check``).

``laketail_internal_records_skipped_total{topic}`` counts the records of an internal
topic (``__consumer_offsets``, ``__transaction_state``) that the coordinators' last load
could not decode and skipped (read from the coordinators at scrape time).

Each app has its own registry, so several gateways (tests) live in one process.
Scrapes run on the event loop thread, as every broker call must.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from laketail.errors import LaketailError

if TYPE_CHECKING:
    from laketail.broker import Broker

__all__ = ["CONTENT_TYPE_LATEST", "GatewayMetrics"]

LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

_PARTITION_GAUGES = (
    ("log_start_offset", "First offset not deleted by retention."),
    ("log_end_offset", "Offset the next appended record gets (LEO)."),
    ("high_watermark", "Records below it are on every in-sync replica; consumers see them."),
    ("last_stable_offset", "First offset of the oldest open transaction (HW when none)."),
    ("tiered_offset", "Records below it are in the topic's Delta table."),
)


class PartitionCollector(Collector):
    """Per-partition offsets, read from the broker at scrape time."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(f"laketail_partition_{name}", doc, labels=["topic", "partition"])
            for name, doc in _PARTITION_GAUGES
        }
        damaged = GaugeMetricFamily(
            "laketail_partition_damaged_offsets",
            "Offsets of the partition's table that reads refuse (duplicates, missing or foreign rows "
            "an outside writer left); 0 when the table is sound. `laketail check TOPIC` says what is wrong.",
            labels=["topic", "partition"],
        )
        for topic in self.broker.list_topics():
            try:
                states = self.broker.partition_states(topic)
            except LaketailError:
                continue  # deleted between listing and reading
            damage = self.broker.tables.known_damage(topic)
            for state in states:
                labels = [topic, str(state.partition)]
                for name, family in families.items():
                    family.add_metric(labels, getattr(state, name))
                ranges = damage.get(state.partition, [])
                damaged.add_metric(labels, sum(d.last_offset - d.first_offset + 1 for d in ranges))
        yield from families.values()
        yield damaged


class InternalLoadCollector(Collector):
    """Records of the internal topics the coordinators skipped at their last load."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "laketail_internal_records_skipped",
            "Records of an internal topic that could not be decoded at load and were skipped.",
            labels=["topic"],
        )
        for topic, count in self.broker.internal_records_skipped().items():
            family.add_metric([topic], count)
        yield family


class GatewayMetrics:
    """The gateway's metric objects and its registry."""

    def __init__(self, broker: "Broker") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.produce_requests = Counter(
            "laketail_produce_requests", "Produce requests answered.", ["api"], registry=r
        )
        self.produce_records = Counter(
            "laketail_produce_records", "Records accepted by produce requests.", ["topic"], registry=r
        )
        self.produce_bytes = Counter(
            "laketail_produce_bytes", "Key and value bytes accepted by produce requests.",
            ["topic"], registry=r,
        )
        self.produce_latency = Histogram(
            "laketail_produce_latency_seconds", "Produce request latency, until acks are met.",
            ["api"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.fetch_requests = Counter(
            "laketail_fetch_requests", "Fetch requests answered.", ["api"], registry=r
        )
        self.fetch_records = Counter(
            "laketail_fetch_records", "Records returned by fetch requests.", ["topic"], registry=r
        )
        self.fetch_bytes = Counter(
            "laketail_fetch_bytes", "Key and value bytes returned by fetch requests.",
            ["topic"], registry=r,
        )
        self.fetch_latency = Histogram(
            "laketail_fetch_latency_seconds", "Fetch request latency, long-poll wait included.",
            ["api"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.errors = Counter(
            "laketail_request_errors", "Requests answered with an error, by Kafka error name.",
            ["error"], registry=r,
        )
        r.register(PartitionCollector(broker))
        r.register(InternalLoadCollector(broker))
        # labelled children, looked up once per (api, topic): .labels() is not free
        self._produce: dict[tuple[str, str], tuple] = {}
        self._fetch: dict[tuple[str, str], tuple] = {}

    def observe_produce(self, api: str, topic: str, records: int, nbytes: int, seconds: float) -> None:
        children = self._produce.get((api, topic))
        if children is None:
            children = self._produce[(api, topic)] = (
                self.produce_requests.labels(api), self.produce_records.labels(topic),
                self.produce_bytes.labels(topic), self.produce_latency.labels(api),
            )
        children[0].inc()
        children[1].inc(records)
        children[2].inc(nbytes)
        children[3].observe(seconds)

    def observe_fetch(self, api: str, topic: str, records: int, nbytes: int, seconds: float) -> None:
        children = self._fetch.get((api, topic))
        if children is None:
            children = self._fetch[(api, topic)] = (
                self.fetch_requests.labels(api), self.fetch_records.labels(topic),
                self.fetch_bytes.labels(topic), self.fetch_latency.labels(api),
            )
        children[0].inc()
        if records:
            children[1].inc(records)
            children[2].inc(nbytes)
        children[3].observe(seconds)

    def count_error(self, err: LaketailError) -> None:
        self.errors.labels(err.kafka_name).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
