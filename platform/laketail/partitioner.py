"""Kafka's default partitioner, byte for byte.

Keyed records go to ``(murmur2(key) & 0x7fffffff) % partitions`` with the murmur2 of
Kafka's Java client (``org.apache.kafka.common.utils.Utils.murmur2``, seed
0x9747b28c), so a producer that moves from Kafka to laketail keeps its partitions.
Keyless records stick to one partition until the sticky partitioner moves on (after
each batch), as Kafka's client does since 2.4.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 as a signed 32-bit int (Java's ``int``)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length - (length & 3)
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Kafka's ``Utils.toPositive(murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Keyless records of one request go to one partition; the next request moves on.

    Thread-safe. One instance per topic.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: int | None = None

    def next_batch(self, num_partitions: int) -> int:
        with self._lock:
            if self._current is None or num_partitions == 1:
                self._current = random.randrange(num_partitions)
            else:
                step = random.randrange(1, num_partitions)
                self._current = (self._current + step) % num_partitions
            return self._current

    def next_batch_among(self, choices: Sequence[int]) -> int:
        """As :meth:`next_batch`, choosing only among ``choices`` (the partitions one
        request process leads, :mod:`laketail.request_processes`)."""
        with self._lock:
            if self._current in choices and len(choices) > 1:
                others = [p for p in choices if p != self._current]
                self._current = others[random.randrange(len(others))]
            else:
                self._current = choices[random.randrange(len(choices))]
            return self._current
