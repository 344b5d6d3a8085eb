"""Benchmark 10: consumer groups and transactions, through laketail's Python client.

Each figure runs confluent-kafka's API (``laketail.client``) in the harness's process
against one broker, and compares a feature with the same client doing the same work
without it, so the ratio is the feature's cost. The issue sets no target for these;
they are reported, with Kafka's own figures as the yardstick where there is one.

* **Transactional produce.** ``n`` records (``group_records``) of 100 bytes to a
  4-partition topic from a producer with ``transactional.id`` that commits every
  ``txn_interval_ms`` (100 ms is the interval Confluent's "Transactions in Apache
  Kafka" measures: about 3% below an idempotent producer at full speed), and ``n / 10``
  records committing every 100 records; baseline: the same producer, idempotent, no
  transactions (``flush()`` at the end). records/s from the first ``produce()`` until
  every record is acknowledged (the last commit returned, or ``flush()``).
* **Group consumption.** Reading back everything the idempotent runs wrote (``n`` x
  ``repeats`` records): a consumer in a group (``subscribe``, auto-commit every 5 s:
  confluent-kafka's defaults), and one that commits synchronously after every
  ``consume(500)``; baseline: the same consumer with ``assign()`` at the beginning and
  no commits. records/s from the first batch handed out to the last, so the join
  (with ``group.initial.rebalance.delay.ms``, 3 s) is not in it; the time to the first
  record is reported apart.
* **Rebalance.** A second member joins a group of one on the 4-partition topic, then
  leaves; the time until both members (then the one left) hold their new assignments,
  ``rebalance_rounds`` times, each join and leave after a random pause (so they fall
  anywhere between the first member's heartbeats). A member learns of a rebalance on
  its next heartbeat, so a rebalance should take at most ``heartbeat.interval.ms``
  (confluent-kafka's default, 3 s, which the members keep) plus a few round trips:
  the figure is the slowest round against that interval.
* **Exactly-once read-process-write.** The ``n`` records consumed, each produced again
  to an output topic with its partition, batch by batch (``consume(500)``): per batch a
  transaction with ``send_offsets_to_transaction`` (a ``read_committed`` consumer),
  against the at-least-once loop: produce, ``flush()``, ``commit(asynchronous=False)``.

Every run checks what it measured: no delivery errors, every record consumed exactly
once per run (distinct offsets), the group's committed offsets at the end offsets.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

from bench import bodies
from bench.context import Context
from bench.figures import Figure

BENCH = "10 groups and transactions"
PARTITIONS = 4
SOURCE = "bench-groups-in"
TXN_TOPIC = "bench-txn"
RPW_INPUT = "bench-rpw-in"
OUTPUT = "bench-eos-out"
BATCH = 500  # records per consume() in the read-process-write loops
_ids = itertools.count()


def _unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


class DeliveryErrors(Exception):
    """A benchmark run lost or failed records: its number would mean nothing."""


def _producer(url: str, transactional_prefix: str | None):
    """A producer (transactional when a prefix is given, its id made unique) and the list
    its delivery callback appends failures to."""
    from laketail.client import Producer

    failed: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    conf = {"bootstrap.servers": url, "on_delivery": report}
    if transactional_prefix is not None:
        conf["transactional.id"] = _unique(transactional_prefix)
    return Producer(conf), failed


def _committed_total(consumer, topic: str) -> int:
    """The group's committed offsets of ``topic`` summed (a partition without one counts 0)."""
    from laketail.client import TopicPartition

    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return sum(max(0, tp.offset) for tp in consumer.committed(tps, timeout=10))


# -- producing ------------------------------------------------------------------------------


def produce_n(url: str, topic: str, n: int, values: list[bytes], *, txn_every_s: float | None = None,
              txn_every_records: int | None = None) -> dict:
    """Produce ``n`` records; with either ``txn_every_*`` inside transactions committed
    that often. Returns seconds and the number of transactions."""
    transactional = txn_every_s is not None or txn_every_records is not None
    producer, failed = _producer(url, "bench-txn" if transactional else None)
    try:
        producer.list_topics(topic, timeout=10)  # metadata cached before the clock starts
        if transactional:
            producer.init_transactions(30)
        commits = 0
        started = time.monotonic()
        opened = started
        in_txn = 0
        if transactional:
            producer.begin_transaction()
        count = len(values)
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, values[i % count])
                    break
                except BufferError:
                    producer.poll(0.005)
            if i % 1000 == 999:
                producer.poll(0)
            if transactional:
                in_txn += 1
                now = time.monotonic() if txn_every_s is not None else 0.0
                if (txn_every_records is not None and in_txn >= txn_every_records) or \
                        (txn_every_s is not None and now - opened >= txn_every_s):
                    producer.commit_transaction(30)
                    commits += 1
                    in_txn = 0
                    producer.begin_transaction()
                    opened = time.monotonic()
        if transactional:
            producer.commit_transaction(30)
            commits += 1
        left = producer.flush(30)
        elapsed = time.monotonic() - started
    finally:
        producer.close()
    if failed or left:
        raise DeliveryErrors(f"{len(failed)} failed, {left} undelivered: {failed[:3]}")
    return {"seconds": elapsed, "records_per_s": n / elapsed, "transactions": commits}


# -- consuming ------------------------------------------------------------------------------


def consume_n(url: str, topic: str, n: int, mode: str) -> dict:
    """Read ``n`` records of ``topic`` from its start: ``assign`` (no group, no commits),
    ``group`` (subscribe, auto-commit) or ``group-commit`` (subscribe, a synchronous
    commit after every batch)."""
    from laketail.client import OFFSET_BEGINNING, Consumer, TopicPartition

    group = _unique("bench-group")
    conf = {"bootstrap.servers": url, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": mode == "group"}
    consumer = Consumer(conf)
    seen: set[tuple[int, int]] = set()
    commits = 0
    try:
        asked = time.monotonic()
        if mode == "assign":
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        else:
            consumer.subscribe([topic])
        first = None
        counted_from = 0
        deadline = asked + 120
        while len(seen) < n:
            if time.monotonic() > deadline:
                raise DeliveryErrors(f"{mode}: {len(seen)} of {n} records within 120 s")
            batch = consumer.consume(num_messages=BATCH, timeout=1.0)
            for msg in batch:
                if msg.error() is not None:
                    raise DeliveryErrors(f"{mode}: {msg.error()}")
                seen.add((msg.partition(), msg.offset()))
            if batch and first is None:  # the clock starts once the first batch is in
                first = time.monotonic()
                counted_from = len(seen)
            if batch and mode == "group-commit":
                consumer.commit(asynchronous=False)
                commits += 1
        elapsed = time.monotonic() - first
        joined_s = first - asked
        committed = None
        if mode != "assign":
            consumer.commit(asynchronous=False)
            committed = _committed_total(consumer, topic)
    finally:
        consumer.close()
    if len(seen) != n or (committed is not None and committed != n):
        raise DeliveryErrors(f"{mode}: {len(seen)} distinct records, committed {committed}, expected {n}")
    return {"seconds": elapsed, "records_per_s": (n - counted_from) / elapsed, "first_record_after_s": joined_s,
            "commits": commits}


# -- rebalancing ----------------------------------------------------------------------------


class Member(threading.Thread):
    """A group member polling on its own thread (a consumer is used by one thread);
    ``owned`` is its assignment after its latest poll."""

    def __init__(self, url: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.url, self.group, self.topic = url, group, topic
        self.owned = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from laketail.client import Consumer

        try:
            consumer = Consumer({"bootstrap.servers": self.url, "group.id": self.group,
                                 "auto.offset.reset": "latest"})
            consumer.subscribe([self.topic])
            while not self.stop.is_set():
                consumer.poll(0.02)
                self.owned = len(consumer.assignment())
            consumer.close()  # leaves the group
        except BaseException as exc:  # reported by the waiting side
            self.error = exc


def _wait(condition, members: list[Member], timeout_s: float = 120.0) -> float:
    started = time.monotonic()
    while not condition():
        for m in members:
            if m.error is not None:
                raise DeliveryErrors(f"group member failed: {m.error!r}")
        if time.monotonic() - started > timeout_s:
            raise DeliveryErrors("a rebalance did not finish within 120 s")
        time.sleep(0.002)
    return time.monotonic()


def rebalances(url: str, topic: str, rounds: int, heartbeat_s: float) -> dict:
    """Seconds for a second member to join a stable group of one and for it to leave,
    each after a random pause of up to ``heartbeat_s``."""
    pauses = random.Random(10)
    group = _unique("bench-rebalance")
    first = Member(url, group, topic)
    first.start()
    joins: list[float] = []
    leaves: list[float] = []
    try:
        _wait(lambda: first.owned == PARTITIONS, [first])
        half = PARTITIONS // 2
        for _ in range(rounds):
            second = Member(url, group, topic)
            time.sleep(pauses.uniform(0, heartbeat_s))
            t0 = time.monotonic()
            second.start()
            t1 = _wait(lambda second=second: first.owned == half and second.owned == PARTITIONS - half, [first, second])
            joins.append(t1 - t0)
            time.sleep(pauses.uniform(0, heartbeat_s))
            t2 = time.monotonic()
            second.stop.set()
            t3 = _wait(lambda: first.owned == PARTITIONS, [first, second])
            leaves.append(t3 - t2)
            second.join(30)
    finally:
        first.stop.set()
        first.join(30)
    return {"join_s": joins, "leave_s": leaves}


# -- read-process-write ---------------------------------------------------------------------


def read_process_write(url: str, source: str, output: str, n: int, exactly_once: bool) -> dict:
    """Consume ``n`` records, produce each again to ``output`` (same partition): per batch
    a transaction with the offsets in it, or produce + flush + synchronous commit."""
    from laketail.client import Consumer, KafkaException

    group = _unique("bench-eos" if exactly_once else "bench-alo")
    consumer = Consumer({"bootstrap.servers": url, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    producer, failed = _producer(url, "bench-eos-txn" if exactly_once else None)
    seen = 0
    batches = 0
    try:
        producer.list_topics(output, timeout=10)
        if exactly_once:
            producer.init_transactions(30)
        consumer.subscribe([source])
        first = None
        deadline = time.monotonic() + 180
        while seen < n:
            if time.monotonic() > deadline:
                raise DeliveryErrors(f"read-process-write: {seen} of {n} records within 180 s")
            batch = consumer.consume(num_messages=BATCH, timeout=1.0)
            if not batch:
                continue
            if first is None:
                first = time.monotonic()
            if exactly_once:
                producer.begin_transaction()
            for msg in batch:
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                producer.produce(output, b"out:" + msg.value(), partition=msg.partition())
            if exactly_once:
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata())
                producer.commit_transaction(30)
            else:
                producer.flush(30)
                consumer.commit(asynchronous=False)
            seen += len(batch)
            batches += 1
        elapsed = time.monotonic() - first
        committed = _committed_total(consumer, source)
    finally:
        consumer.close()
        producer.close()
    if failed or seen != n or committed != n:
        raise DeliveryErrors(f"read-process-write: {len(failed)} failed, {seen} read, committed {committed} of {n}")
    return {"seconds": elapsed, "records_per_s": n / elapsed, "batches": batches}


# -- the benchmark ----------------------------------------------------------------------------


def _median(runs: list[dict], key: str = "records_per_s") -> dict:
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[len(ordered) // 2]


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    n = p.group_records
    small_n = max(1000, n // 10)  # small transactions are slow: fewer records keep the run short
    repeats = max(1, p.repeats)
    broker = ctx.laketail("groups")
    for topic in (SOURCE, TXN_TOPIC, RPW_INPUT, OUTPUT):
        broker.create_topic(topic, PARTITIONS)
    values = bodies.values(1024, p.value_bytes)
    figures: list[Figure] = []
    cpu0 = broker.cpu_seconds()

    # Transactions on the produce side; the idempotent runs fill SOURCE for the consumers.
    plain: list[dict] = []
    timed: list[dict] = []
    small: list[dict] = []
    interval_s = p.txn_interval_ms / 1000.0
    for i in range(repeats):
        ctx.status(f"idempotent, then transactional produce of {n:,} records ({i + 1}/{repeats})")
        plain.append(produce_n(broker.url, SOURCE, n, values))
        timed.append(produce_n(broker.url, TXN_TOPIC, n, values, txn_every_s=interval_s))
        small.append(produce_n(broker.url, TXN_TOPIC, small_n, values, txn_every_records=100))
    base = _median(plain)
    for label, runs, count in ((f"commit every {p.txn_interval_ms} ms", timed, n),
                               ("commit every 100 records", small, small_n)):
        got = _median(runs)
        figures.append(Figure(
            BENCH, f"transactional produce, {label} ({count:,} records)", got["records_per_s"], "records/s",
            f"the same producer, idempotent, no transactions ({n:,} records)", base["records_per_s"], None,
            details={"laketail": got, "baseline": base, "runs": {"transactional": runs, "idempotent": plain}},
        ))

    # Consumption in a group against assign() without one: all of SOURCE each time.
    total = n * repeats
    runs: dict[str, list[dict]] = {"assign": [], "group": [], "group-commit": []}
    for i in range(repeats):
        for mode in runs:
            ctx.status(f"consume {total:,} records: {mode} ({i + 1}/{repeats})")
            runs[mode].append(consume_n(broker.url, SOURCE, total, mode))
    base = _median(runs["assign"])
    names = {"group": "group consumer, subscribe + auto-commit",
             "group-commit": f"group consumer, synchronous commit every {BATCH} records"}
    for mode, label in names.items():
        got = _median(runs[mode])
        figures.append(Figure(
            BENCH, f"{label} ({total:,} records)", got["records_per_s"], "records/s",
            "the same consumer with assign(), no group", base["records_per_s"], None,
            details={"laketail": got, "baseline": base, "runs": runs[mode], "assign_runs": runs["assign"],
                     "first_record_after_s": [r["first_record_after_s"] for r in runs[mode]]},
        ))

    ctx.status(f"rebalances: a member joins and leaves, {p.rebalance_rounds} times")
    heartbeat_ms = 3000.0  # confluent-kafka's heartbeat.interval.ms, which the members keep
    times = rebalances(broker.url, SOURCE, p.rebalance_rounds, heartbeat_ms / 1000)
    for what, key in (("joins", "join_s"), ("leaves", "leave_s")):
        samples = sorted(times[key])
        figures.append(Figure(
            BENCH, f"rebalance when a second member {what} a group on {PARTITIONS} partitions "
                   f"(slowest of {len(samples)})",
            1000 * samples[-1], "ms", "heartbeat.interval.ms (a member learns on its next heartbeat)",
            heartbeat_ms, None, details={"seconds": times[key], "median_s": samples[len(samples) // 2]},
        ))

    # Exactly-once read-process-write against at-least-once.
    eos: list[dict] = []
    alo: list[dict] = []
    ctx.status(f"filling the read-process-write input with {n:,} records")
    produce_n(broker.url, RPW_INPUT, n, values)
    for i in range(repeats):
        ctx.status(f"read-process-write of {n:,} records: at-least-once, exactly-once ({i + 1}/{repeats})")
        alo.append(read_process_write(broker.url, RPW_INPUT, OUTPUT, n, exactly_once=False))
        eos.append(read_process_write(broker.url, RPW_INPUT, OUTPUT, n, exactly_once=True))
    got, base = _median(eos), _median(alo)
    figures.append(Figure(
        BENCH, f"exactly-once read-process-write, a transaction per {BATCH} records ({n:,} records)",
        got["records_per_s"], "records/s", "at-least-once: produce, flush, synchronous commit per batch",
        base["records_per_s"], None,
        details={"laketail": got, "baseline": base, "runs": {"exactly_once": eos, "at_least_once": alo},
                 "broker_cpu_s": broker.cpu_seconds() - cpu0},
    ))
    ctx.stop(broker)
    try:
        plot(ctx, figures, times, heartbeat_ms)
    except Exception as exc:  # a plot must not lose the numbers
        ctx.console.print(f"[yellow]benchmark 10 plot failed:[/yellow] {exc}")
    return figures


def plot(ctx: Context, figures: list[Figure], times: dict, heartbeat_ms: float) -> None:
    """Left: each feature's records/s against the same client without it. Right: every
    rebalance against heartbeat.interval.ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.context import save_plot

    rates = [f for f in figures if f.unit == "records/s" and f.ratio is not None]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    y = list(range(len(rates)))[::-1]
    left.barh(y, [f.ratio for f in rates], color="tab:blue")
    for yi, f in zip(y, rates):
        left.text(f.ratio + 0.02, yi, f"{f.ratio:.2f}x ({f.value:,.0f}/s)", va="center", fontsize=8)
    left.axvline(1.0, color="black", linewidth=1)
    left.set_yticks(y)
    left.set_yticklabels([f.name.split(" (")[0] for f in rates], fontsize=8)
    left.set_xlim(0, max(1.3, max(f.ratio for f in rates) * 1.35))
    left.set_xlabel("records/s against the same client without the feature")
    for i, (key, label) in enumerate((("join_s", "member joins"), ("leave_s", "member leaves"))):
        right.scatter([i] * len(times[key]), [1000 * t for t in times[key]], label=label, zorder=3)
    right.axhline(heartbeat_ms, color="tab:red", linestyle="--", label="heartbeat.interval.ms")
    right.set_xticks([0, 1])
    right.set_xticklabels(["join", "leave"])
    right.set_xlim(-0.6, 1.6)
    right.set_ylim(0, heartbeat_ms * 1.3)
    right.set_ylabel("rebalance time (ms)")
    right.legend(fontsize=8, loc="upper left")
    fig.suptitle("10. consumer groups and transactions (laketail's Python client, one broker)")
    save_plot(ctx, fig, "groups_txn")
