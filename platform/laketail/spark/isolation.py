"""read_committed over a topic table's rows: which transactional records were aborted.

A transaction's records and its end are rows of the same partition: data rows with
``transactional = true``, then one control row (``control`` = ``COMMIT`` or
``ABORT``) with the same ``producer_id``. So a transactional record at offset *o* is

* committed when the first control row of its producer id after *o* is COMMIT,
* aborted when it is ABORT,
* undecided when there is none yet (its transaction is open, or its marker is not in
  the rows looked at).

Everything here is pure numpy/pyarrow over columns; the Spark source (per executor,
per offset range) and the SQL views (per table, on the driver) use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

COMMITTED = 0
ABORTED = 1
UNDECIDED = 2

#: The columns a control-row or transaction scan reads.
TXN_COLUMNS = ["offset", "producer_id", "transactional", "control"]


@dataclass(frozen=True)
class Markers:
    """Control rows of one partition: offsets, producer ids, whether each is an ABORT."""

    offsets: np.ndarray
    producer_ids: np.ndarray
    aborts: np.ndarray

    @classmethod
    def empty(cls) -> "Markers":
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, bool))

    @classmethod
    def of(cls, rows: pa.Table) -> "Markers":
        """The control rows among ``rows`` (any table with ``TXN_COLUMNS``)."""
        control = rows.column("control")
        if control.null_count == len(control):
            return cls.empty()
        rows = rows.filter(pc.is_valid(control))
        return cls(
            rows.column("offset").to_numpy().astype(np.int64, copy=False),
            rows.column("producer_id").to_numpy().astype(np.int64, copy=False),
            pc.equal(rows.column("control"), "ABORT").to_numpy(zero_copy_only=False).astype(bool),
        )

    def __len__(self) -> int:
        return len(self.offsets)

    def merge(self, other: "Markers") -> "Markers":
        if not len(other):
            return self
        if not len(self):
            return other
        return Markers(
            np.concatenate([self.offsets, other.offsets]),
            np.concatenate([self.producer_ids, other.producer_ids]),
            np.concatenate([self.aborts, other.aborts]),
        )


def outcomes(offsets: np.ndarray, producer_ids: np.ndarray, markers: Markers) -> np.ndarray:
    """COMMITTED / ABORTED / UNDECIDED for each (offset, producer id) of transactional
    records, from the first marker of the same producer id after each offset."""
    n = len(offsets)
    result = np.full(n, UNDECIDED, np.int8)
    if not n or not len(markers):
        return result
    ids, dense = np.unique(np.concatenate([markers.producer_ids, producer_ids]), return_inverse=True)
    marker_ids, record_ids = dense[: len(markers)], dense[len(markers):]
    span = int(max(markers.offsets.max(), offsets.max())) + 2
    if len(ids) * span >= 2**62:  # keys would overflow: one producer id at a time
        for pid in np.unique(producer_ids):
            mine = producer_ids == pid
            theirs = markers.producer_ids == pid
            result[mine] = outcomes_one(offsets[mine], markers.offsets[theirs], markers.aborts[theirs])
        return result
    marker_keys = marker_ids.astype(np.int64) * span + markers.offsets
    order = np.argsort(marker_keys, kind="stable")
    marker_keys, aborts, marker_ids = marker_keys[order], markers.aborts[order], marker_ids[order]
    record_keys = record_ids.astype(np.int64) * span + offsets
    j = np.searchsorted(marker_keys, record_keys, side="right")
    found = j < len(marker_keys)
    j_safe = np.where(found, j, 0)
    found &= marker_ids[j_safe] == record_ids
    return np.where(found, np.where(aborts[j_safe], ABORTED, COMMITTED), UNDECIDED).astype(np.int8)


def outcomes_one(offsets: np.ndarray, marker_offsets: np.ndarray, aborts: np.ndarray) -> np.ndarray:
    """:func:`outcomes` for records and markers of one producer id."""
    order = np.argsort(marker_offsets)
    marker_offsets, aborts = marker_offsets[order], aborts[order]
    j = np.searchsorted(marker_offsets, offsets, side="right")
    found = j < len(marker_offsets)
    j_safe = np.where(found, j, 0)
    return np.where(found, np.where(aborts[j_safe], ABORTED, COMMITTED), UNDECIDED).astype(np.int8)


def committed_rows(rows: pa.Table, markers: Markers) -> tuple[pa.Table, int]:
    """``rows`` without control rows and without aborted records; also how many
    transactional records stayed undecided (they are dropped too: the caller must
    read them again where their outcome is known)."""
    control = rows.column("control")
    data = rows.filter(pc.is_null(control)) if control.null_count < len(control) else rows
    transactional = data.column("transactional")
    if not pc.any(transactional).as_py():
        return data, 0
    mask = transactional.to_numpy(zero_copy_only=False).astype(bool)
    offsets = data.column("offset").to_numpy()[mask]
    pids = data.column("producer_id").to_numpy()[mask]
    outcome = outcomes(offsets.astype(np.int64, copy=False), pids.astype(np.int64, copy=False), markers)
    keep = np.ones(data.num_rows, bool)
    keep[mask] = outcome == COMMITTED
    undecided = int(np.count_nonzero(outcome == UNDECIDED))
    return data.filter(pa.array(keep)), undecided


@dataclass(frozen=True)
class TransactionRanges:
    """Where one partition's table rows are not committed data.

    ``aborted``: ``(producer_id, after, before)`` -- that producer's transactional
    records with ``after < offset < before`` were aborted (``after`` is its previous
    marker, or -1). ``aborted_producers``: producer ids whose every transaction here
    was aborted (their records go by id, no offsets needed; Spark's sink uses a
    producer id for one transaction only). ``stable_offset``: records at or above it
    may belong to a transaction whose end is not in the table yet (``None``: none do).
    """

    aborted: list[tuple[int, int, int]]
    stable_offset: int | None
    aborted_producers: frozenset[int] = frozenset()


def transaction_ranges(rows: pa.Table) -> TransactionRanges:
    """From a partition's transactional rows (data and control, ``TXN_COLUMNS``)."""
    markers = Markers.of(rows)
    aborted: list[tuple[int, int, int]] = []
    only_aborts: set[int] = set()
    if len(markers):
        committing = set(markers.producer_ids[~markers.aborts].tolist())
        only_aborts = set(markers.producer_ids[markers.aborts].tolist()) - committing
        order = np.lexsort((markers.offsets, markers.producer_ids))
        offsets, pids, aborts = markers.offsets[order], markers.producer_ids[order], markers.aborts[order]
        previous = np.concatenate([[-1], offsets[:-1]])
        same = np.concatenate([[False], pids[1:] == pids[:-1]])
        previous = np.where(same, previous, -1)
        for i in np.nonzero(aborts)[0]:
            aborted.append((int(pids[i]), int(previous[i]), int(offsets[i])))
    data = rows.filter(pc.and_(pc.is_null(rows.column("control")), rows.column("transactional")))
    stable = None
    if data.num_rows:
        offsets = data.column("offset").to_numpy().astype(np.int64, copy=False)
        outcome = outcomes(offsets, data.column("producer_id").to_numpy().astype(np.int64, copy=False), markers)
        undecided = outcome == UNDECIDED
        if undecided.any():
            stable = int(offsets[undecided].min())
    return TransactionRanges(aborted, stable, frozenset(only_aborts))
