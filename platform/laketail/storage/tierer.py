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

Thread-safety: one asyncio task drives it; each topic's tiering runs in a worker
thread holding that topic's table lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from deltalake import CommitProperties, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction

from laketail.clock import Clock
from laketail.errors import UnknownTopicOrPartition
from laketail.records import RECORD_SCHEMA
from laketail.storage.data_files import write_data_file
from laketail.storage.table_reader import DataFile, TableReader, tier_app_id

if TYPE_CHECKING:
    from laketail.storage.log_manager import LogManager
    from laketail.storage.partition_log import PartitionLog
    from laketail.storage.ports import LeadershipView, TopicConfigs

log = logging.getLogger(__name__)

MAX_RECORDS_PER_FILE = 2_000_000
MAX_BYTES_PER_FILE = 256 * 1024 * 1024


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
        self._tier_locks: dict[str, threading.Lock] = {}
        # per topic: (table version, partitions, followed partitions) last followed
        self._followed: dict[str, tuple] = {}
        self.commits = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="laketail-tierer")

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
        if self._wake is None:
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
                next_due = min(next_due, now + interval)
                await self.tier_now(topic)
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
        task = asyncio.ensure_future(asyncio.to_thread(self._tier_topic, topic))
        self._busy[topic] = task
        try:
            return await task
        except Exception:
            log.exception("tiering %s failed; will retry", topic)
            return 0
        finally:
            if self._busy.get(topic) is task:
                del self._busy[topic]

    # -- one pass for one topic (worker thread) ------------------------------------------------------

    def _tier_topic(self, topic: str) -> int:
        """One tier pass; passes over one topic never overlap (the loop, ``tier_now``
        and shutdown may all ask), so no range is ever tiered twice."""
        with self._tier_locks.setdefault(topic, threading.Lock()):
            return self._tier_topic_locked(topic)

    def _tier_topic_locked(self, topic: str) -> int:
        try:
            plogs = self.logs.partitions(topic)
        except RuntimeError:  # the event loop opened or dropped a replica while we listed: next pass
            log.debug("listing the hot logs of %s raced with a change; tiering it at the next pass", topic)
            return 0
        # Only the leader tiers, and only while it leads: each commit also records the
        # leader epoch per partition (``laketail.epoch.<p>``), and a leader that finds a
        # higher epoch there has been deposed and commits nothing.
        epochs = {}
        for plog in plogs:
            epoch = self.leadership.leader_epoch(plog)
            if epoch is not None:
                epochs[plog.partition] = epoch
        work = [(plog, plog.tiered_offset, plog.high_watermark) for plog in plogs if plog.partition in epochs]
        work = [(plog, start, end) for plog, start, end in work if end > start]
        if not work:
            return 0
        dt, lock = self.tables.delta_table(topic)
        uri = self.tables.table_uri(topic)
        adds: list[AddAction] = []
        txns: list[Transaction] = []
        added: dict[int, DataFile] = {}
        ends: dict[int, tuple[PartitionLog, int, int]] = {}
        written_paths: list[str] = []
        now_ms = self.clock.now_ms()
        for plog, start, end in work:
            records = plog.read_once(start, end, MAX_RECORDS_PER_FILE, MAX_BYTES_PER_FILE)
            if records.num_rows == 0:
                continue
            new_end = records.column("offset")[-1].as_py() + 1
            rel, add, data_file = write_data_file(uri, plog.partition, records, now_ms)
            written_paths.append(f"{uri}/{rel}")
            adds.append(add)
            added[plog.partition] = data_file
            txns.append(Transaction(tier_app_id(plog.partition), new_end, last_updated=now_ms))
            txns.append(Transaction(epoch_app_id(plog.partition), epochs[plog.partition], last_updated=now_ms))
            ends[plog.partition] = (plog, new_end, records.nbytes)
        if not adds:
            return 0
        with lock:
            try:
                dt.update_incremental()
                for plog, start, _ in work:
                    fenced_by = dt.transaction_version(epoch_app_id(plog.partition)) or 0
                    if fenced_by > epochs[plog.partition]:
                        raise LeaderFenced(
                            f"{topic}-{plog.partition}: the table holds leader epoch {fenced_by}, "
                            f"this broker leads at {epochs[plog.partition]}"
                        )
                    tiered = dt.transaction_version(tier_app_id(plog.partition)) or 0
                    if tiered != start:  # a previous leader tiered more than we knew
                        plog.mark_tiered(min(tiered, plog.log_end_offset))
                        raise LeaderFenced(f"{topic}-{plog.partition}: the table is tiered to {tiered}, not {start}")
                version = _commit(dt, adds, txns)
            except Exception:
                for path in written_paths:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
                raise
        self.tables.add_files(topic, version, added)
        total = 0
        for plog, new_end, _nbytes in ends.values():
            total += new_end - plog.tiered_offset
            plog.mark_tiered(new_end)
        self.commits += 1
        return total


class LeaderFenced(Exception):
    """A tier commit from a broker that no longer leads the partition (or whose view of
    the table is stale): nothing was committed."""


def epoch_app_id(partition: int) -> str:
    return f"laketail.epoch.{partition}"


def _commit(dt, adds: list[AddAction], txns: list[Transaction]) -> int:
    """Commit ``adds`` with the tier transactions; return the new table version.

    On a conflict (another writer committed meanwhile) refresh and retry, unless the
    refreshed table shows our transaction versions already (a retried commit that had
    in fact succeeded)."""
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
            time.sleep(0.05 * (attempt + 1))
    raise CommitFailedError("tier commit kept conflicting")
