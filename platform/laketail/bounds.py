"""Kafka's integer types and the ranges a request may use, checked once at the edge.

Role: the one place that says which numbers a client may send. Kafka's protocol
gives every number a fixed width, and laketail stores them in the same widths (Arrow
``int32`` partitions and sequences, ``int64`` offsets and producer ids, JSON in the
internal topics that orjson writes only up to 64 bits), so a number outside its type
cannot be stored: it is refused before anything is written, never left to overflow
in Arrow or in a JSON encoder half-way through a change.

* partition: int32 (whether it exists, and a negative one never does, is the topic's
  business: UNKNOWN_TOPIC_OR_PARTITION);
* offset: int64; a committed offset is the next offset to read, ``-1`` means none
  (Kafka's ``OffsetAndMetadata`` takes nothing below), so ``-1 <= o <= 2**63 - 1``;
* sequence: int32, ``0 <= s <= 2**31 - 1`` (sequences wrap to 0 past the top);
* batch id of a sink: int64 (Spark's ``batchId`` is a ``long``);
* timestamp: Kafka milliseconds, ``0 <= ts <= MAX_TIMESTAMP_MS``. Records are stored
  in microseconds (``records.TIMESTAMP_TYPE``) and read back as ISO-8601 and Spark
  timestamps, which end with year 9999; Kafka's producer refuses negative timestamps.

Everything here is pure and thread-safe.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from laketail.errors import InvalidRequest, InvalidTimestamp, LaketailError

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

#: 9999-12-31T23:59:59.999Z, the last instant ISO-8601, Spark and Delta timestamps hold.
MAX_TIMESTAMP_MS = 253_402_300_799_999


def bounded_int(value: Any, what: str, minimum: int, maximum: int,
                error: type[LaketailError] = InvalidRequest) -> int:
    """``value`` if it is an integer (not a bool) in ``[minimum, maximum]``, else ``error``."""
    if type(value) is not int:
        raise error(f"{what} must be an integer, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise error(f"{what} must be in [{minimum}, {maximum}], got {value}")
    return value


def is_decimal(raw: str) -> bool:
    """Whether ``raw`` is a decimal integer as Kafka's clients write one: ASCII digits,
    an optional leading minus, nothing else. Python's ``int()`` also takes ``" 5"``,
    ``"+5"``, ``"1_000"`` and other scripts' digits; a request that says any of them
    is refused rather than read as a number it did not spell."""
    digits = raw[1:] if raw[:1] == "-" else raw
    return digits.isascii() and digits.isdigit()


def parse_int(raw: str, what: str, minimum: int, maximum: int,
              error: type[LaketailError] = InvalidRequest) -> int:
    """A decimal integer (:func:`is_decimal`) from a path or query string, in
    ``[minimum, maximum]``."""
    if not is_decimal(raw):
        raise error(f"{what} must be an integer (decimal digits), got {raw[:40]!r}")
    try:
        value = int(raw)
    except ValueError:  # more digits than Python converts (sys.int_info): far out of any range
        raise error(f"{what} must be in [{minimum}, {maximum}], got {len(raw)} digits") from None
    return bounded_int(value, what, minimum, maximum, error)


def int32(value: Any, what: str, error: type[LaketailError] = InvalidRequest) -> int:
    """A Kafka int32 (a partition, whether or not it exists, which is the topic's business)."""
    return bounded_int(value, what, INT32_MIN, INT32_MAX, error)


def int64(value: Any, what: str, error: type[LaketailError] = InvalidRequest) -> int:
    return bounded_int(value, what, INT64_MIN, INT64_MAX, error)


def committed_offset(value: Any, what: str = "offset") -> int:
    return bounded_int(value, what, -1, INT64_MAX)


def timestamp_ms(value: Any, what: str = "timestamp") -> int:
    """Kafka milliseconds in ``[0, MAX_TIMESTAMP_MS]`` (INVALID_TIMESTAMP otherwise)."""
    return bounded_int(value, what, 0, MAX_TIMESTAMP_MS, InvalidTimestamp)


def check_timestamp_column(column: pa.Array | pa.ChunkedArray, what: str = "timestamp") -> None:
    """Every non-null value of an int64 millisecond column in range (INVALID_TIMESTAMP)."""
    if len(column) == column.null_count:
        return
    low_high = pc.min_max(column).as_py()
    low, high = low_high["min"], low_high["max"]
    if low < 0 or high > MAX_TIMESTAMP_MS:
        bad = low if low < 0 else high
        raise InvalidTimestamp(f"{what} must be in [0, {MAX_TIMESTAMP_MS}] ms, got {bad}")
