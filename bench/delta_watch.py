"""Watches a Delta table's log from outside the broker: when did each commit appear,
and how far did it tier each partition.

Role: measure record -> visible-in-the-table latency without asking the broker. A
thread polls for the next ``_delta_log/<version>.json`` every few milliseconds (delta-rs
publishes a commit file atomically, so its existence means the commit is visible) and
reads its ``txn`` actions: the tierer writes ``appId = laketail.tier.<partition>`` with
``version`` = the next offset tiered (docs/architecture.md §7.1).
"""

from __future__ import annotations

import bisect
import threading
import time
from pathlib import Path

import orjson


class DeltaLogWatcher:
    def __init__(self, table: Path, poll_s: float = 0.005) -> None:
        self.log_dir = table / "_delta_log"
        self.poll_s = poll_s
        self.next_version = 0
        #: partition -> ([monotonic time seen], [tiered offset]) in commit order
        self.tiered: dict[int, tuple[list[float], list[int]]] = {}
        self.commits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delta-watch", daemon=True)

    def start(self) -> "DeltaLogWatcher":
        while (self.log_dir / f"{self.next_version:020d}.json").exists():
            self.next_version += 1  # commits made before watching are not timed
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            path = self.log_dir / f"{self.next_version:020d}.json"
            if path.exists():
                seen = time.monotonic()
                self._read(path, seen)
                self.next_version += 1
                self.commits += 1
                continue
            time.sleep(self.poll_s)

    def _read(self, path: Path, seen: float) -> None:
        for line in path.read_bytes().splitlines():
            if b'"txn"' not in line:
                continue
            txn = orjson.loads(line).get("txn")
            app = (txn or {}).get("appId", "")
            if app.startswith("laketail.tier."):
                times, offsets = self.tiered.setdefault(int(app.rsplit(".", 1)[1]), ([], []))
                times.append(seen)
                offsets.append(int(txn["version"]))

    def visible_at(self, partition: int, offset: int) -> float | None:
        """When the first commit that holds ``offset`` of ``partition`` was seen."""
        times, offsets = self.tiered.get(partition, ([], []))
        i = bisect.bisect_right(offsets, offset)
        return times[i] if i < len(times) else None
