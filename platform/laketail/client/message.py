"""Values the client hands out: ``Message``, ``TopicPartition`` and the offset constants.

Shaped like confluent-kafka's so code ports unchanged:

* Logical offsets: ``OFFSET_BEGINNING`` (-2), ``OFFSET_END`` (-1), ``OFFSET_STORED``
  (-1000) and ``OFFSET_INVALID`` (-1001, "no offset").
* A ``Message`` is a record with accessor methods (``topic()``, ``offset()``, ...);
  ``timestamp()`` is ``(TIMESTAMP_CREATE_TIME | TIMESTAMP_LOG_APPEND_TIME, ms)``;
  ``headers()`` is a list of ``(str, bytes)`` or None; a message whose ``error()`` is
  set is an event (end of partition, a failed delivery, ...), not a record.
* A ``TopicPartition`` is a mutable (topic, partition, offset, metadata) with an
  ``error``; equality, hashing and ordering look at (topic, partition) only.

A committed offset is the offset of the next record to read, here as in Kafka.
"""

from __future__ import annotations

from functools import total_ordering
from typing import Any, Union

from laketail.client.errors import KafkaError

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

#: laketail's record ``timestamp_type`` (0 create, 1 log append) as confluent-kafka's.
TIMESTAMP_TYPES = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}

Headers = list[tuple[str, Union[bytes, None]]]


@total_ordering
class TopicPartition:
    """A topic partition, optionally with an offset, metadata and an error."""

    __slots__ = ("topic", "partition", "offset", "metadata", "leader_epoch", "error")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = int(partition)
        self.offset = int(offset)
        self.metadata = metadata
        self.leader_epoch = -1 if leader_epoch is None else int(leader_epoch)
        self.error: KafkaError | None = None

    def _key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: "TopicPartition") -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        epoch = None if self.leader_epoch < 0 else self.leader_epoch
        return (
            f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
            f"leader_epoch={epoch},error={self.error}}}"
        )

    __str__ = __repr__


class Message:
    """One consumed or delivered record, or an event carrying an error."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_error",
                 "_timestamp", "_latency", "_leader_epoch")

    def __init__(
        self,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Headers | None = None,
        error: KafkaError | None = None,
        timestamp: tuple[int, int] | None = None,
        latency: float | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error
        self._timestamp = timestamp if timestamp is not None else (TIMESTAMP_NOT_AVAILABLE, -1)
        self._latency = latency
        self._leader_epoch = leader_epoch

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def latency(self) -> float | None:
        return self._latency

    def leader_epoch(self) -> int | None:
        return self._leader_epoch

    def set_headers(self, headers: Headers) -> None:
        self._headers = headers

    def set_key(self, key: Any) -> None:
        self._key = key

    def set_value(self, value: Any) -> None:
        self._value = value

    def __len__(self) -> int:
        value = self._value
        return len(value) if isinstance(value, (bytes, bytearray, str)) else 0

    def __repr__(self) -> str:
        if self._error is not None:
            return f"Message(error={self._error}, topic={self._topic}, partition={self._partition})"
        return f"Message(topic={self._topic}, partition={self._partition}, offset={self._offset})"


def error_message(
    error: KafkaError, topic: str | None = None, partition: int | None = None, offset: int | None = None
) -> Message:
    """An event for ``poll()``: a message that only carries an error."""
    return Message(topic=topic, partition=partition, offset=offset, error=error)


def normalize_headers(headers: Any) -> Headers | None:
    """confluent-kafka accepts a dict or a list of (name, value); values str, bytes or None."""
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    out: Headers = []
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError("headers must be a dict or a list of (str, bytes) tuples") from None
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, got {type(name).__name__}")
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif value is not None and not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"header '{name}' value must be str, bytes or None")
        out.append((name, None if value is None else bytes(value)))
    return out
