"""The log manager: every partition log of this broker, by (topic, partition).

Role: open partition logs at start (recovering each), hand them out, delete them with
their topic, and run the periodic housekeeping no append triggers (``flush.ms``,
local retention of tiered hot segments).

Directory layout: ``<log.dirs>/<topic>-<partition>/<base_offset:020d>.log``.
Thread-safety: the map is only changed from the event loop thread.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from laketail.clock import Clock
from laketail.config import TopicConfig
from laketail.errors import UnknownTopicOrPartition
from laketail.storage.partition_log import PartitionLog
from laketail.storage.sibling_log import SharedOffsets, SiblingLogs

#: A segment file nobody wrote or read for this long is closed (reopened on next use).
IDLE_HANDLE_S = 60.0


class LogManager:
    """Every partition log this broker holds, by (topic, partition), under its ``log.dirs``.

    :meth:`open_partition` opens (recovering) or creates a log; :meth:`get` hands it out or
    raises UNKNOWN_TOPIC_OR_PARTITION; :meth:`delete_partition` and :meth:`remove_orphans`
    remove logs of deleted topics; :meth:`housekeeping` runs what no append triggers
    (``flush.ms``, local retention, closing idle file handles). Thread-safety: the map
    changes on the event loop thread only.
    """

    def __init__(self, log_dir: Path, clock: Clock, share_offsets: bool = False) -> None:
        self.log_dir = Path(log_dir)
        self.clock = clock
        #: publish each log's offsets for the broker's other request processes, which
        #: then read its records from disk (``storage/sibling_log.py``)
        self.share_offsets = share_offsets
        #: the partitions other request processes lead that this one reads: tidied with ours
        self.siblings: SiblingLogs | None = None
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        #: the same logs by topic, so that a pass over one topic does not walk every partition
        self._by_topic: dict[str, dict[int, PartitionLog]] = {}

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    def open_partition(
        self,
        topic: str,
        partition: int,
        config: TopicConfig,
        tiered_offset: int,
        log_start_offset: int | None = None,
    ) -> PartitionLog:
        plog = PartitionLog.open(
            self.partition_dir(topic, partition),
            topic,
            partition,
            config,
            self.clock,
            tiered_offset=tiered_offset,
            log_start_offset=log_start_offset,
        )
        if self.share_offsets:
            plog.shared = SharedOffsets(plog.directory)
            plog.publish()
        self._logs[(topic, partition)] = plog
        self._by_topic.setdefault(topic, {})[partition] = plog
        return plog

    def get(self, topic: str, partition: int) -> PartitionLog:
        plog = self._logs.get((topic, partition))
        if plog is None:
            raise UnknownTopicOrPartition.partition(topic, partition)
        return plog

    def partitions(self, topic: str) -> list[PartitionLog]:
        logs = self._by_topic.get(topic)
        return [logs[p] for p in sorted(logs)] if logs else []

    def all(self) -> list[PartitionLog]:
        return list(self._logs.values())

    async def delete_partition(self, topic: str, partition: int) -> None:
        plog = self._logs.pop((topic, partition), None)
        logs = self._by_topic.get(topic)
        if logs is not None:
            logs.pop(partition, None)
            if not logs:
                del self._by_topic[topic]
        if plog is not None:
            await plog.delete()
        else:
            directory = self.partition_dir(topic, partition)
            for path in directory.glob("*"):
                path.unlink(missing_ok=True)
            if directory.exists():
                directory.rmdir()

    def remove_orphans(self, topics: set[str] | None = None, keep: set[str] | None = None) -> None:
        """Delete hot-log folders of ``topics`` (or, with ``keep``, of every topic not in
        it) that no open partition log owns: leftovers of a delete cut by a crash."""
        if not self.log_dir.exists():
            return
        for directory in self.log_dir.iterdir():
            topic, _, partition = directory.name.rpartition("-")
            if not directory.is_dir() or not partition.isdigit():
                continue
            if (topic, int(partition)) in self._logs:
                continue
            if (topics is not None and topic in topics) or (keep is not None and topic not in keep):
                for path in directory.glob("*"):
                    path.unlink(missing_ok=True)
                directory.rmdir()

    def housekeeping(self, now_ms: int) -> None:
        """``flush.ms``, local retention, and closing segment files idle for
        ``IDLE_HANDLE_S``, for every partition, ours and those read from sibling request
        processes (runs in a worker thread)."""
        idle_since = time.monotonic()
        for plog in list(self._logs.values()):
            plog.flush_if_due(now_ms)
            plog.enforce_local_retention(now_ms)
            plog.release_idle_handles(idle_since, IDLE_HANDLE_S)
        if self.siblings is not None:
            self.siblings.tidy(idle_since, IDLE_HANDLE_S)

    async def close(self) -> None:
        await asyncio.gather(*(plog.close() for plog in self._logs.values()))
        self._logs.clear()
        self._by_topic.clear()
