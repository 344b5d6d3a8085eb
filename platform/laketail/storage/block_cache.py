"""Decoded blocks of both storage tiers, kept for the next fetch.

Role: a fetch returns a slice of a block, a hot-tier frame (one produce request, up to
thousands of records) or a row group of a data file (32,768 rows). Without a cache, a
consumer walking through a block 500 records at a time reads and decodes the whole
block again for every fetch, and so does every other group reading the same records.
Kafka leans on the page cache for this, where the bytes on disk are the bytes it
sends; laketail's blocks must be decoded first, so it keeps them decoded.

Blocks never change once written, so entries are never invalidated in place: a hot
segment that is cut back (a follower truncating a divergent suffix) takes a new key
(:attr:`Segment.cache_key`), and a Delta data file is immutable under its path (an
outside OPTIMIZE writes new paths and removes the old ones; a table row group is cached
already sorted by offset). Stale entries are simply no longer asked for and age out. Least recently used entries go
first once the decoded bytes pass ``laketail.fetch.cache.bytes``; 0 turns the cache
off.

Thread-safety: fetches read the hot tier and the table in worker threads; one lock
guards the map.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from typing import Any, Hashable

DEFAULT_CAPACITY_BYTES = 128 * 1024 * 1024

_keys = itertools.count(1)


def new_key() -> int:
    """A key no block of this process has used (for a segment's current contents)."""
    return next(_keys)


class NotCached(Exception):
    """A read told to use only decoded blocks (``cached_only``) needs one that is not
    in the cache: the caller reads again in a worker thread, where disk I/O may wait."""


class BlockCache:
    """Decoded blocks (hot-tier frames, table row groups) by key, least recently used first out.

    :meth:`get` and :meth:`put` under one lock; entries are never invalidated, since
    blocks never change under their key; past ``capacity_bytes`` (``laketail.fetch.cache.bytes``;
    0 turns the cache off) the oldest go. ``hits`` and ``misses`` count look-ups.
    Thread-safe.
    """

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY_BYTES) -> None:
        self.capacity_bytes = capacity_bytes
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        """Keep ``value`` (``nbytes`` decoded) unless it alone is over a quarter of the
        capacity: one huge block must not flush everything else."""
        if nbytes * 4 > self.capacity_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            self._entries[key] = (value, nbytes)
            self.nbytes += nbytes
            self._evict_locked()

    def resize(self, capacity_bytes: int) -> None:
        with self._lock:
            self.capacity_bytes = capacity_bytes
            self._evict_locked()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _evict_locked(self) -> None:
        while self.nbytes > self.capacity_bytes and self._entries:
            _, (_, nbytes) = self._entries.popitem(last=False)
            self.nbytes -= nbytes


# One per process: keys are unique across brokers, segments and tables, so brokers run
# inside one process (tests) share it safely. The broker sizes it from its settings.
BLOCKS = BlockCache()
