"""Per-partition producer state: idempotent sequences and open transactions.

Role: decide, for each appended batch that carries a producer id, whether it is new
(append it), a retry of one of the producer's last ``MAX_CACHED_BATCHES`` batches
(answer with its original offsets, append nothing), out of order
(OUT_OF_ORDER_SEQUENCE_NUMBER) or from a fenced epoch (INVALID_PRODUCER_EPOCH); and
track each producer's open transaction (its first offset sets the partition's last
stable offset) and every transaction marker (which says whether a transactional record
was committed or aborted).

Validation is separate from application (Kafka's ProducerAppendInfo): :meth:`check`
looks and raises, :meth:`apply` records a batch that was written, so a failed write
changes nothing.

Sequences are int32 and wrap to 0 after 2**31 - 1, as Kafka's do.

Persistence: :meth:`snapshot` / :meth:`restore` (a JSON file next to the segments, with
the offset it covers) plus :meth:`replay` of the frames above that offset on open.

Markers below :attr:`ProducerStateManager.markers_from` are not known here: a hot log
that restarted above the table's end (a replica that came back behind, or reset to the
leader's hot start) has no frames to replay for them. Their records are in the table, and
so are their markers: :meth:`ProducerStateManager.learn` adds them from there (and the open
transactions whose first records are there, and each producer's last sequences, as
:func:`sequence_runs` finds them in the rows) before anyone asks for the outcome of such
a record or a producer appends again -- Kafka rebuilds the same state by replaying its
log from the last producer snapshot. The table keeps no batch bounds, so what is learned
per producer are *runs*: records of one epoch at consecutive offsets with consecutive
sequences (one batch or several); a retried batch inside a run is a duplicate at the
offsets its sequences had.

Not thread-safe: the partition log calls it under its lock.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from laketail.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber
from laketail.records import COORDINATOR_PRODUCER_ID

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1


def _next_seq(seq: int, count: int) -> int:
    return (seq + count) % (INT32_MAX + 1)


@dataclass
class BatchMeta:
    first_seq: int
    last_seq: int
    base_offset: int
    count: int
    #: a run learned from the table (maybe several batches): a retry of any batch inside
    #: it is a duplicate, not only one with exactly these bounds
    run: bool = False

    def duplicate_of(self, first_seq: int, last_seq: int) -> "Duplicate | None":
        if self.first_seq == first_seq and self.last_seq == last_seq:
            return Duplicate(self.base_offset)
        if self.run and self.first_seq <= first_seq <= last_seq <= self.last_seq:
            return Duplicate(self.base_offset + first_seq - self.first_seq)
        return None


@dataclass
class ProducerEntry:
    epoch: int
    batches: list[BatchMeta] = field(default_factory=list)
    last_timestamp_ms: int = 0
    txn_first_offset: int | None = None  # first offset of the open transaction


@dataclass(frozen=True)
class Duplicate:
    """A retried batch: its original base offset."""

    base_offset: int


class ProducerStateManager:
    """One partition's producer state: idempotent sequences, epochs and transactions.

    :meth:`check` decides on a batch before it is written (new, a retry answered with its
    first offsets, out of order, fenced) and :meth:`apply` records it after, so a failed
    write changes nothing. It also knows every transaction marker
    (:meth:`outcome`, :meth:`aborted_pids`) and each producer's open transaction
    (:meth:`first_unstable_offset`, which bounds the last stable offset), and persists
    through :meth:`snapshot` / :meth:`restore`. Thread-safety: no lock of its own; the
    partition log checks and applies batches under the log's lock.
    """

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # pid -> sorted marker offsets and their kinds ('COMMIT' / 'ABORT')
        self.markers: dict[int, tuple[list[int], list[str]]] = {}
        #: markers at lower offsets are missing (see the module docstring)
        self.markers_from = 0

    # -- validation --------------------------------------------------------------------------

    def check(self, pid: int, epoch: int, first_seq: int, count: int, is_control: bool = False) -> Duplicate | None:
        """Raise if the batch must be refused; return :class:`Duplicate` for a retry."""
        entry = self.producers.get(pid)
        if entry is None:
            if not is_control and first_seq not in (0, -1):
                raise OutOfOrderSequenceNumber(
                    f"producer {pid} is unknown here and its first sequence is {first_seq}, not 0"
                )
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"producer {pid} epoch {epoch} is older than the current epoch {entry.epoch}"
            )
        if is_control or first_seq < 0:
            return None
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceNumber(
                    f"producer {pid} epoch {epoch} must start at sequence 0, not {first_seq}"
                )
            return None
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        for meta in entry.batches:
            duplicate = meta.duplicate_of(first_seq, last_seq)
            if duplicate is not None:
                return duplicate
        if entry.batches:
            expected = _next_seq(entry.batches[-1].last_seq, 1)
            if first_seq != expected:
                raise OutOfOrderSequenceNumber(
                    f"producer {pid} sent sequence {first_seq}; expected {expected}"
                )
        elif first_seq != 0:
            raise OutOfOrderSequenceNumber(f"producer {pid} sent sequence {first_seq}; expected 0")
        return None

    # -- application ----------------------------------------------------------------------------

    def apply(
        self,
        pid: int,
        epoch: int,
        first_seq: int,
        count: int,
        base_offset: int,
        timestamp_ms: int,
        transactional: bool,
        control: str | None,
    ) -> None:
        entry = self.producers.get(pid)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch, txn_first_offset=entry.txn_first_offset if entry else None)
            self.producers[pid] = entry
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        if control is not None:
            entry.txn_first_offset = None
            offsets, kinds = self.markers.setdefault(pid, ([], []))
            i = bisect.bisect_left(offsets, base_offset)
            offsets.insert(i, base_offset)
            kinds.insert(i, control)
            return
        if first_seq >= 0:
            entry.batches.append(BatchMeta(first_seq, (first_seq + count - 1) % (INT32_MAX + 1), base_offset, count))
            del entry.batches[:-MAX_CACHED_BATCHES]
        if transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = base_offset

    def learn(self, markers: list[tuple[int, int, str]], records: list[tuple[int, int, int]],
              runs: "dict[int, LearnedProducer] | None" = None) -> None:
        """What the table holds below :attr:`markers_from` (it holds it all), which then
        is 0: its markers, ``(offset, producer_id, kind)``, its transactional records,
        ``(offset, producer_id, producer_epoch)`` -- one whose producer has no marker after
        it belongs to an open transaction, which then holds the last stable offset -- and
        each producer's last sequence runs there (:func:`sequence_runs`), which a producer
        the hot log knows a newer batch or epoch of does not need."""
        below = self.markers_from
        for pid, learned in (runs or {}).items():
            entry = self.producers.get(pid)
            if entry is None:
                self.producers[pid] = ProducerEntry(learned.epoch, list(learned.runs), learned.last_timestamp_ms)
            elif entry.epoch == learned.epoch and not entry.batches:
                entry.batches = list(learned.runs)
                entry.last_timestamp_ms = max(entry.last_timestamp_ms, learned.last_timestamp_ms)
        for offset, pid, kind in markers:
            if offset >= below:
                continue
            offsets, kinds = self.markers.setdefault(pid, ([], []))
            i = bisect.bisect_left(offsets, offset)
            if i < len(offsets) and offsets[i] == offset:
                continue
            offsets.insert(i, offset)
            kinds.insert(i, kind)
        self.markers_from = 0
        for offset, pid, epoch in records:
            if offset >= below or self.outcome(pid, offset) is not None:
                continue
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(epoch)
            if entry.txn_first_offset is None or offset < entry.txn_first_offset:
                entry.txn_first_offset = offset

    def forget_marker(self, pid: int, offset: int) -> None:
        """Undo :meth:`apply` of a marker whose write failed."""
        found = self.markers.get(pid)
        if found and offset in found[0]:
            i = found[0].index(offset)
            del found[0][i], found[1][i]

    # -- reads ------------------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None when none is open)."""
        opens = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset is not None]
        return min(opens) if opens else None

    def outcome(self, pid: int, offset: int) -> str | None:
        """'COMMIT' or 'ABORT' for a transactional record of ``pid`` at ``offset``; None
        while its transaction is still open."""
        found = self.markers.get(pid)
        if not found:
            return None
        offsets, kinds = found
        i = bisect.bisect_right(offsets, offset)
        return kinds[i] if i < len(offsets) else None

    def aborted_pids(self) -> set[int]:
        return {pid for pid, (_, kinds) in self.markers.items() if "ABORT" in kinds}

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` with no open transaction."""
        gone = [
            pid for pid, e in self.producers.items()
            if e.txn_first_offset is None and now_ms - e.last_timestamp_ms > expiration_ms
            and pid != COORDINATOR_PRODUCER_ID  # the coordinators' fence: kept however old
        ]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # -- persistence -------------------------------------------------------------------------------

    def snapshot(self) -> dict:
        return {
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "batches": [[b.first_seq, b.last_seq, b.base_offset, b.count, b.run] for b in e.batches],
                    "last_timestamp_ms": e.last_timestamp_ms,
                    "txn_first_offset": e.txn_first_offset,
                }
                for pid, e in self.producers.items()
            },
            "markers": {str(pid): [offs, kinds] for pid, (offs, kinds) in self.markers.items()},
            "markers_from": self.markers_from,
        }

    @classmethod
    def restore(cls, doc: dict) -> "ProducerStateManager":
        state = cls()
        for pid, e in doc.get("producers", {}).items():
            state.producers[int(pid)] = ProducerEntry(
                e["epoch"], [BatchMeta(*b) for b in e["batches"]], e["last_timestamp_ms"], e["txn_first_offset"]
            )
        for pid, (offs, kinds) in doc.get("markers", {}).items():
            state.markers[int(pid)] = (list(offs), list(kinds))
        state.markers_from = int(doc.get("markers_from", 0))
        return state


@dataclass(frozen=True)
class LearnedProducer:
    """A producer's state as the table's rows show it: the epoch of its last records, the
    last :data:`MAX_CACHED_BATCHES` sequence runs of that epoch, its latest timestamp."""

    epoch: int
    runs: tuple[BatchMeta, ...]
    last_timestamp_ms: int


def sequence_runs(offsets: np.ndarray, pids: np.ndarray, epochs: np.ndarray, sequences: np.ndarray,
                  timestamps_ms: np.ndarray) -> list[tuple[int, int, BatchMeta, int]]:
    """The runs of producer records among rows given column by column (data records of
    producers only: producer id and sequence >= 0, no marker): ``(producer id, epoch,
    run, max timestamp ms)``, a run being records of one producer and epoch at
    consecutive offsets with consecutive (wrapping) sequences. Vectorised: a table holds
    millions of rows."""
    if len(offsets) == 0:
        return []
    order = np.lexsort((offsets, pids))
    offsets, pids, epochs = offsets[order].astype(np.int64), pids[order], epochs[order]
    sequences, timestamps_ms = sequences[order].astype(np.int64), timestamps_ms[order]
    breaks = np.ones(len(offsets), dtype=bool)
    breaks[1:] = (
        (pids[1:] != pids[:-1]) | (epochs[1:] != epochs[:-1]) | (offsets[1:] != offsets[:-1] + 1)
        | (sequences[1:] != (sequences[:-1] + 1) % (INT32_MAX + 1))
    )
    starts = np.flatnonzero(breaks)
    ends = np.append(starts[1:], len(offsets)) - 1
    max_ts = np.maximum.reduceat(timestamps_ms, starts)
    return [
        (int(pids[a]), int(epochs[a]),
         BatchMeta(int(sequences[a]), int(sequences[b]), int(offsets[a]), int(b - a + 1), run=True), int(ts))
        for a, b, ts in zip(starts, ends, max_ts)
    ]


def learned_producers(runs: list[tuple[int, int, BatchMeta, int]]) -> dict[int, LearnedProducer]:
    """Per producer, from runs found in any order (row groups, files): the epoch of its
    last run, that epoch's last runs (adjacent ones joined) and its latest timestamp."""
    by_pid: dict[int, list[tuple[int, BatchMeta, int]]] = {}
    for pid, epoch, run, ts in runs:
        by_pid.setdefault(pid, []).append((epoch, run, ts))
    learned = {}
    for pid, found in by_pid.items():
        found.sort(key=lambda f: f[1].base_offset)
        epoch = found[-1][0]
        joined: list[BatchMeta] = []
        for e, run, _ in found:
            if e != epoch:
                continue
            last = joined[-1] if joined else None
            if (last is not None and last.base_offset + last.count == run.base_offset
                    and _next_seq(last.last_seq, 1) == run.first_seq):
                joined[-1] = BatchMeta(last.first_seq, run.last_seq, last.base_offset, last.count + run.count, True)
            else:
                joined.append(run)
        learned[pid] = LearnedProducer(epoch, tuple(joined[-MAX_CACHED_BATCHES:]), max(ts for _, _, ts in found))
    return learned
