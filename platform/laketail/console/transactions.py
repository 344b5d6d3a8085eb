"""The console's view of the transaction coordinator: one row per transactional id.

Pure: rows from the coordinator's :class:`~laketail.coordinator.transactions.TxnMetadata`
and ``now``. A transaction is *open* from its first partition until its markers are
written (``Ongoing``, ``PrepareCommit``, ``PrepareAbort``); ``age_ms`` is how long it
has been open (None once it completed). It is *hanging* when it has been open longer
than its ``transaction.timeout.ms``: the coordinator should have aborted it already
(it checks every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``), and
until it ends, read_committed consumers of its partitions stop at its first offset.
Open transactions come first, oldest first, so what needs a look leads the page.
"""

from __future__ import annotations

from typing import Iterable

from laketail.bounds import INT64_MAX
from laketail.coordinator.transactions import TxnMetadata

OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def transaction_rows(metas: Iterable[TxnMetadata], now_ms: int) -> list[dict]:
    rows = []
    for m in metas:
        is_open = m.state in OPEN_STATES and m.start_ms >= 0
        age = max(now_ms - m.start_ms, 0) if is_open else None
        rows.append({
            "transactional_id": m.transactional_id, "producer_id": m.producer_id,
            "producer_epoch": m.producer_epoch, "state": m.state, "timeout_ms": m.timeout_ms,
            "start_ms": m.start_ms, "age_ms": age, "hanging": age is not None and age > m.timeout_ms,
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(m.partitions)],
        })
    rows.sort(key=lambda r: (r["age_ms"] is None, r["start_ms"] if r["age_ms"] is not None else INT64_MAX,
                             r["transactional_id"]))
    return rows
