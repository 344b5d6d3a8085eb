"""Damaged partitions of a coordinator's internal topic, isolated until repaired.

Role: the one mechanism by which a coordinator (the offset store on
``__consumer_offsets``, the transaction coordinator on ``__transaction_state``) keeps
serving while one partition of its topic cannot be read whole. A partition whose read
raises CORRUPT_MESSAGE (its table is damaged, :meth:`laketail.broker.Broker.read_to_log_end`)
is *isolated*: the keys that hash to it (groups, transactional ids, sinks) are answered
COORDINATOR_LOAD_IN_PROGRESS -- the partition is, for this coordinator, still loading:
the client retries at the same coordinator, which loads it once its leader has repaired
it -- and every other key is served. A damaged partition is never a reason for a broker
not to start, nor for the whole coordinator to refuse.

Why COORDINATOR_LOAD_IN_PROGRESS and not COORDINATOR_NOT_AVAILABLE: the coordinator of
these keys does not move (the controller runs every coordinator); NOT_AVAILABLE would
send Kafka clients to look it up again, LOAD_IN_PROGRESS makes them retry it, which is
what will succeed once the partition reads whole.

Thread-safety: event loop thread only.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable

from laketail.errors import CoordinatorLoadInProgress, CorruptMessage

log = logging.getLogger(__name__)


class IsolatedPartitions:
    """The damaged partitions of ``topic`` (partition -> why), as the last load found them."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.unavailable: dict[int, str] = {}

    def __bool__(self) -> bool:
        return bool(self.unavailable)

    async def load(self, partitions: Iterable[int], load_partition: Callable[[int], Awaitable[object]]) -> None:
        """Load every partition with ``load_partition``; one that raises CORRUPT_MESSAGE
        is isolated, any other error propagates (and leaves the isolated set as it was:
        the caller's load failed as a whole and is retried)."""
        unavailable: dict[int, str] = {}
        for partition in partitions:
            try:
                await load_partition(partition)
            except CorruptMessage as exc:
                unavailable[partition] = str(exc)
                log.error("%s-%d is damaged and isolated: what hashes to it is answered "
                          "COORDINATOR_LOAD_IN_PROGRESS until it is repaired (%s)", self.topic, partition, exc)
        self.unavailable = unavailable

    async def load_unavailable(self, load_partition: Callable[[int], Awaitable[object]]) -> None:
        """Load the isolated partitions, each once it reads whole (its leader repaired
        it); a loaded one is no longer isolated. Raises what a read raises; the caller
        retries later."""
        for partition in sorted(self.unavailable):
            await load_partition(partition)
            del self.unavailable[partition]
            log.info("%s-%d loaded after its repair", self.topic, partition)

    def check(self, partition: int, whose: str) -> None:
        """COORDINATOR_LOAD_IN_PROGRESS when ``partition`` is isolated; ``whose`` names
        what keeps its state there (``group 'g'``, ``transactional id 't'``)."""
        why = self.unavailable.get(partition)
        if why is not None:
            raise CoordinatorLoadInProgress(
                f"{self.topic}-{partition}, where {whose} keeps its state, is damaged and waits for its repair: {why}"
            )
