"""The tierer: moves records below the high watermark from hot logs into Delta tables.

Role: about once per ``table.flush.interval.ms`` per topic (sooner when a partition has
``table.flush.bytes`` waiting), write one Parquet file per partition with new records
and commit all of a topic's new files in ONE Delta commit. The produce path never
waits for it.

Exactly-once across crashes: each commit carries, for every partition it covers, the
Delta transaction action ``(app_id="laketail.tier.<p>", version=<next offset to tier>)``.
At start the broker reads those versions back as the tiered offsets and re-tiers only
what lies above them; a crash between writing Parquet files and committing leaves
unreferenced files (never read, removed by vacuum), never duplicates.

Files are written by :func:`laketail.storage.data_files.write_data_file`.

Typed columns: for a topic with ``laketail.table.mode=value_schema_id_prefix`` the plan
carries the live versions of its ``<topic>-value`` subject (``typed``), and the
pass adds ``value_struct`` (``records.TYPED_VALUE_COLUMN``): each value decoded by the
version its wire-format prefix names, in the latest version's Arrow type
(:func:`laketail.schemas.columns.decode_versions`); with ``value_schema_latest``, each
value as it is (no prefix) by the latest version (``decode_unframed``); a value that does not decode is a
null there, counted in :attr:`Tierer.undecoded_values`. Keys the same way: with
``laketail.table.key.mode=key_schema_id_prefix`` (``key_schema_latest``) the plan carries
``<topic>-key``'s versions too and the pass adds ``key_struct`` (``records.TYPED_KEY_COLUMN``)
by the same decoder; the plan's ``typed`` lists one entry per typed column. Before the
commit that first carries a typed column, or a wider type of it (a new schema version),
the pass evolves the table's schema (``_evolve``): an append whose schema is wider leaves a Delta table's
schema as it is in deltalake 1.6, so an empty merge-mode write widens it first.

Where the work runs: the :class:`Tierer` (in the broker, on its event loop) plans each
pass -- which led partitions have records below HW, at which leader epoch, where on
disk -- and learns what was tiered (``mark_tiered``, the table index); the pass itself
(:func:`execute_pass`: read the hot segment files, write Parquet, commit) runs in the
broker's tier child process (:mod:`laketail.storage.tier_child`, the default), or in a
worker thread with ``laketail.tierer.process=false``. Same code, same rules either way.

A pass that fails (the object store unreachable, throttling, expired credentials, a
conflict) commits nothing and is retried with backoff, as Kafka's remote log manager
retries a copy (``remote.log.manager.task.retry.backoff.ms`` 500 ms, doubling up to
``remote.log.manager.task.retry.backoff.max.ms`` 30 s): the topic's next pass is due after
:func:`retry_backoff_s`, never sooner than its flush interval. Produce never waits for
tiering, so acknowledgements keep coming from the hot logs meanwhile; what failed, and
why (:func:`failure_reason`), is in :attr:`Tierer.failing`, the broker log and
``/metrics``. Once a pass succeeds the topic is back on its interval and catches up.

Thread-safety: one asyncio task drives it; passes over one topic never overlap (an
asyncio lock per topic); in-process, a pass holds the topic's table lock while it uses
the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Awaitable, Callable

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction

from laketail.clock import Clock
from laketail.errors import UnknownTopicOrPartition
from laketail.records import RECORD_SCHEMA, TYPED_COLUMNS, TYPED_KEY_COLUMN, TYPED_VALUE_COLUMN, widen_frames
from laketail.storage import frame, object_store
from laketail.storage.data_files import write_data_file
from laketail.storage.frame import CorruptFrame
from laketail.storage.partition_log import OffsetBelowHotTier, _spans, _window
from laketail.storage.table_reader import EPOCH_APP_PREFIX, DataFile, TableReader, catch_up, tier_app_id
from laketail.storage.tier_child import TierChild

if TYPE_CHECKING:
    from laketail.storage.log_manager import LogManager
    from laketail.storage.partition_log import PartitionLog
    from laketail.storage.ports import LeadershipView, TopicConfigs

log = logging.getLogger(__name__)

MAX_RECORDS_PER_FILE = 2_000_000
MAX_BYTES_PER_FILE = 256 * 1024 * 1024
#: Kafka's ``remote.log.manager.task.retry.backoff.ms`` / ``...backoff.max.ms`` defaults.
RETRY_BACKOFF_S = 0.5
RETRY_BACKOFF_MAX_S = 30.0


def retry_backoff_s(failures: int, interval_s: float) -> float:
    """How long after its ``failures``-th failed pass in a row a topic is tried again:
    :data:`RETRY_BACKOFF_S` doubled per failure up to :data:`RETRY_BACKOFF_MAX_S`, and
    never sooner than the topic's flush interval ``interval_s``."""
    backoff = RETRY_BACKOFF_S * 2 ** min(max(failures - 1, 0), 16)
    return max(interval_s, min(backoff, RETRY_BACKOFF_MAX_S))


#: (reason, markers in a failed pass's error text), first match wins. delta-rs and its
#: object store quote the store's answer (S3's error code, the HTTP status) in the text.
_REASONS = (
    ("credentials", ("ExpiredToken", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "AccessDenied",
                     "403 Forbidden", "401 Unauthorized", "ExpiredTokenException")),
    ("throttled", ("SlowDown", "503 Service Unavailable", "429 Too Many Requests", "RequestLimitExceeded")),
    ("unreachable", ("error sending request", "connection closed", "Connection refused", "connection error",
                     "timed out", "operation timed out", "dns error")),
    ("fenced", ("LeaderFenced", "TableAhead", "leader epoch", "not as planned")),
)


def failure_reason(error: str) -> str:
    """What a failed pass's error text says went wrong: ``credentials`` (the store refused
    the broker's credentials: fix them), ``throttled`` (503 SlowDown), ``unreachable``
    (no answer), ``fenced`` (the table moved past the plan: another leader's commit, or
    our own whose answer was lost; the next pass plans from it), else ``other``."""
    for reason, markers in _REASONS:
        if any(m.lower() in error.lower() for m in markers):
            return reason
    return "other"


@dataclasses.dataclass
class TierFailure:
    """A topic whose last pass failed: how many in a row, the reason and the error text."""

    failures: int
    reason: str
    error: str


class Tierer:
    """Hot logs -> Delta tables (see the module docstring).

    Parts (passed in by the broker): ``topics`` -- names and configs
    (:class:`~laketail.storage.ports.TopicConfigs`); ``logs`` -- the hot logs;
    ``tables`` -- the Delta tables; ``leadership`` -- which partitions this broker
    leads, at which epoch (:class:`~laketail.storage.ports.LeadershipView`); ``clock``."""

    def __init__(
        self,
        topics: "TopicConfigs",
        logs: "LogManager",
        tables: TableReader,
        leadership: "LeadershipView",
        clock: Clock,
        process: bool = False,
    ) -> None:
        self.topics = topics
        self.logs = logs
        self.tables = tables
        self.leadership = leadership
        self.clock = clock
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._due: dict[str, float] = {}
        self._busy: dict[str, asyncio.Future] = {}
        self._stopping = False
        self._tier_locks: dict[str, asyncio.Lock] = {}
        #: the tier child (``laketail.tierer.process``, default true), else passes run in a worker thread
        self.child: TierChild | None = TierChild() if process else None
        # per topic: (table version, partitions, followed partitions) last followed
        self._followed: dict[str, tuple] = {}
        self.commits = 0
        #: the live versions of a subject (``<topic>-value``, ``<topic>-key``; oldest first,
        #: as a pass's ``typed`` carries them), for topics with typed columns; set by the broker
        self.subject_schemas: Callable[[str], Awaitable[list[dict]]] | None = None
        #: per topic, values (keys) tiered as a null ``value_struct`` (``key_struct``): not decodable
        self.undecoded_values: dict[str, int] = {}
        #: topics whose last pass failed (cleared by the next pass that succeeds)
        self.failing: dict[str, TierFailure] = {}
        #: per topic, failed passes since the broker started
        self.pass_failures: dict[str, int] = {}

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="laketail-tierer")
        if self.child is not None:
            self.child.start()

    async def stop(self) -> None:
        """Stop the loop after a last pass, so a clean shutdown leaves the tables current."""
        self._stopping = True
        if self._task is not None:
            if self._wake is not None:
                self._wake.set()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            for topic in self.topics.list_topics():
                await self.tier_now(topic)
        if self.child is not None:
            await self.child.close()

    def schedule(self, topic: str) -> None:
        """Consider ``topic`` at the next pass (this broker just became its leader)."""
        self._due[topic] = 0.0
        if self._wake is not None:
            self._wake.set()

    def reschedule(self, topic: str) -> None:
        """The topic's config changed: its next pass is one interval, the new one, from
        now (a longer interval set now holds from now, a shorter one starts now)."""
        try:
            interval = self.topics.topic_config(topic).table_flush_interval_ms / 1000.0
        except UnknownTopicOrPartition:  # deleted meanwhile: nothing to schedule
            return
        self._due[topic] = self.clock.monotonic() + interval
        if self._wake is not None:
            self._wake.set()

    def wake(self, topic: str) -> None:
        """A produce landed: tier now if a partition has ``table.flush.bytes`` waiting."""
        if self._wake is None or topic in self.failing:  # a failing topic waits for its backoff
            return
        try:
            config = self.topics.topic_config(topic)
        except UnknownTopicOrPartition:  # deleted meanwhile: nothing to tier
            return
        for plog in self.logs.partitions(topic):
            if plog.untiered_bytes >= config.table_flush_bytes:
                self._due[topic] = 0.0
                self._wake.set()
                return

    async def forget(self, topic: str) -> None:
        """Wait for an in-flight tiering of ``topic`` to end; stop scheduling it."""
        self._due.pop(topic, None)
        self._followed.pop(topic, None)
        busy = self._busy.get(topic)
        if busy is not None:
            await asyncio.gather(busy, return_exceptions=True)
        if self.child is not None:
            self.child.forget(topic)

    async def _run(self) -> None:
        while not self._stopping:
            now = self.clock.monotonic()
            topics = self.topics.list_topics()
            for topic in topics:
                if topic not in self._due:  # new (or just opened): one interval from now
                    try:
                        self._due[topic] = now + self.topics.topic_config(topic).table_flush_interval_ms / 1000.0
                    except UnknownTopicOrPartition:  # deleted since the listing
                        continue
            next_due = now + 1.0
            for topic in topics:
                due = self._due.get(topic, now)
                if due > now:
                    next_due = min(next_due, due)
                    continue
                try:
                    interval = self.topics.topic_config(topic).table_flush_interval_ms / 1000.0
                except UnknownTopicOrPartition:  # deleted since the listing
                    continue
                self._due[topic] = now + interval
                await self.tier_now(topic)
                failure = self.failing.get(topic)
                if failure is not None and topic in self._due:  # back off: the store is down, throttling, refusing
                    self._due[topic] = now + retry_backoff_s(failure.failures, interval)
                next_due = min(next_due, self._due.get(topic, now + interval))
                await self._follow_table(topic)
            try:
                await asyncio.to_thread(self.logs.housekeeping, self.clock.now_ms())
            except Exception:
                log.exception("hot log housekeeping failed")
            delay = max(0.0, next_due - self.clock.monotonic())
            if self._wake is not None and delay > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
                self._wake.clear()

    async def _follow_table(self, topic: str) -> None:
        """Another writer (retention, compaction, a user's own Delta tool) committed to
        the table: pick up its files, validate them (the index rebuild runs
        ``table_check.find_damage`` on every version the tierer did not write, logs an
        ERROR and marks damaged ranges) and advance the log start offset retention moved."""
        try:
            await asyncio.to_thread(self._follow_table_sync, topic)
        except Exception:
            log.exception("following the table of %s failed", topic)

    def _follow_table_sync(self, topic: str) -> None:
        """In a worker thread: every step reads the Delta table (and may wait for its
        lock while a tier commit holds it), which must not stall the event loop."""
        tables = self.tables
        tables.refresh(topic)
        table, lock = tables.delta_table(topic)
        with lock:
            version = table.version()
        plogs = list(self.logs.partitions(topic))
        followers = tuple(plog.partition for plog in plogs if not self.leadership.leads(topic, plog.partition))
        seen = (version, tuple(plog.partition for plog in plogs), followers)
        if self._followed.get(topic) == seen:
            return  # neither the table nor our replicas changed: an idle topic reads nothing
        for plog in plogs:
            plog.advance_log_start(tables.log_start_offset(topic, plog.partition))
            if plog.partition in followers:  # a follower: the leader tiers
                plog.mark_tiered(min(tables.tiered_offset(topic, plog.partition), plog.log_end_offset))
        self._followed[topic] = seen

    async def tier_now(self, topic: str) -> int:
        """Tier ``topic`` now; returns how many records went into the table."""
        task = asyncio.ensure_future(self._tier_topic(topic))
        self._busy[topic] = task
        try:
            tiered = await task
        except Exception as exc:
            self._failed(topic, exc)
            return 0
        else:
            if self.failing.pop(topic, None) is not None:
                log.warning("tiering %s works again", topic)
            return tiered
        finally:
            if self._busy.get(topic) is task:
                del self._busy[topic]

    def _failed(self, topic: str, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, TierPassFailed) else str(exc)
        reason = failure_reason(error)
        previous = self.failing.get(topic)
        failures = previous.failures + 1 if previous is not None else 1
        self.failing[topic] = TierFailure(failures, reason, error)
        self.pass_failures[topic] = self.pass_failures.get(topic, 0) + 1
        try:
            interval = self.topics.topic_config(topic).table_flush_interval_ms / 1000.0
        except UnknownTopicOrPartition:
            interval = 0.0
        hint = " (the object store refused the broker's credentials: renew them)" if reason == "credentials" else ""
        log.error("tiering %s failed (%s, %d in a row)%s; records stay in the hot log, retrying in %.1fs: %s",
                  topic, reason, failures, hint, retry_backoff_s(failures, interval), error,
                  exc_info=reason == "other")

    # -- one pass for one topic: plan (event loop), execute (child or thread), apply -----------------

    def _plan(self, topic: str) -> tuple[dict, dict[int, "PartitionLog"]] | None:
        """What one pass over ``topic`` has to tier, as a message (plain JSON types) that
        :func:`execute_pass` runs here or in the tier child: per led partition its range
        ``[tiered offset, HW)``, the leader epoch the commit records, and where on disk
        the hot segments holding the range are. None when there is nothing to tier."""
        try:
            plogs = self.logs.partitions(topic)
        except RuntimeError:  # the event loop opened or dropped a replica while we listed: next pass
            log.debug("listing the hot logs of %s raced with a change; tiering it at the next pass", topic)
            return None
        # Only the leader tiers, and only while it leads: each commit also records the
        # leader epoch per partition (``laketail.epoch.<p>``), and a leader that finds a
        # higher epoch there has been deposed and commits nothing.
        parts = []
        led: dict[int, PartitionLog] = {}
        for plog in plogs:
            epoch = self.leadership.leader_epoch(plog)
            if epoch is None:
                continue
            start, end = plog.tiered_offset, plog.high_watermark  # HW first: the segment sizes below cover it
            if end <= start:
                continue
            try:
                segments = plog.tier_spans(start, end)
            except OffsetBelowHotTier:  # local retention ran ahead of tiering (never by design): skip
                log.warning("%s-%d: offset %d is no longer in the hot tier; not tiering it",
                            topic, plog.partition, start)
                continue
            parts.append({"partition": plog.partition, "start": start, "end": end, "epoch": epoch,
                          "segments": segments})
            led[plog.partition] = plog
        if not parts:
            return None
        request = {"op": "tier", "topic": topic, "uri": self.tables.table_uri(topic),
                   "now_ms": self.clock.now_ms(), "parts": parts}
        return request, led

    async def _execute(self, request: dict) -> dict:
        """Run one pass: in the tier child (``laketail.tierer.process``), else in a worker thread."""
        if self.child is not None:
            return await self.child.request(request)
        dt, lock = self.tables.delta_table(request["topic"])
        return await asyncio.to_thread(run_pass, dt, lock, request)

    def _apply(self, topic: str, led: dict[int, "PartitionLog"], result: dict) -> int:
        """Learn what a pass tiered (worker thread: ``add_files`` may re-read the log)."""
        for partition, tiered in result.get("ahead", {}).items():  # a previous leader (or a lost answer) tiered more
            plog = led[int(partition)]
            plog.mark_tiered(min(tiered, plog.log_end_offset))
        if result.get("error"):
            raise TierPassFailed(result["error"])
        if result.get("version") is None:
            return 0
        added = {int(p): DataFile(**fields) for p, fields in result["files"].items()}
        self.tables.add_files(topic, result["version"], added)
        total = 0
        for partition, new_end in result["ends"].items():
            plog = led[int(partition)]
            total += max(0, new_end - plog.tiered_offset)
            plog.mark_tiered(new_end)
        self.commits += 1
        return total

    async def _tier_topic(self, topic: str) -> int:
        """One tier pass; passes over one topic never overlap (the loop, ``tier_now``
        and shutdown may all ask), so no range is ever tiered twice."""
        async with self._tier_locks.setdefault(topic, asyncio.Lock()):
            planned = self._plan(topic)
            if planned is None:
                return 0
            request, led = planned
            try:
                config = self.topics.topic_config(topic)
            except UnknownTopicOrPartition:  # deleted since the plan
                return 0
            if self.subject_schemas is not None:
                request["typed"] = [
                    {"column": column, "source": source, "latest_only": mode.endswith("_latest"),
                     "versions": await self.subject_schemas(f"{topic}-{source}")}
                    for column, source, mode in ((TYPED_VALUE_COLUMN, "value", config.laketail_table_mode),
                                                 (TYPED_KEY_COLUMN, "key", config.laketail_table_key_mode))
                    if mode not in ("key_value", "key_raw")
                ]
            result = await self._execute(request)
            if result.get("undecoded"):
                self.undecoded_values[topic] = self.undecoded_values.get(topic, 0) + result["undecoded"]
            return await asyncio.to_thread(self._apply, topic, led, result)


class _SegmentFile:
    """A hot segment read by path, read-only (the tier child's view of the broker's
    segments; it never creates, truncates or deletes one)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def read_raw(self, position: int, limit: int) -> bytes:
        return os.pread(self.fd, limit - position, position)

    def close(self) -> None:
        os.close(self.fd)


def read_part(part: dict) -> pa.Table:
    """The records ``[start, end)`` of one partition, read from its hot segment files
    (``part["segments"]``: ``[path, base offset, position of the frame to start at,
    bytes published]``), at most ``MAX_RECORDS_PER_FILE`` / ``MAX_BYTES_PER_FILE``.

    Raises :class:`~laketail.storage.frame.CorruptFrame` when the frames read do not
    run densely from ``start`` (a segment replaced under us): nothing is tiered then."""
    start, end, partition = part["start"], part["end"], part["partition"]
    files = [(_SegmentFile(path), position, size) for path, _base, position, size in part["segments"]]
    try:
        frames = ((header, where) for file, position, size in files for header, where in _spans(file, position, size))
        batches: list[pa.RecordBatch] = []
        epochs: list[int] = []
        expected = start
        for header, (span, at), lo, rows in _window(frames, start, end, MAX_RECORDS_PER_FILE, MAX_BYTES_PER_FILE):
            if header.base_offset + lo != expected:
                raise CorruptFrame(f"partition {partition}: expected offset {expected}, "
                                   f"found {header.base_offset + lo} in the hot segments")
            batches.append(frame.decode_rows(span, at, header, lo, rows))
            epochs.append(header.leader_epoch)
            expected += rows
    finally:
        for file, _, _ in files:
            file.close()
    return widen_frames(batches, epochs, start, partition)


def run_pass(dt: DeltaTable, lock: threading.Lock | contextlib.nullcontext, request: dict) -> dict:
    """:func:`execute_pass`, its failures turned into an answer: ``{"error": text}``,
    plus ``"ahead": {partition: tiered offset}`` when the table is tiered further."""
    try:
        return execute_pass(dt, lock, request)
    except TableAhead as exc:
        return {"error": str(exc), "ahead": exc.ahead}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def execute_pass(dt: DeltaTable, lock: threading.Lock | contextlib.nullcontext, request: dict) -> dict:
    """Run one tier pass planned by :meth:`Tierer._plan` against the topic's table
    ``dt`` (holding ``lock`` around every use of it) and answer, as plain JSON types,
    ``{"version", "ends": {partition: next offset tiered}, "files": {partition: DataFile
    fields}}`` (``version`` None when nothing was read). The same code runs in the
    broker's worker thread and in the tier child.

    Exactly-once: it commits only when the table's ``laketail.tier.<p>`` versions equal
    the planned starts and no ``laketail.epoch.<p>`` is above the planned epochs;
    otherwise it commits nothing and raises :class:`LeaderFenced` (``TableAhead`` when
    the table is tiered further than the broker knew, which the broker then learns)."""
    topic, uri, now_ms = request["topic"], request["uri"], request["now_ms"]
    parts = request["parts"]
    adds: list[AddAction] = []
    txns: list[Transaction] = []
    files: dict[int, dict] = {}
    ends: dict[int, int] = {}
    written_paths: list[str] = []
    typed = [(t["column"], t["source"], decoder) for t in request.get("typed") or ()
             if (decoder := _typed_column(t["versions"], t["latest_only"])) is not None]
    undecoded = 0
    try:
        for part in parts:
            partition = part["partition"]
            records = read_part(part)
            if records.num_rows == 0:
                continue
            for name, source, decoder in typed:
                column, failed = decoder(records.column(source))
                records = records.append_column(pa.field(name, column.type), column)
                undecoded += failed
            new_end = records.column("offset")[-1].as_py() + 1
            rel, add, data_file = write_data_file(uri, partition, records, now_ms)
            written_paths.append(f"{uri}/{rel}")
            adds.append(add)
            files[partition] = dataclasses.asdict(data_file)
            txns.append(Transaction(tier_app_id(partition), new_end, last_updated=now_ms))
            txns.append(Transaction(epoch_app_id(partition), part["epoch"], last_updated=now_ms))
            ends[partition] = new_end
        if not adds:
            return {"version": None, "ends": {}, "files": {}, "undecoded": undecoded}
        with lock:
            catch_up(dt, uri)  # another writer's commits (our own are loaded after each commit)
            if typed:
                _evolve(dt, {name: decoder.type for name, _, decoder in typed})
            for part in parts:
                partition = part["partition"]
                fenced_by = dt.transaction_version(epoch_app_id(partition)) or 0
                if fenced_by > part["epoch"]:
                    raise LeaderFenced(
                        f"{topic}-{partition}: the table holds leader epoch {fenced_by}, "
                        f"this broker leads at {part['epoch']}"
                    )
            # a previous leader tiered more than we knew
            if ahead := _tiered_elsewhere(dt, {part["partition"]: part["start"] for part in parts}):
                raise TableAhead(ahead, f"{topic}: the table is tiered to {ahead}, not as planned")
            version = _commit(dt, adds, txns, {part["partition"]: part["start"] for part in parts
                                                if part["partition"] in ends})
    except Exception:
        for path in written_paths:
            object_store.remove_file(path)
        raise
    return {"version": version, "ends": ends, "files": files, "undecoded": undecoded}


class _TypedColumn:
    """Decodes a raw column (``value`` or ``key``) into its typed column by a subject's
    versions: each value by the version its prefix names, or (``latest_only``,
    ``value_schema_latest`` / ``key_schema_latest``) each unframed value by the latest."""

    def __init__(self, versions: list[dict], latest_only: bool = False) -> None:
        from laketail.schemas import columns, wire  # only topics with typed columns pay for the import

        self._columns = columns
        self.codecs = {v["id"]: wire.codec(v["schema_type"], v["schema"], tuple(v["references"])) for v in versions}
        self.latest = versions[-1]["id"]
        self.latest_only = latest_only
        self.type = columns.arrow_type(self.codecs[self.latest])

    def __call__(self, values: pa.ChunkedArray) -> tuple[pa.Array, int]:
        if self.latest_only:
            return self._columns.decode_unframed(values, self.codecs[self.latest])
        return self._columns.decode_versions(values, self.codecs, self.latest)


def _typed_column(versions: list[dict], latest_only: bool = False) -> _TypedColumn | None:
    """The decoder of one of a pass's ``typed`` columns; None when the subject has no live
    version yet (nothing to decode by: the column waits for one)."""
    return _TypedColumn(versions, latest_only) if versions else None


def _holds(table_type: pa.DataType, value_type: pa.DataType) -> bool:
    """Whether a column of ``table_type`` holds values of ``value_type`` as they are: the
    same type, or a struct with at least its fields (a version that dropped a field)."""
    if table_type == value_type:
        return True
    if not (pa.types.is_struct(table_type) and pa.types.is_struct(value_type)):
        return False
    names = {table_type.field(i).name: table_type.field(i).type for i in range(table_type.num_fields)}
    return all(f.name in names and _holds(names[f.name], f.type)
               for f in (value_type.field(i) for i in range(value_type.num_fields)))


def _evolve(dt: DeltaTable, types: dict[str, pa.DataType]) -> None:
    """Widen the table's schema to hold each typed column of ``types`` (name -> type;
    added, or its struct merged with the new fields) unless it holds them already.
    Caller holds the lock."""
    schema = pa.schema(dt.schema().to_arrow())
    if all(name in schema.names and _holds(schema.field(name).type, t) for name, t in types.items()):
        return
    wider = RECORD_SCHEMA
    for name in TYPED_COLUMNS:
        if name in types:
            wider = wider.append(pa.field(name, types[name]))
    write_deltalake(dt, wider.empty_table(), mode="append", schema_mode="merge", partition_by=["partition"])
    dt.update_incremental()

class LeaderFenced(Exception):
    """A tier commit from a broker that no longer leads the partition (or whose view of
    the table is stale): nothing was committed."""


class TableAhead(LeaderFenced):
    """The table is tiered further than the broker knew (a previous leader's commit, or
    one whose answer was lost with a crashed tier child): nothing was committed; the
    broker marks ``ahead`` (partition -> tiered offset) tiered and plans again."""

    def __init__(self, ahead: dict[int, int], message: str) -> None:
        super().__init__(message)
        self.ahead = ahead


class TierPassFailed(Exception):
    """A tier pass failed (in the child or the worker thread); it is retried next pass."""


def epoch_app_id(partition: int) -> str:
    return f"{EPOCH_APP_PREFIX}{partition}"


def _tiered_elsewhere(dt, starts: dict[int, int]) -> dict[int, int]:
    """The partitions of ``starts`` (partition -> the offset a pass's plan starts at) that
    the table is not tiered to where the plan starts, with the offset it is tiered to."""
    return {p: tiered for p, start in starts.items()
            if (tiered := dt.transaction_version(tier_app_id(p)) or 0) != start}


def _commit(dt, adds: list[AddAction], txns: list[Transaction], starts: dict[int, int]) -> int:
    """Commit ``adds`` with the tier transactions; return the new table version.

    On a conflict (another writer committed meanwhile) refresh, and retry only while the
    table is still tiered where this pass's plan starts (``starts``: partition -> first
    offset): the winner may be another broker tiering the same records (an old leader
    and a new one at once), and a blind retry committed them a second time (the Jepsen
    run: offsets 3668-3683 of jepsen-1 in two files). A refreshed table showing our
    transaction versions already is a retried commit that had in fact succeeded."""
    for attempt in range(10):
        try:
            dt.create_write_transaction(
                adds,
                mode="append",
                schema=RECORD_SCHEMA,
                partition_by=["partition"],
                commit_properties=CommitProperties(app_transactions=txns, max_commit_retries=5),
            )
            dt.update_incremental()
            return dt.version()
        except CommitFailedError:
            dt.update_incremental()
            for t in txns:
                if t.app_id.startswith("laketail.epoch.") and (dt.transaction_version(t.app_id) or 0) > t.version:
                    raise LeaderFenced(f"a leader with a newer epoch committed {t.app_id}") from None
            if all((dt.transaction_version(t.app_id) or 0) == t.version for t in txns):
                return dt.version()
            if ahead := _tiered_elsewhere(dt, starts):
                raise TableAhead(ahead, f"the table was tiered to {ahead} meanwhile, not as planned") from None
            time.sleep(0.05 * (attempt + 1))
    raise CommitFailedError("tier commit kept conflicting")
