"""Offset reset for a consumer group, as ``kafka-consumer-groups --reset-offsets`` does.

Pure: given a partition's offsets (and, for ``to-datetime``, the offset the partition's
time index found), :func:`reset_target` says where the group's committed offset goes.
Kafka's rules:

* ``earliest`` -- the log start offset;
* ``latest`` -- the high watermark (the end a read_uncommitted consumer reaches);
* ``offset`` -- the given offset, clamped into ``[log_start_offset, high_watermark]``
  (the tool warns and clamps rather than commit an offset out of range);
* ``datetime`` -- the earliest offset whose timestamp is at or after the time, or the
  high watermark when every record is older.

Only a group without members may be reset (NON_EMPTY_GROUP otherwise: its members own
their positions); the caller checks, and the commit path checks again.
"""

from __future__ import annotations

from typing import Literal

from laketail.errors import InvalidRequest

ResetTo = Literal["earliest", "latest", "offset", "datetime"]


def check_spec(to: ResetTo, offset: int | None, datetime_ms: int | None) -> None:
    """INVALID_REQUEST when the option the strategy needs is missing (before any IO)."""
    if to == "offset" and (offset is None or offset < 0):
        raise InvalidRequest("--to-offset needs 'offset' >= 0")
    if to == "datetime" and (datetime_ms is None or datetime_ms < 0):
        raise InvalidRequest("--to-datetime needs 'datetime_ms' >= 0 (milliseconds since the epoch)")


def reset_target(
    to: ResetTo,
    log_start_offset: int,
    high_watermark: int,
    *,
    offset: int | None = None,
    offset_for_time: int | None = None,
) -> int:
    """The committed offset a partition gets. ``offset_for_time`` is the time index's
    answer for ``datetime`` (None: no record at or after the time)."""
    if to == "earliest":
        return log_start_offset
    if to == "latest":
        return high_watermark
    if to == "offset":
        assert offset is not None
        return min(max(offset, log_start_offset), high_watermark)
    if offset_for_time is None:
        return high_watermark
    return min(max(offset_for_time, log_start_offset), high_watermark)
