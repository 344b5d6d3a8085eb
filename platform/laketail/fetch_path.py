"""The fetch path: read a partition from its hot log or its Delta table.

Role: :meth:`FetchPath.fetch` answers a fetch on the partition's leader (forwarding it
over the internal API when another broker leads): records from the hot tier where it
still has them, else from the topic's table, up to the high watermark
(read_uncommitted) or the last stable offset (read_committed), with control rows and
aborted transactions' records dropped. It long-polls at the high watermark. Also
Kafka's ListOffsets by time (:meth:`FetchPath.offset_for_timestamp`).

Parts (passed in by the broker, the composition root): settings, the hot logs, the
tables, the cluster node (forwarding) and two lookups of the broker's topics and
leadership.

Hot path (``api/hot_routes.py``): frames already decoded are sliced on the event loop;
only a cache miss goes to a worker thread. Thread-safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from laketail.catalog import TopicInfo
from laketail.cluster.node import INTERNAL
from laketail.config import BrokerSettings
from laketail.errors import OffsetOutOfRange
from laketail.records import IsolationLevel
from laketail.storage.block_cache import NotCached
from laketail.storage.frame import CorruptFrame
from laketail.storage.partition_log import OffsetBelowHotTier

if TYPE_CHECKING:
    from laketail.cluster.node import ClusterNode
    from laketail.storage.log_manager import LogManager
    from laketail.storage.sibling_log import SiblingLog
    from laketail.storage.table_reader import TableReader


log = logging.getLogger(__name__)


def _limits(max_records: int | None, max_bytes: int | None) -> tuple[int, int]:
    """A fetch's record and byte limits, Kafka's defaults where the client gave none."""
    return (max_records if max_records and max_records > 0 else 500,
            max_bytes if max_bytes and max_bytes > 0 else 52_428_800)


@dataclass(frozen=True)
class FetchResult:
    """Records in ``RECORD_SCHEMA`` (timestamps in microseconds) plus the partition's
    offsets at the time of the read. ``next_offset`` is where the next fetch starts."""

    records: pa.Table
    next_offset: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    #: ``records`` are slices of decoded blocks as read (nothing filtered out, not
    #: forwarded): what the v2 body cache (``api/fetch_body.py``) may key on
    from_blocks: bool = False


class FetchPath:
    """Fetch and ListOffsets-by-time for one broker (see the module docstring)."""

    def __init__(
        self,
        settings: BrokerSettings,
        logs: "LogManager",
        tables: "TableReader",
        cluster: "ClusterNode",
        leads: Callable[[str, int], bool],
        check_partition: Callable[[str, int], TopicInfo],
        sibling_log: Callable[[str, int], "SiblingLog | None"] = lambda topic, partition: None,
    ) -> None:
        self.settings = settings
        self.logs = logs
        self.tables = tables
        self.cluster = cluster
        #: whether this broker leads the partition (and is not fenced)
        self.leads = leads
        #: the topic of an existing partition; UNKNOWN_TOPIC_OR_PARTITION otherwise
        self.check_partition = check_partition
        #: request-process mode: the partition as a sibling process leads it, read from
        #: its files (``storage/sibling_log.py``); None: forward
        self.sibling_log = sibling_log

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        timeout_ms: int = 0,
        isolation: IsolationLevel = "read_committed",
    ) -> FetchResult:
        """Records from ``offset`` on, from the hot tier where present, else the table.

        Long-polls up to ``timeout_ms``, capped at ``fetch.max.wait.ms``, when ``offset``
        is the high watermark. An offset below the log start or above the high
        watermark is OFFSET_OUT_OF_RANGE.
        """
        self.check_partition(topic, partition)
        timeout_ms = max(0, min(timeout_ms, self.settings.fetch_max_wait_ms))
        if offset < 0:
            raise OffsetOutOfRange(f"offset {offset} is negative")
        if not self.leads(topic, partition) and not await self.cluster.replicas.wait_leading(topic, partition):
            sibling = self.sibling_log(topic, partition)
            if sibling is not None:
                result = await self._fetch_from_sibling(sibling, topic, partition, offset, max_records, max_bytes,
                                                        isolation)
                if result is not None:
                    return result
            return await self._forward_fetch(topic, partition, offset, max_records, max_bytes, timeout_ms, isolation)
        plog = self.logs.get(topic, partition)
        # Between HW and LEO (a new leader whose HW has not caught up yet): nothing to
        # read yet, which is not out of range.
        if offset < plog.log_start_offset or offset > max(plog.high_watermark, plog.log_end_offset):
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{plog.log_start_offset}, {plog.high_watermark}] "
                f"of {topic}-{partition}"
            )
        if offset >= plog.high_watermark and timeout_ms > 0:
            await plog.wait_for_data(offset, timeout_ms / 1000.0)
        limit_records, limit_bytes = _limits(max_records, max_bytes)
        if isolation == "read_committed" and plog.producer_state.markers_from > 0:
            await self._learn_transactions(topic, plog)
        end = plog.last_stable_offset if isolation == "read_committed" else plog.high_watermark
        position = offset
        while True:
            read = await self._read(topic, partition, plog, position, end, limit_records, limit_bytes)
            if read.num_rows == 0:
                table = read
                break
            position = read.column("offset")[-1].as_py() + 1
            table = self._visible(plog, read, isolation)
            if table.num_rows or position >= end:
                break  # else: only markers or aborted records so far; read on
        return FetchResult(table, position, plog.high_watermark, plog.log_start_offset, plog.last_stable_offset,
                           from_blocks=table is read)

    async def _fetch_from_sibling(
        self, sibling: "SiblingLog", topic, partition, offset, max_records, max_bytes, isolation
    ) -> FetchResult | None:
        """Read a partition another request process leads from its files, within the
        offsets it published; None when the leader must answer: a long poll at the high
        watermark, an offset out of range, transactions' records or markers (filtered by
        the leader's producer state), files replaced or gone."""
        published = sibling.offsets()
        if published is None:  # the leader closed the log (restart, topic deleted): open it afresh next time
            sibling.stale = True
            return None
        hw, lso, log_start, tiered = published
        end = lso if isolation == "read_committed" else hw
        if not log_start <= offset < end:
            return None
        limit_records, limit_bytes = _limits(max_records, max_bytes)
        try:
            try:
                try:  # frames already decoded are only sliced: not worth a thread
                    read = sibling.read(offset, end, limit_records, limit_bytes, partition, cached_only=True)
                except NotCached:
                    read = await asyncio.to_thread(sibling.read, offset, end, limit_records, limit_bytes, partition)
            except OffsetBelowHotTier:  # local retention removed it: the table has it
                read = await self._read_table(topic, partition, offset, min(end, tiered), limit_records, limit_bytes)
        except (OSError, ValueError, CorruptFrame) as exc:
            log.debug("reading %s-%d from its leader's files failed (%s); forwarding", topic, partition, exc)
            sibling.stale = True
            return None
        if read.num_rows == 0 or any(chunk.true_count for chunk in read.column("transactional").chunks):
            return None
        return FetchResult(read, read.column("offset")[-1].as_py() + 1, hw, log_start, lso, from_blocks=True)

    async def _forward_fetch(
        self, topic, partition, offset, max_records, max_bytes, timeout_ms, isolation
    ) -> FetchResult:
        params = {"offset": offset, "timeout_ms": timeout_ms, "isolation": isolation}
        if max_records:
            params["max_records"] = max_records
        if max_bytes:
            params["max_bytes"] = max_bytes
        resp = await self.cluster.call_leader(
            topic, partition, "GET", f"{INTERNAL}/partitions/{topic}/{partition}/records",
            params=params, timeout=timeout_ms / 1000 + 30,
        )
        table = pa.ipc.open_stream(resp.content).read_all()
        h = resp.headers
        return FetchResult(
            table, int(h["x-next-offset"]), int(h["x-high-watermark"]),
            int(h["x-log-start-offset"]), int(h["x-last-stable-offset"]),
        )

    async def _read(self, topic, partition, plog, offset, end, limit_records, limit_bytes) -> pa.Table:
        if offset >= plog.hot_start_offset:
            try:
                try:  # frames already decoded are only sliced: not worth a thread
                    return plog.read(offset, end, limit_records, limit_bytes, partition, cached_only=True)
                except NotCached:
                    return await asyncio.to_thread(plog.read, offset, end, limit_records, limit_bytes, partition)
            except OffsetBelowHotTier:
                pass  # local retention removed it meanwhile: the table has it
        return await self._read_table(topic, partition, offset, min(end, plog.tiered_offset), limit_records,
                                      limit_bytes)

    async def _read_table(self, topic, partition, offset, end, limit_records, limit_bytes) -> pa.Table:
        try:
            return self.tables.read(topic, partition, offset, end, limit_records, limit_bytes, cached_only=True)
        except NotCached:
            return await asyncio.to_thread(self.tables.read, topic, partition, offset, end, limit_records, limit_bytes)

    async def _learn_transactions(self, topic: str, plog) -> None:
        """The markers and open transactions below the hot log, from the table, for a log
        whose producer state lacks them (it restarted above the table's end): without
        them a record there would take the outcome of its producer's next marker,
        another transaction's. The leader learns them when it takes over; this is for a
        log that restarted since."""
        below = plog.producer_state.markers_from
        learned = await asyncio.to_thread(self.tables.learn_transactions, topic, plog)
        log.info("%s-%d: learned %d transaction markers below %d from the table", topic, plog.partition,
                 learned, below)

    @staticmethod
    def _visible(plog, table: pa.Table, isolation: IsolationLevel) -> pa.Table:
        """Drop control rows (never returned as records) and, for read_committed, the
        records of aborted transactions."""
        transactional = table.column("transactional")
        if not any(chunk.true_count for chunk in transactional.chunks):  # no compute call: most fetches
            return table
        keep = pc.is_null(table.column("control"))
        if isolation == "read_committed":
            outcome = plog.producer_state.outcome
            aborted = [
                bool(txn) and outcome(pid, off) == "ABORT"
                for txn, pid, off in zip(
                    transactional.to_pylist(), table.column("producer_id").to_pylist(),
                    table.column("offset").to_pylist(),
                )
            ]
            keep = pc.and_(keep, pc.invert(pa.array(aborted, pa.bool_())))
        return table.filter(keep)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time: the earliest offset whose timestamp is at or after
        ``timestamp_ms``, with that record's timestamp; ``None`` when there is none."""
        self.check_partition(topic, partition)
        if not self.leads(topic, partition):
            resp = await self.cluster.call_leader(
                topic, partition, "GET", f"{INTERNAL}/partitions/{topic}/{partition}/offset-for-timestamp",
                params={"timestamp": timestamp_ms},
            )
            found = resp.json()
            return None if found is None else (found[0], found[1])
        plog = self.logs.get(topic, partition)
        return await asyncio.to_thread(self._offset_for_timestamp, topic, plog, timestamp_ms)

    def _offset_for_timestamp(self, topic: str, plog, timestamp_ms: int) -> tuple[int, int] | None:
        found = self.tables.offset_for_timestamp(topic, plog.partition, timestamp_ms, plog.hot_start_offset)
        if found is None:
            found = plog.offset_for_timestamp(timestamp_ms)
        return found
