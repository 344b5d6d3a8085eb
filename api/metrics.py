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
``laketail_table_values_undecoded_total{topic}`` counts the values of a topic with typed
columns (``laketail.table.mode``) that the tierer wrote with a null ``value_struct``
because they did not decode by the topic's subject (since the broker started).

Cluster health, also at scrape time, under the names Kafka's JMX exporter gives them:
``kafka_server_replicamanager_underreplicatedpartitions`` and
``kafka_controller_kafkacontroller_offlinepartitionscount`` (gauges over every
partition in the cluster image), ``kafka_server_replicamanager_isrshrinks_total`` and
``kafka_server_replicamanager_isrexpands_total`` (counters, partitions this broker
leads), per partition ``kafka_topic_partition_under_replicated_partition`` (1/0, as
kafka-exporter), and the tier delay ``laketail_partition_tier_delay_records``: records
produced (below the log end offset) but not yet in the Delta table.

How appends reach a partition this process does not lead:
``laketail_produce_forwards_http_total`` (over the inter-broker listener) and, with
request processes, ``laketail_request_process_handoffs_total{process, role}`` (the local
hand-off of :mod:`laketail.handoff`, ``sent`` and ``received``; ``process`` is the
process's broker id, so scrapes that reach different processes tell them apart), and
``laketail_kafka_requests_passed_total{process}``: Kafka requests passed to the process
that runs the coordinators (:mod:`laketail.kafka.siblings`).

Consumer-group lag, in kafka-exporter's and kafka-lag-exporter's names, labels
``consumergroup``, ``topic``, ``partition``: ``kafka_consumergroup_lag`` (records from
the committed offset to the high watermark), ``kafka_consumergroup_lag_seconds``
(now minus the timestamp of the first unconsumed record; 0 when caught up) and
``kafka_consumergroup_current_offset``. Groups are those whose offsets this broker holds
(the group coordinator's). The cost stays flat over thousands of groups: the record lag
is a dictionary walk; the time lag reads one record per partition only when its
committed offset moved since the last scrape (:class:`LagClock`, at most
``LAG_READS_PER_SCRAPE`` reads a scrape; the rest keep their last timestamp).

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
    from laketail.api.services import OffsetsView, Services, TableService
    from laketail.broker import Broker, PartitionState

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

    def __init__(self, broker: "Broker", tables: "TableService") -> None:
        self.broker = broker
        self.tables = tables

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
            damage = self.tables.known_damage(topic)
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
        undecoded = CounterMetricFamily(
            "laketail_table_values_undecoded",
            "Values (keys) of a topic with typed columns tiered with a null value_struct (key_struct): not decodable.",
            labels=["topic"],
        )
        for topic, count in self.broker.table_values_undecoded().items():
            undecoded.add_metric([topic], count)
        yield undecoded


#: Record reads a scrape may spend on time lag (partitions whose committed offset moved).
LAG_READS_PER_SCRAPE = 256


class LagClock:
    """The timestamp of the record at each group's committed offset, read once per
    committed offset: ``{(group, topic, partition): (offset, timestamp_ms)}``.

    Refreshed on the event loop before a scrape renders (:meth:`refresh`); entries of
    groups or partitions that went away are dropped."""

    def __init__(self, broker: "Broker", offsets: "OffsetsView") -> None:
        self.broker = broker
        self.offsets = offsets
        self._seen: dict[tuple[str, str, int], tuple[int, int | None]] = {}
        self.rows: list[tuple[str, str, int, int, int, int]] = []  # group, topic, p, current, lag, time lag ms

    async def refresh(self) -> None:
        broker = self.broker
        now_ms = broker.clock.now_ms()
        budget = LAG_READS_PER_SCRAPE
        rows, seen = [], {}
        states: dict[tuple[str, int], PartitionState] = {}  # one look-up per partition, however many groups
        for group in self.offsets.groups():  # both are copies: commits may land while a read awaits
            for (topic, partition), committed in self.offsets.group_offsets(group).items():
                state = states.get((topic, partition))
                if state is None:
                    try:
                        state = states[(topic, partition)] = broker.partition_state(topic, partition)
                    except LaketailError:
                        continue  # the topic was deleted since
                current = committed.offset
                lag = max(state.high_watermark - current, 0)
                key = (group, topic, partition)
                offset, ts_ms = self._seen.get(key, (-1, None))
                if lag > 0 and (offset != current or ts_ms is None) and budget > 0:
                    budget -= 1
                    first_unread = max(current, state.log_start_offset)
                    offset, ts_ms = current, await self._timestamp(topic, partition, first_unread)
                seen[key] = (offset, ts_ms)
                time_lag = max(now_ms - ts_ms, 0) if lag > 0 and ts_ms is not None else 0
                rows.append((group, topic, partition, current, lag, time_lag))
        self._seen, self.rows = seen, rows

    async def _timestamp(self, topic: str, partition: int, offset: int) -> int | None:
        try:
            result = await self.broker.fetch(topic, partition, offset, max_records=1, isolation="read_uncommitted")
        except LaketailError:
            return None
        if not result.records.num_rows:
            return None
        return result.records.column("timestamp")[0].value // 1000


class HealthCollector(Collector):
    """Group lag (from :class:`LagClock`'s last refresh), replication health and tier
    delay (from the broker at scrape time)."""

    def __init__(self, broker: "Broker", services: "Services", lag: LagClock) -> None:
        self.broker = broker
        self.cluster = services.cluster
        self.tier = services.tier
        self.lag = lag

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        labels = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Records from the group's committed offset to the "
                                "high watermark.", labels=labels)
        lag_s = GaugeMetricFamily("kafka_consumergroup_lag_seconds", "Age of the first record the group has not "
                                  "consumed (0 when caught up).", labels=labels)
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset.",
                                    labels=labels)
        for group, topic, partition, offset, records, ms in self.lag.rows:
            row = [group, topic, str(partition)]
            lag.add_metric(row, records)
            lag_s.add_metric(row, ms / 1000.0)
            current.add_metric(row, offset)
        yield from (lag, lag_s, current)

        image = self.cluster.image
        under = offline = 0
        per_partition = GaugeMetricFamily(
            "kafka_topic_partition_under_replicated_partition",
            "1 when the partition's ISR is smaller than its replica set.", labels=["topic", "partition"])
        for (topic, partition), reg in image.partitions.items():
            is_under = len(reg.isr) < len(reg.replicas)
            under += is_under
            offline += not reg.online
            per_partition.add_metric([topic, str(partition)], int(is_under))
        yield per_partition
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions whose ISR is smaller than their replica set.", value=under)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a live leader.", value=offline)
        node = self.cluster
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks",
                                  "ISR shrinks of partitions this broker leads.", value=node.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands",
                                  "ISR expands of partitions this broker leads.", value=node.isr_expands)

        delay = GaugeMetricFamily("laketail_partition_tier_delay_records", "Records produced (below the log end "
                                  "offset) but not yet in the Delta table.", labels=["topic", "partition"])
        for topic in self.broker.list_topics():
            try:
                states = self.broker.partition_states(topic)
            except LaketailError:
                continue
            for state in states:
                delay.add_metric([topic, str(state.partition)], max(state.log_end_offset - state.tiered_offset, 0))
        yield delay
        http_forwards, handoffs_sent, handoffs_received = self.broker.append_routes()
        yield CounterMetricFamily("laketail_produce_forwards_http", "Appends this process forwarded to the "
                                  "leading broker over the inter-broker listener.", value=http_forwards)
        if handoffs_sent is not None and handoffs_received is not None:
            handoffs = CounterMetricFamily("laketail_request_process_handoffs", "Local hand-offs of appends "
                                           "between request processes (one per request and sibling).",
                                           labels=["process", "role"])
            process = str(self.broker.broker_id)
            handoffs.add_metric([process, "sent"], handoffs_sent)
            handoffs.add_metric([process, "received"], handoffs_received)
            yield handoffs
            passed = CounterMetricFamily("laketail_kafka_requests_passed", "Kafka requests this request process "
                                         "passed to the one running the coordinators.", labels=["process"])
            passed.add_metric([process], self.broker.kafka_requests_passed)
            yield passed
        failures = CounterMetricFamily("laketail_tier_pass_failures", "Tier passes of the topic that failed "
                                       "(nothing committed; retried with backoff).", labels=["topic"])
        for topic, count in sorted(self.tier.pass_failures.items()):
            failures.add_metric([topic], count)
        yield failures
        failing = GaugeMetricFamily("laketail_tier_failing", "Tier passes failed in a row, per topic whose last pass "
                                    "failed, by reason (credentials, throttled, unreachable, fenced, other).",
                                    labels=["topic", "reason"])
        for topic, failure in sorted(self.tier.failing.items()):
            failing.add_metric([topic, failure.reason], failure.failures)
        yield failing
        child = self.tier.child
        yield CounterMetricFamily("laketail_tier_child_restarts", "Times this broker's tier child process died "
                                  "and was started again.", value=child.restarts if child is not None else 0)


class GatewayMetrics:
    """The gateway's metric objects and its registry."""

    def __init__(self, broker: "Broker", services: "Services") -> None:
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
        r.register(PartitionCollector(broker, services.tables))
        r.register(InternalLoadCollector(broker))
        self.lag = LagClock(broker, services.offsets)
        r.register(HealthCollector(broker, services, self.lag))
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

    async def render_async(self) -> bytes:
        """Refresh the group lag, then render (the ``/metrics`` route)."""
        await self.lag.refresh()
        return generate_latest(self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
