"""SQL over topics: a temporary view per topic on its Delta table, read by Spark's own
Parquet reader.

``register_topics(spark, servers)`` creates, for every topic,

* ``<topic>_all`` -- every row of the table, control rows included, in the record
  schema (docs/architecture.md §4.2), ``partition`` from the files' paths so Spark
  prunes on it;
* ``<topic>`` -- committed data only: what read_committed may see of the table. No
  control rows, no records of aborted transactions, and nothing at or after a
  partition's last stable offset (its first transactional record whose end is not in
  the table yet: records outside transactions after it are hidden too, until it is
  decided). A transactional record is committed when the first control row of its
  ``(partition, producer_id)`` after its offset is COMMIT (docs/architecture.md §4.2,
  :mod:`laketail.spark.isolation`).

With laketail's jar (:mod:`laketail.spark.jvm`, built by ``make install`` when a JDK is
there; the usual case) both views are **strict**: every query sees the table's latest
committed version, transactions included, with no thread behind them.

* ``<topic>_all`` is ``format("laketail_table")``, whose file index replays the Delta
  log while Spark plans each query.
* ``<topic>`` (:func:`live_committed_frame`) is computed by Spark at each query from two
  such relations: the files whose Delta statistics prove they hold only records outside
  transactions (``rows=plain``, scanned with no row filter), and the others
  (``rows=marked``): their rows outside transactions, plus their transactional records
  whose outcome -- a window over the marked files' transactional and control rows -- is
  COMMIT; each partition's last stable offset comes from the same window (the table's
  own: a marker written but not tiered yet decides nothing until it is) and cuts both
  by a broadcast anti-join. A topic without transactions has no marked file, Spark's
  adaptive execution drops the window and the join once their empty inputs are known,
  and the scan runs as a plain Parquet scan; planning those empty parts costs a fixed
  amount per query (docs/architecture.md §10.3 gives the measured cost). Compaction (or
  OPTIMIZE) merging files of both kinds neither duplicates nor drops a row: a merged
  file holding any transactional or control row is marked by its own statistics, so a
  transaction's records and its marker are always among the marked files, wherever
  they were merged.

``register_topics`` then starts no follower for named topics; following every topic
(``topics=None``), a :class:`ViewFollower` only adds views for topics created later and
drops those of deleted topics. A view of a deleted topic that nobody dropped fails at
the next query (its table is gone); a topic made again under the name has its table at
the same location, and the view reads the new table.

Without the jar (no JDK at install, a Spark Connect session): both views are plain
Parquet scans of file lists, which Spark fixes when a view is made, so the follower
makes both again whenever the table moves to a new version -- a query sees the latest
snapshot as of at most ``interval_s`` (0.2 s) ago; aborted ranges are computed on the
driver from the transactional rows (:func:`committed_frame`), as a filter expression or,
when there are many, a broadcast anti-join, and each partition's bound also takes the
gateway's last stable offset. ``follow=False`` leaves no follower (the views stay
where they are); :func:`stop_following` ends a session's follower.

Records not tiered yet (the last ``table.flush.interval.ms``) are in none of these
views; ``format("laketail")`` -- also from SQL alone, ``CREATE TEMPORARY VIEW t USING
laketail OPTIONS (...)``, planned afresh by Spark at every query -- reads those too. Names
with characters SQL needs quoted (``-``, ``.``) are used as given: write ``SELECT * FROM
`my-topic```.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window, WindowSpec

from laketail.errors import UnknownTopicOrPartition
from laketail.records import RECORD_SCHEMA
from laketail.spark import jvm
from laketail.spark.columns import TABLE_COLUMNS
from laketail.spark.gateway import SparkGateway, TopicTable, parse_servers
from laketail.spark.isolation import TXN_COLUMNS, TransactionRanges, transaction_ranges
from laketail.spark.options import security_options
from laketail.spark.scan import open_parquet, read_rows
from laketail.spark.snapshot import SnapshotCache, TableFile, TableSnapshot

_ABORTED_COLUMNS = "a_partition int, a_producer_id long, a_after long, a_before long"
_CACHE_FILES = 100_000


class _TxnRowCache:
    """Per file: its transactional rows (or ``None`` when it has none). Files never
    change, so entries never go stale; the least recently used go first."""

    def __init__(self, size: int = _CACHE_FILES) -> None:
        self._rows: OrderedDict[str, pa.Table | None] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def rows(self, data_file: TableFile) -> pa.Table | None:
        with self._lock:
            if data_file.path in self._rows:
                self._rows.move_to_end(data_file.path)
                return self._rows[data_file.path]
        rows = _transactional_rows(data_file)
        with self._lock:
            self._rows[data_file.path] = rows
            while len(self._rows) > self._size:
                self._rows.popitem(last=False)
        return rows


def _has_transactions(data_file: TableFile) -> bool:
    if data_file.transactional is not None:
        return data_file.transactional
    meta = open_parquet(data_file.path).metadata
    schema = meta.schema
    col = next(i for i in range(len(schema)) if schema.column(i).path == "transactional")
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(col).statistics
        if stats is None or not stats.has_min_max or stats.max:
            return True
    return False


def _transactional_rows(data_file: TableFile) -> pa.Table | None:
    if not _has_transactions(data_file):
        return None
    pieces = []
    for rows in read_rows(data_file, data_file.first_offset, data_file.last_offset + 1, TXN_COLUMNS):
        keep = pc.or_(rows.column("transactional"), pc.is_valid(rows.column("control")))
        pieces.append(rows.filter(keep))
    table = pa.concat_tables(pieces) if pieces else None
    return table if table is not None and table.num_rows else None


_TXN_ROWS = _TxnRowCache()


def partition_ranges(snapshot: TableSnapshot) -> dict[int, TransactionRanges]:
    """Aborted ranges and stable offset of every partition that has transactions."""
    out = {}
    for partition, files in snapshot.files.items():
        pieces = [rows for rows in (_TXN_ROWS.rows(f) for f in files) if rows is not None]
        if pieces:
            out[partition] = transaction_ranges(pa.concat_tables(pieces))
    return out


def scan(spark: SparkSession, uri: str, paths: list[str], typed: dict[str, str] | None = None) -> DataFrame:
    """These files of the table at ``uri``, through Spark's Parquet reader, in the
    record schema (``partition`` from the paths, so Spark prunes on it), plus the typed
    columns ``typed`` gives the DDL types of (:func:`typed_ddl`; files written before
    them read them as null)."""
    typed = typed or {}
    columns = ", ".join([TABLE_COLUMNS] + [f"{name} {ddl}" for name, ddl in typed.items()])
    names = RECORD_SCHEMA.names + list(typed)
    if not paths:
        return spark.createDataFrame([], columns)
    frame = spark.read.schema(columns).option("basePath", uri).parquet(*paths)
    return frame.select(*names)


def typed_ddl(snapshot: TableSnapshot) -> dict[str, str]:
    """The Spark DDL type of each typed column of the table (``value_struct`` with
    ``laketail.table.mode``, ``key_struct`` with ``laketail.table.key.mode``); none for a
    table without."""
    from pyspark.sql.pandas.types import from_arrow_type

    return {name: str(from_arrow_type(t).simpleString()) for name, t in snapshot.typed_types().items()}


def table_frame(spark: SparkSession, snapshot: TableSnapshot) -> DataFrame:
    """Every row of the table at ``snapshot``."""
    return scan(spark, snapshot.uri, [f.path for p in sorted(snapshot.files) for f in snapshot.files[p]],
                typed_ddl(snapshot))


def _bounds(snapshot: TableSnapshot, ranges: dict[int, TransactionRanges], table: TopicTable | None) -> dict[int, int]:
    """Per partition with an undecided transaction: the offset at which its committed data
    stops (the table's stable offset, or the gateway's LSO when that is lower)."""
    bounds: dict[int, int] = {p: r.stable_offset for p, r in ranges.items() if r.stable_offset is not None}
    if table is not None:
        for p, offsets in table.partitions.items():
            if offsets.last_stable_offset < snapshot.tiered_offset(p):
                bounds[p] = min(bounds.get(p, offsets.last_stable_offset), offsets.last_stable_offset)
    return bounds


def committed_frame(spark: SparkSession, snapshot: TableSnapshot, table: TopicTable | None = None) -> DataFrame:
    """The table's committed data: what read_committed may see.

    Files without control rows, transactional rows or offsets past a partition's
    bound are scanned as they are; only the others are filtered, so a topic without
    transactions costs what a plain Parquet scan costs."""
    ranges = partition_ranges(snapshot)
    bounds = _bounds(snapshot, ranges, table)
    clean: list[str] = []
    mixed: list[str] = []
    for partition in sorted(snapshot.files):
        bound = bounds.get(partition)
        for data_file in snapshot.files[partition]:
            plain = _TXN_ROWS.rows(data_file) is None and (bound is None or data_file.last_offset < bound)
            (clean if plain else mixed).append(data_file.path)
    typed = typed_ddl(snapshot)
    if not mixed:
        return scan(spark, snapshot.uri, clean, typed)
    filtered = _without_uncommitted(spark, scan(spark, snapshot.uri, mixed, typed), ranges, bounds)
    return filtered if not clean else scan(spark, snapshot.uri, clean, typed).unionAll(filtered)


def _live_names(typed: dict[str, str] | None) -> list[str]:
    return RECORD_SCHEMA.names + list(typed or {})


def live_frame(spark: SparkSession, uri: str, typed: dict[str, str] | None = None) -> DataFrame:
    """Every row of the table at ``uri`` as of each query (``format("laketail_table")``);
    with ``typed`` (:func:`typed_ddl`), its typed columns too."""
    return jvm.topic_table(spark, uri, typed=typed).select(*_live_names(typed))


def live_committed_frame(spark: SparkSession, uri: str, typed: dict[str, str] | None = None) -> DataFrame:
    """Committed data of the table at ``uri`` as of each query: what read_committed may
    see of its latest version, all of it worked out by Spark while it runs the query.

    * Records outside transactions: every row of the files whose statistics prove they
      hold nothing else (``rows=plain``, scanned with no row filter), and the rows with
      ``control IS NULL AND NOT transactional`` of the other files (``rows=marked``).
    * Transactional records: only marked files hold them, and their markers (a file
      holding either is marked, by its own statistics). Of their transactional and
      control rows, each row's outcome is the control value of the first control row of
      its ``(partition, producer_id)`` at or after its offset: a running ``last(control,
      ignorenulls)`` over the rows in descending offset order (linear per producer id,
      where an "unbounded following" frame would be quadratic). Data rows whose outcome
      is COMMIT are kept; ABORT and no outcome yet (undecided) are not.
    * The last stable offset: per partition, the lowest offset of an undecided
      transactional record; rows at or after it are cut by a broadcast anti-join, as
      read_committed stops there. A partition with no undecided record is not cut.

    A table without transactions has no marked file: the transactional part and the
    bounds are empty relations, which Spark's adaptive execution drops (with the
    anti-join) once it has run them, so the rows are read by a plain Parquet scan; the
    planning and the empty stages are a fixed cost per query."""
    names = _live_names(typed)
    plain = jvm.topic_table(spark, uri, rows="plain", typed=typed).select(*names)
    marked = jvm.topic_table(spark, uri, rows="marked", typed=typed).select(*names)
    transactional = F.coalesce(F.col("transactional"), F.lit(False))
    outside = plain.unionAll(marked.where(F.col("control").isNull() & ~transactional))
    ends = marked.where(transactional | F.col("control").isNotNull()).withColumn(
        "_end", F.last("control", ignorenulls=True).over(_later_first())
    )
    data = ends.where(F.col("control").isNull())
    committed = data.where(F.col("_end") == "COMMIT").select(*names)
    stable = data.where(F.col("_end").isNull()).groupBy(F.col("partition").alias("_partition")).agg(
        F.min("offset").alias("_stable_offset")
    )
    rows = outside.unionAll(committed)
    beyond = (rows["partition"] == stable["_partition"]) & (rows["offset"] >= stable["_stable_offset"])
    return rows.join(F.broadcast(stable), beyond, "left_anti")


def _later_first() -> WindowSpec:
    """A producer id's rows of one partition, highest offset first, up to the current row."""
    return (
        Window.partitionBy("partition", "producer_id")
        .orderBy(F.col("offset").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )


def _below_bounds(frame: DataFrame, bounds: dict[int, int]) -> DataFrame:
    if not bounds:
        return frame
    beyond = [(F.col("partition") == p) & (F.col("offset") >= b) for p, b in sorted(bounds.items())]
    return frame.where(~functools.reduce(Column.__or__, beyond))


#: Up to this many aborted ranges become a filter expression; more, a broadcast anti-join.
_RANGES_AS_FILTER = 64


def _without_uncommitted(
    spark: SparkSession, frame: DataFrame, ranges: dict[int, TransactionRanges], bounds: dict[int, int]
) -> DataFrame:
    frame = _below_bounds(frame.where(F.col("control").isNull()), bounds)
    by_id = {p: sorted(r.aborted_producers) for p, r in sorted(ranges.items()) if r.aborted_producers}
    aborted = [
        (p, pid, after, before)
        for p, r in sorted(ranges.items())
        for pid, after, before in r.aborted
        if pid not in r.aborted_producers
    ]
    if by_id:  # producers that never committed here: their transactional records go by id
        hits = [(F.col("partition") == p) & F.col("producer_id").isin(pids) for p, pids in by_id.items()]
        frame = frame.where(~(F.col("transactional") & functools.reduce(Column.__or__, hits)))
    if not aborted:
        return frame
    if len(aborted) <= _RANGES_AS_FILTER:
        hits = [
            (F.col("partition") == p) & (F.col("producer_id") == pid)
            & (F.col("offset") > after) & (F.col("offset") < before)
            for p, pid, after, before in aborted
        ]
        return frame.where(~(F.col("transactional") & functools.reduce(Column.__or__, hits)))
    cut = F.broadcast(spark.createDataFrame(aborted, _ABORTED_COLUMNS))
    condition = (
        (frame["partition"] == cut["a_partition"])
        & (frame["producer_id"] == cut["a_producer_id"])
        & (frame["offset"] > cut["a_after"])
        & (frame["offset"] < cut["a_before"])
        & frame["transactional"]
    )
    return frame.join(cut, condition, "left_anti")


def view_name(name: str) -> str:
    """A temporary view name as Spark's parser needs it (quoted when not a plain word)."""
    return name if name.replace("_", "a").isalnum() and not name[0].isdigit() else f"`{name}`"


def register_topics(
    spark: SparkSession,
    servers: str | Sequence[str],
    topics: Iterable[str] | None = None,
    *,
    follow: bool = True,
    interval_s: float | None = None,
    security: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Create the ``<topic>`` and ``<topic>_all`` views of every topic (or of
    ``topics``); return each topic's committed view name. ``security``: confluent-kafka's
    client settings (``security.protocol``, ``sasl.*``, ``ssl.*``).

    With laketail's jar the views read the latest table version at every query, so
    named topics need no follower. ``follow`` (the default) starts the session's
    :class:`ViewFollower` only where it still has work: without the jar, to make the
    pinned views again as their tables move; with it, when following every topic
    (``topics`` None), to add views for topics created later and drop deleted ones."""
    urls = parse_servers(servers if isinstance(servers, str) else ",".join(servers))
    sec = security_options({f"laketail.{k}": v for k, v in (security or {}).items()})
    wanted = None if topics is None else list(topics)
    live = jvm.attach(spark)
    if not follow or (live and wanted is not None):
        with SparkGateway(urls, security=sec) as gateway:
            views = _TopicViews(spark, gateway, SnapshotCache(), live)
            return {t: t for t in views.refresh(wanted if wanted is not None else gateway.topics())}
    with _FOLLOWERS_LOCK:
        follower = _FOLLOWERS.get(id(spark))
        if follower is None or not follower.alive or follower.urls != urls:
            if follower is not None:
                follower.stop()
            follower = _FOLLOWERS[id(spark)] = ViewFollower(spark, urls, interval_s, security=sec)
        elif interval_s is not None:
            follower.interval_s = interval_s
    return {t: t for t in follower.follow(wanted)}


def stop_following(spark: SparkSession) -> None:
    """End the session's :class:`ViewFollower` (its views stay, frozen where they are)."""
    with _FOLLOWERS_LOCK:
        follower = _FOLLOWERS.pop(id(spark), None)
    if follower is not None:
        follower.stop()


#: How often a follower looks at its tables' Delta logs and the gateway's offsets.
FOLLOW_INTERVAL_S = 0.2
#: How long a follower goes without asking the gateway about a topic whose table did not
#: move and whose views pin no bound (it asks anyway then: a topic deleted, or deleted and
#: made again, is noticed within this).
RECHECK_S = 5.0

_FOLLOWERS: dict[int, "ViewFollower"] = {}
_FOLLOWERS_LOCK = threading.Lock()
_log = logging.getLogger("laketail.spark.sql")


@dataclass(frozen=True)
class _Asked:
    """What the gateway last said of a topic, for the follower's quick passes.

    ``bounded``: the views pin a bound (the gateway's last stable offset below the
    table's tiered offset, or a transaction the table does not end). Without one, only a
    new table version can change the views: the LSO never goes back and the tiered
    offsets are the version's, so the LSO stays at or past them; committed transactions
    already in the table are its files, which change only with the version. So an
    unbounded topic is asked again only when its table moved (or ``RECHECK_S`` passed)."""

    uri: str
    partitions: int
    version: int
    bounded: bool
    at: float  # time.monotonic() of the answer


class _TopicViews:
    """Makes a session's views of topics; remembers what each view shows, and (without
    the jar) what the gateway last said of each topic.

    ``live``: the JVM relation is loadable (:func:`laketail.spark.jvm.attach`), so both
    views are made once over it (again only for a table at a new location) and compute
    everything at each query. Otherwise both are made again at every new table version,
    and in a follower's pass an unchanged topic costs one Delta log check (a stat), no
    Spark call and, unless its views pin a bound (an undecided transaction), no request."""

    def __init__(self, spark: SparkSession, gateway: SparkGateway, cache: SnapshotCache, live: bool) -> None:
        self.spark = spark
        self.gateway = gateway
        self.cache = cache
        self.live = live
        self.shown: dict[str, object] = {}
        self.asked: dict[str, _Asked] = {}

    def refresh(self, topics: Iterable[str], *, quick: bool = False) -> list[str]:
        """Bring the views of ``topics`` up to date; the topics that have views.
        ``quick`` (the follower's passes): with the jar, a topic that has views costs
        nothing; without, one whose views pin no bound and whose table did not move since
        the gateway was last asked costs one stat of its Delta log and no request (see
        :class:`_Asked`)."""
        out = []
        for topic in topics:
            if self.live:
                if not (quick and topic in self.shown):
                    self._refresh_live(topic, self.gateway.table(topic))
            elif not (quick and self._unmoved(topic)):
                table = self.gateway.table(topic)
                snapshot = self.cache.latest(table.uri, max(table.partitions, default=-1) + 1)
                bounded = self._refresh_pinned(topic, table, snapshot)
                self.asked[topic] = _Asked(table.uri, len(table.partitions), snapshot.version, bounded,
                                           time.monotonic())
            out.append(topic)
        return out

    def _unmoved(self, topic: str) -> bool:
        asked = self.asked.get(topic)
        if asked is None or asked.bounded or time.monotonic() - asked.at > RECHECK_S:
            return False
        return self.cache.latest(asked.uri, asked.partitions).version == asked.version

    def _refresh_live(self, topic: str, table: TopicTable) -> None:
        # a typed table's value_struct / key_struct types are read from its schema; a wider one
        # makes the views again
        typed = typed_ddl(self.cache.latest(table.uri, max(table.partitions, default=-1) + 1))
        if self.shown.get(topic) != (table.uri, typed):
            live_frame(self.spark, table.uri, typed).createOrReplaceTempView(view_name(f"{topic}_all"))
            live_committed_frame(self.spark, table.uri, typed).createOrReplaceTempView(view_name(topic))
            self.shown[topic] = (table.uri, typed)

    def _refresh_pinned(self, topic: str, table: TopicTable, snapshot: TableSnapshot) -> bool:
        bounds = tuple(sorted(
            (p, o.last_stable_offset) for p, o in table.partitions.items()
            if o.last_stable_offset < snapshot.tiered_offset(p)
        ))
        key = (table.uri, snapshot.version, bounds)
        if self.shown.get(topic) != key:
            table_frame(self.spark, snapshot).createOrReplaceTempView(view_name(f"{topic}_all"))
            committed_frame(self.spark, snapshot, table).createOrReplaceTempView(view_name(topic))
            self.shown[topic] = key
        return bool(bounds)

    def drop(self, topic: str) -> None:
        self.shown.pop(topic, None)
        asked = self.asked.pop(topic, None)
        if asked is not None:
            self.cache.forget(asked.uri)
        self.spark.catalog.dropTempView(f"{topic}_all")
        self.spark.catalog.dropTempView(topic)


class ViewFollower:
    """Keeps one session's topic views on their tables' latest snapshots.

    Role: without the JVM relation, a view over Spark's Parquet reader has its file list
    fixed when it is made; this thread makes both views of a topic again at every new
    table version (and while a bound is pinned). With it (``live``), the views compute
    everything at each query and the thread only follows the topic list when following
    every topic: views for new topics, deleted topics' views dropped
    (:func:`register_topics` starts no follower for named topics then). Invariant: after
    a pass, every followed topic's views pin what its Delta log had when the pass looked.
    Thread-safety: :meth:`follow` (any thread) and the follower's own thread take turns
    on one lock; Spark's catalog is safe to call from both. Errors of a pass (a gateway
    down, a topic deleted) are logged and the next pass tries again; a deleted topic's
    views are dropped (noticed when the gateway is next asked: at once when following
    every topic, else within ``RECHECK_S`` for a topic that pins no bound). Without the
    jar a pass asks the gateway about a topic only when its table moved or its views pin
    a bound (:class:`_Asked`). The thread ends with :meth:`stop` or when the session's
    SparkContext stops.
    """

    def __init__(self, spark: SparkSession, urls: tuple[str, ...], interval_s: float | None = None, *,
                 security: tuple[tuple[str, str], ...] = ()) -> None:
        self.urls = urls
        self.interval_s = FOLLOW_INTERVAL_S if interval_s is None else interval_s
        self._spark = spark
        self.live = jvm.attach(spark)
        self._views = _TopicViews(spark, SparkGateway(urls, security=security), SnapshotCache(), self.live)
        self._topics: set[str] | None = set()  # None: every topic, new ones too
        self.passes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="laketail-view-follower", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def follow(self, topics: list[str] | None) -> list[str]:
        """Follow ``topics`` too (None: every topic); their views are current on return."""
        if self.live:
            jvm.attach(self._spark)  # the calling thread's class loader sees the jar
        with self._lock:
            if topics is None:
                self._topics = None
                topics = self._views.gateway.topics()
                self._views.shown.clear()  # asked to register: made again, whatever they show
                return self._views.refresh(topics)
            for topic in topics:
                self._views.shown.pop(topic, None)
            if self._topics is not None:
                self._topics.update(topics)
            return self._views.refresh(topics)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            if self.live:
                jvm.attach(self._spark)  # this thread's class loader, for views of new topics
            while not self._stop.wait(self.interval_s):
                if self._spark.sparkContext._jsc is None:
                    return  # the session was stopped
                try:
                    self._pass()
                except Exception as exc:  # noqa: BLE001 - a follower outlives a bad pass
                    _log.warning("laketail view follower of %s (topics %s): %s: %s", ",".join(self.urls),
                                 "all" if self._topics is None else sorted(self._topics), type(exc).__name__, exc)
        finally:
            self._views.gateway.close()

    def _pass(self) -> None:
        with self._lock:
            topics = self._views.gateway.topics() if self._topics is None else sorted(self._topics)
            for gone in set(self._views.shown) - set(topics):
                self._views.drop(gone)
            self.passes += 1
            for topic in topics:
                try:
                    self._views.refresh([topic], quick=True)
                except UnknownTopicOrPartition:
                    if topic in self._views.shown:
                        self._views.drop(topic)
