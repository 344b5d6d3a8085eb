"""A history of produce requests, and the checker that holds a log read back against it.

Every record a replication test sends carries a value nobody else sends. The
:class:`History` remembers, per value, the partition it was sent to and how its
request ended:

* ``ok`` -- acknowledged at an offset: it must be in the log, once, at that offset;
* ``failed`` -- refused with an error that says nothing was written (NOT_ENOUGH_REPLICAS,
  or LEADER_NOT_AVAILABLE while no broker leads): it must not be in the log;
* ``unknown`` -- a connection error, a timeout, any other 5xx: it may be in the log
  (once, in the partition it was sent to) or not;
* ``pending`` -- no answer recorded (a producer stopped mid-request): as ``unknown``.

:func:`check` compares the partitions as read back, ``{partition: [(offset, value)]}``
from offset 0 to the end offset, with the history and lists every violation:

* offsets are dense: exactly ``0 .. end-1``, each once;
* no value appears twice (in any partitions);
* no value appears that was never sent, or in a partition it was not sent to;
* no refused value appears;
* every acknowledged value is at its acknowledged partition and offset, and no two
  acknowledgements name the same offset.

The recorder is thread-safe; the checker is a pure function.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, Sequence

Outcome = Literal["pending", "ok", "failed", "unknown"]

#: How many violations a failure message lists before it says "and N more".
SHOWN_PROBLEMS = 25


@dataclass
class Op:
    """One record sent: its value, partition and how the request ended."""

    value: str
    partition: int
    outcome: Outcome = "pending"
    offset: int | None = None
    detail: str = ""


class History:
    """The record of every value sent, safe to share between producer threads."""

    def __init__(self) -> None:
        self._ops: dict[str, Op] = {}
        self._lock = threading.Lock()

    def invoke(self, partition: int, values: Iterable[str]) -> None:
        """Values about to be sent to ``partition`` (before the request leaves)."""
        with self._lock:
            for value in values:
                assert value not in self._ops, f"value {value!r} sent twice by the test itself"
                self._ops[value] = Op(value, partition)

    def ok(self, value: str, partition: int, offset: int) -> None:
        with self._lock:
            op = self._ops[value]
            assert op.partition == partition, (
                f"{value!r} was sent to partition {op.partition} but acknowledged in {partition}"
            )
            op.outcome, op.offset = "ok", offset

    def failed(self, values: Iterable[str], detail: str) -> None:
        self._finish(values, "failed", detail)

    def unknown(self, values: Iterable[str], detail: str) -> None:
        self._finish(values, "unknown", detail)

    def _finish(self, values: Iterable[str], outcome: Outcome, detail: str) -> None:
        with self._lock:
            for value in values:
                op = self._ops[value]
                op.outcome, op.detail = outcome, detail

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops.values())

    def acked_count(self) -> int:
        with self._lock:
            return sum(1 for op in self._ops.values() if op.outcome == "ok")

    def summary(self) -> str:
        """Counts per outcome, and the commonest details of the non-acknowledged."""
        ops = self.ops()
        outcomes = Counter(op.outcome for op in ops)
        details = Counter(op.detail for op in ops if op.outcome != "ok")
        common = ", ".join(f"{d or '-'}: {n}" for d, n in details.most_common(8))
        return f"{dict(outcomes)}; not acknowledged: {common or 'none'}"


def check(
    history: History | Sequence[Op],
    logs: Mapping[int, Sequence[tuple[int, str]]],
    end_offsets: Mapping[int, int],
) -> list[str]:
    """Every violation of the history by the partitions read back (empty: none).

    ``logs`` holds, per partition, the ``(offset, value)`` pairs read from offset 0 up
    to ``end_offsets[partition]``; a partition missing from ``logs`` was read empty.
    """
    ops = history.ops() if isinstance(history, History) else list(history)
    by_value = {op.value: op for op in ops}
    problems: list[str] = []

    partitions = sorted(set(logs) | set(end_offsets) | {op.partition for op in ops})
    seen: dict[str, list[tuple[int, int]]] = {}
    at: dict[tuple[int, int], str] = {}
    for p in partitions:
        entries = list(logs.get(p, ()))
        end = end_offsets.get(p, 0)
        offsets = Counter(o for o, _ in entries)
        repeated = sorted(o for o, n in offsets.items() if n > 1)
        if repeated:
            problems.append(f"partition {p}: offsets read more than once: {repeated[:10]}")
        missing = sorted(set(range(end)) - set(offsets))
        if missing:
            problems.append(f"partition {p}: offsets missing below the end offset {end}: {_ranges(missing)}")
        beyond = sorted(o for o in offsets if o < 0 or o >= end)
        if beyond:
            problems.append(f"partition {p}: offsets outside 0..{end - 1}: {beyond[:10]}")
        for offset, value in entries:
            seen.setdefault(value, []).append((p, offset))
            at.setdefault((p, offset), value)

    for value, places in seen.items():
        if len(places) > 1:
            problems.append(f"value {value!r} appears {len(places)} times, at (partition, offset) {places[:5]}")
        op = by_value.get(value)
        if op is None:
            problems.append(f"value {value!r} at {places[0]} was never sent")
        elif any(p != op.partition for p, _ in places):
            problems.append(f"value {value!r} was sent to partition {op.partition} but is at {places[:5]}")
        elif op.outcome == "failed":
            problems.append(f"value {value!r} was refused ({op.detail}) but is at {places[:5]}")

    claimed: dict[tuple[int, int], str] = {}
    for op in ops:
        if op.outcome != "ok":
            continue
        place = (op.partition, op.offset)
        if place in claimed:
            problems.append(
                f"partition {op.partition} offset {op.offset} acknowledged for two values, "
                f"{claimed[place]!r} and {op.value!r}"
            )
        claimed[place] = op.value
        if at.get(place) == op.value:
            continue
        where = seen.get(op.value)
        if where:
            problems.append(f"acknowledged value {op.value!r} is at {where[:5]}, not at its acknowledged {place}")
        else:
            problems.append(
                f"acknowledged value {op.value!r} (partition {op.partition} offset {op.offset}) is lost"
                + (f"; that offset holds {at[place]!r}" if place in at else "")
            )
    return problems


def describe(problems: Sequence[str], history: History | None = None) -> str:
    """A failure message: the first violations, and the history's summary."""
    shown = list(problems[:SHOWN_PROBLEMS])
    if len(problems) > SHOWN_PROBLEMS:
        shown.append(f"... and {len(problems) - SHOWN_PROBLEMS} more")
    text = f"{len(problems)} violations of the produce history:\n  " + "\n  ".join(shown)
    if history is not None:
        text += f"\nhistory: {history.summary()}"
    return text


def _ranges(numbers: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` as ``1-3, 7`` (the first few runs)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:10])
    return text + (f", ... ({len(runs)} runs)" if len(runs) > 10 else "")
