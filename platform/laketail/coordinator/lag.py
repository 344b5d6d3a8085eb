"""Consumer lag: how far each group's committed offsets are behind each partition's end.

For a group, topic and partition:

* ``current_offset`` -- the committed offset (the next record the group will read);
  -1 when the group has committed nothing for the partition;
* ``log_end_offset`` -- the partition's high watermark (what a consumer can reach);
* ``lag = log_end_offset - current_offset`` (the whole log end when nothing is committed);
* ``time_lag_ms`` -- how long ago the first unconsumed record (the one at
  ``current_offset``) was appended: ``now - its timestamp``; 0 when caught up. For
  CreateTime topics the record's timestamp is the producer's, which is the append time
  unless producers set their own.

:func:`lag_status` grades a lag like the seeds' thresholds: OK below 100, caution
below 1,000, warning below 10,000, critical from there on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from laketail.coordinator.ports import PartitionReader
from laketail.errors import LaketailError

if TYPE_CHECKING:
    from laketail.clock import Clock
    from laketail.coordinator.groups import GroupCoordinator
    from laketail.coordinator.offsets import OffsetStore

log = logging.getLogger(__name__)


class LagSource(PartitionReader, Protocol):
    """What :func:`group_lags` reads: the partitions' offsets and first unread records
    (any broker answers for any partition), the group's committed offsets and members,
    and the clock for time lag. The broker is one; called on the event loop thread."""

    @property
    def offsets(self) -> OffsetStore: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def clock(self) -> Clock: ...


@dataclass(frozen=True)
class PartitionLag:
    group_id: str
    topic: str
    partition: int
    current_offset: int
    log_end_offset: int
    lag: int
    time_lag_ms: int
    consumer_id: str = ""
    client_id: str = ""
    client_host: str = ""

    @property
    def status(self) -> str:
        return lag_status(self.lag)


def lag_status(lag: int) -> str:
    if lag < 100:
        return "OK"
    if lag < 1_000:
        return "caution"
    if lag < 10_000:
        return "warning"
    return "critical"


async def group_lags(broker: "LagSource", group_id: str) -> list[PartitionLag]:
    """Lag for every partition the group has committed or is assigned, sorted. Event
    loop thread; a partition whose offsets cannot be had (deleted, leader unreachable)
    is left out of the answer."""
    offsets = broker.offsets.group_offsets(group_id)
    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    group = broker.groups.group(group_id)
    if group is not None:
        for member in group.members.values():
            for tp in member.assignment:
                owners[tp] = (member.member_id, member.client_id, member.client_host)
    now_ms = broker.clock.now_ms()
    out = []
    for topic, partition in sorted(set(offsets) | set(owners)):
        try:
            state = await broker.partition_state_async(topic, partition)
        except LaketailError as exc:  # the topic was deleted since (or its leader is unreachable)
            log.debug("lag of group %s: %s-%d left out: %s", group_id, topic, partition, exc)
            continue
        committed = offsets.get((topic, partition))
        current = committed.offset if committed is not None else -1
        end = state.high_watermark
        start_from = current if current >= 0 else state.log_start_offset
        lag = max(end - start_from, 0)
        time_lag = 0
        if lag > 0:
            first = max(start_from, state.log_start_offset)
            result = await broker.fetch(topic, partition, first, max_records=1, isolation="read_uncommitted")
            if result.records.num_rows:
                ts_ms = result.records.column("timestamp")[0].value // 1000
                time_lag = max(now_ms - ts_ms, 0)
        consumer_id, client_id, host = owners.get((topic, partition), ("", "", ""))
        out.append(PartitionLag(group_id, topic, partition, current, end, lag, time_lag, consumer_id, client_id, host))
    return out
