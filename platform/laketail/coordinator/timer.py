"""Deadlines of a coordinator, on its injected clock (Kafka's ``CoordinatorTimer``).

Role: a coordinator schedules an operation under a key for a deadline (a member's
session, a group's rebalance, a transaction's timeout) instead of scanning all its state
on every tick; scheduling a key again replaces its task, cancelling forgets it.
:meth:`CoordinatorTimer.poll` runs, in deadline order, every task due at the clock's
``monotonic()`` now; the broker's housekeeping task calls it (through the coordinator's
``tick``), tests advance a :class:`~laketail.clock.ManualClock` and call it. A task
scheduled while a poll runs is run by a later poll even if it is due already, so a task
that puts itself back at the same deadline cannot hold a poll forever.

Thread-safety: event loop thread only; operations run on it, synchronously, and must
not raise (one that does is logged and dropped, the others still run).
"""

from __future__ import annotations

import heapq
import logging
from typing import Callable, Hashable

from laketail.clock import Clock

log = logging.getLogger(__name__)


class CoordinatorTimer:
    """Keyed deadlines on ``clock.monotonic()`` seconds (see the module docstring)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._tasks: dict[Hashable, tuple[float, int, Callable[[], None]]] = {}
        self._heap: list[tuple[float, int, Hashable]] = []  # stale entries are skipped
        self._seq = 0

    def schedule(self, key: Hashable, deadline: float, operation: Callable[[], None]) -> None:
        """Run ``operation`` once ``monotonic()`` reaches ``deadline``, replacing the task
        of ``key`` if there is one."""
        self._seq += 1
        self._tasks[key] = (deadline, self._seq, operation)
        heapq.heappush(self._heap, (deadline, self._seq, key))
        if len(self._heap) > 2 * len(self._tasks) + 64:  # mostly replaced or cancelled entries
            self._heap = [(d, seq, k) for k, (d, seq, _) in self._tasks.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        """Forget the task of ``key`` (none: nothing happens)."""
        self._tasks.pop(key, None)

    def deadline(self, key: Hashable) -> float | None:
        """When the task of ``key`` runs; None when there is none."""
        task = self._tasks.get(key)
        return task[0] if task is not None else None

    def __len__(self) -> int:
        return len(self._tasks)

    def poll(self) -> int:
        """Run every task due now; returns how many ran. The due tasks are taken off
        first and run after, so what they schedule waits for the next poll."""
        now = self.clock.monotonic()
        due: list[Callable[[], None]] = []
        while self._heap and self._heap[0][0] <= now:
            _, seq, key = heapq.heappop(self._heap)
            task = self._tasks.get(key)
            if task is None or task[1] != seq:
                continue  # cancelled or replaced
            del self._tasks[key]
            due.append(task[2])
        for operation in due:
            try:
                operation()
            except Exception:
                log.exception("a coordinator deadline's operation failed")
        return len(due)
