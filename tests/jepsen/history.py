"""The history a Jepsen-style run records, and the pure checker that judges it.

A run (:mod:`tests.jepsen.runner`) drives a three-broker cluster with clients while a
nemesis kills and pauses brokers, and writes down what every client asked and what it
was answered. Afterwards it reads the whole log back. :func:`check` takes that
:class:`History` and returns the :class:`Finding` s; it does no IO, so its unit tests
hand it made-up histories (tests/jepsen/test_checker.py).

What the history holds (every value a producer sends is unique in the run):

* :class:`Produce` -- one produce request (a plain ``acks=all`` producer, an
  idempotent or a transactional session) with, per record, the answers of each try:
  an ``int`` is the offset it was acknowledged at, a ``str`` the Kafka error name it
  was refused with (``NETWORK_EXCEPTION`` / ``REQUEST_TIMED_OUT`` when the answer never
  came). A plain producer never resends a value: its retry is a new request with new
  values; an idempotent producer resends the same batch with the same sequence.
* :class:`Txn` -- a transaction's values and how its end was answered (``committed``,
  ``aborted``: acknowledged; ``unknown``: the commit or abort was not answered).
* :class:`OffsetCommit` / :class:`OffsetRead` -- a consumer group's commits (the one
  committer commits non-decreasing offsets) and reads of its committed offsets, each
  with the monotonic times it was sent and answered.
* :class:`Grant` -- a producer id ``POST /v1/producers`` handed out.
* :class:`BrokerStart` -- every (re)start of a broker, and whether it came up.
* ``log`` -- every partition read back from offset 0 (read_uncommitted): ``(offset,
  value)``; ``committed_log`` -- the values a read_committed consumer sees.

The checks (one :class:`Finding` kind each):

* ``lost`` -- a record acknowledged at an offset is not in the log there; a value of an
  acknowledged committed transaction is not visible to read_committed;
* ``duplicate`` -- a value is in the log more than once (one request written twice, or
  an idempotent retry not deduplicated);
* ``partial-failure`` -- a record answered with an error that says nothing was written
  (:data:`DEFINITE_FAILURES`), on every try, is in the log;
* ``offsets-backwards`` -- a read of a committed offset is below an acknowledged commit
  answered before the read was sent, or below an earlier read;
* ``producer-id-reuse`` -- one producer id handed to two idempotent sessions (or to two
  transactional ids), or one (id, epoch) handed out twice;
* ``aborted-visible`` -- read_committed sees a value of an acknowledged aborted
  transaction;
* ``broker-start`` -- a broker failed to start;
* ``phantom`` -- the log holds a value no producer sent, or in another partition;
* ``unfinished`` -- the cluster could not be healed and read back after the run (the
  log checks are then skipped; the others still judge what was answered).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Literal

#: Kafka errors that say a produce wrote nothing: a broker checks them before it
#: appends. Everything else leaves the outcome unknown: timeouts,
#: NOT_ENOUGH_REPLICAS_AFTER_APPEND, a lost connection, UNKNOWN_SERVER_ERROR, and
#: NOT_LEADER_OR_FOLLOWER, which Kafka also answers to an acks=all produce waiting in
#: purgatory when the leader moves (the new leader may hold the records).
DEFINITE_FAILURES = frozenset({
    "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS", "NOT_CONTROLLER",
    "BROKER_NOT_AVAILABLE", "FENCED_LEADER_EPOCH",
    "INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED", "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_ID_MAPPING", "INVALID_TXN_STATE", "INVALID_RECORD", "RECORD_TOO_LARGE",
    "INVALID_REQUEST", "CONCURRENT_TRANSACTIONS",
})

Check = Literal[
    "lost", "duplicate", "partial-failure", "offsets-backwards", "producer-id-reuse",
    "aborted-visible", "broker-start", "phantom", "unfinished",
]
CHECKS: tuple[Check, ...] = (
    "lost", "duplicate", "partial-failure", "offsets-backwards", "producer-id-reuse",
    "aborted-visible", "broker-start", "phantom", "unfinished",
)

Answer = int | str


@dataclass
class Produce:
    """One produce request: ``records`` are ``(partition, value)``; ``answers[i]`` the
    answers record ``i`` got, one per try (empty: never answered)."""

    request: str
    producer: str
    records: list[tuple[int, str]]
    answers: list[list[Answer]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.records = [(int(p), str(v)) for p, v in self.records]
        if not self.answers:
            self.answers = [[] for _ in self.records]

    def answer(self, per_record: list[Answer]) -> None:
        """One try's answer, per record."""
        for mine, one in zip(self.answers, per_record, strict=True):
            mine.append(one)

    def answer_all(self, answer: Answer) -> None:
        self.answer([answer] * len(self.records))


@dataclass
class Txn:
    transactional_id: str
    producer_id: int
    epoch: int
    values: list[str]
    outcome: Literal["committed", "aborted", "unknown"] = "unknown"


@dataclass
class OffsetCommit:
    group: str
    partition: int
    offset: int
    sent: float
    answered: float | None = None
    ok: bool = False


@dataclass
class OffsetRead:
    group: str
    partition: int
    offset: int
    sent: float
    answered: float


@dataclass
class Grant:
    transactional_id: str | None
    producer_id: int
    epoch: int
    at: float


@dataclass
class BrokerStart:
    broker: int
    at: float
    ok: bool
    detail: str = ""


@dataclass
class Finding:
    check: Check
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


@dataclass
class History:
    produces: list[Produce] = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    commits: list[OffsetCommit] = field(default_factory=list)
    reads: list[OffsetRead] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)
    starts: list[BrokerStart] = field(default_factory=list)
    log: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    committed_log: dict[int, list[str]] = field(default_factory=dict)
    nemesis: list[dict] = field(default_factory=list)
    #: the controller epoch in the store at the end: how many times the controller was claimed
    controller_epoch: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "History":
        raw = json.loads(text)
        return cls(
            produces=[Produce(**p) for p in raw["produces"]],
            txns=[Txn(**t) for t in raw["txns"]],
            commits=[OffsetCommit(**c) for c in raw["commits"]],
            reads=[OffsetRead(**r) for r in raw["reads"]],
            grants=[Grant(**g) for g in raw["grants"]],
            starts=[BrokerStart(**s) for s in raw["starts"]],
            log={int(p): [(int(o), str(v)) for o, v in rows] for p, rows in raw["log"].items()},
            committed_log={int(p): list(vs) for p, vs in raw["committed_log"].items()},
            nemesis=raw.get("nemesis", []),
            controller_epoch=raw.get("controller_epoch", 0),
        )


def check(history: History, finished: bool = True) -> list[Finding]:
    """Every finding in ``history`` (empty: the run held every guarantee).
    ``finished=False``: the run broke before the log was read back (a cluster that
    would not heal), which is itself an ``unfinished`` finding; the checks that
    compare answers with the log are then left out."""
    if not finished:
        return [Finding("unfinished", "the cluster could not be healed and read back after the run"),
                *_offset_checks(history), *_grant_checks(history), *_start_checks(history)]
    return [
        *_log_checks(history), *_transaction_checks(history), *_offset_checks(history),
        *_grant_checks(history), *_start_checks(history),
    ]


def summary(findings: list[Finding]) -> dict[str, int]:
    """Findings per check, every check named (0 when it found nothing)."""
    counts = Counter(f.check for f in findings)
    return {name: counts.get(name, 0) for name in CHECKS}


def _log_checks(h: History) -> list[Finding]:
    out: list[Finding] = []
    where: dict[str, list[tuple[int, int]]] = {}
    for partition, rows in sorted(h.log.items()):
        for offset, value in rows:
            where.setdefault(value, []).append((partition, offset))
    sent: dict[str, tuple[Produce, int]] = {}
    for produce in h.produces:
        for i, (_, value) in enumerate(produce.records):
            sent[value] = (produce, i)
    for value, places in where.items():
        if len(places) > 1:
            origin = sent.get(value)
            request = f"request {origin[0].request} of {origin[0].producer}" if origin else "no request"
            out.append(Finding("duplicate", f"{value!r} ({request}) is in the log {len(places)} times: "
                                            f"{_places(places)}"))
        if value not in sent:
            out.append(Finding("phantom", f"{value!r} at {_places(places)} was never sent"))
            continue
        produce, i = sent[value]
        partition = produce.records[i][0]
        if any(p != partition for p, _ in places):
            out.append(Finding("phantom", f"{value!r} was sent to partition {partition} but is at {_places(places)}"))
    for produce in h.produces:
        for (partition, value), answers in zip(produce.records, produce.answers):
            acked = [a for a in answers if isinstance(a, int)]
            places = where.get(value, [])
            for offset in acked:
                if (partition, offset) not in places:
                    out.append(Finding("lost", f"{value!r} (request {produce.request} of {produce.producer}) was "
                                               f"acknowledged at {partition}@{offset} but the log has it at "
                                               f"{_places(places) or 'no offset'}"))
            refused = answers and all(isinstance(a, str) and a in DEFINITE_FAILURES for a in answers)
            if refused and places:
                out.append(Finding("partial-failure", f"{value!r} (request {produce.request} of "
                                                      f"{produce.producer}, {len(produce.records)} records) was "
                                                      f"answered {answers} but is in the log at {_places(places)}"))
    return out


def _transaction_checks(h: History) -> list[Finding]:
    out: list[Finding] = []
    visible = Counter(v for values in h.committed_log.values() for v in values)
    acked = {value for p in h.produces for (_, value), a in zip(p.records, p.answers)
             if any(isinstance(x, int) for x in a)}
    for txn in h.txns:
        name = f"transaction of {txn.transactional_id} (producer {txn.producer_id}, epoch {txn.epoch})"
        if txn.outcome == "aborted":
            seen = [v for v in txn.values if visible[v]]
            if seen:
                out.append(Finding("aborted-visible", f"read_committed sees {len(seen)} values of the aborted "
                                                      f"{name}: {seen[:5]}"))
        elif txn.outcome == "committed":
            missing = [v for v in txn.values if v in acked and not visible[v]]
            if missing:
                out.append(Finding("lost", f"read_committed misses {len(missing)} acknowledged values of the "
                                           f"committed {name}: {missing[:5]}"))
    return out


def _offset_checks(h: History) -> list[Finding]:
    out: list[Finding] = []
    keys = {(c.group, c.partition) for c in h.commits} | {(r.group, r.partition) for r in h.reads}
    for group, partition in sorted(keys):
        acked = sorted((c.answered, c.offset) for c in h.commits
                       if c.group == group and c.partition == partition and c.ok and c.answered is not None)
        reads = sorted((r for r in h.reads if r.group == group and r.partition == partition), key=lambda r: r.sent)
        highest: OffsetRead | None = None
        for read in reads:
            floor = max((o for at, o in acked if at < read.sent), default=-1)
            if read.offset < floor:
                out.append(Finding("offsets-backwards", f"group {group} partition {partition}: committed offset "
                                                        f"read as {read.offset} at t={read.sent:.3f} after a "
                                                        f"commit of {floor} was acknowledged"))
            elif highest is not None and highest.answered < read.sent and read.offset < highest.offset:
                out.append(Finding("offsets-backwards", f"group {group} partition {partition}: committed offset "
                                                        f"read as {read.offset} at t={read.sent:.3f} after "
                                                        f"{highest.offset} was read at t={highest.sent:.3f}"))
            if highest is None or read.offset > highest.offset:
                highest = read
    return out


def _grant_checks(h: History) -> list[Finding]:
    out: list[Finding] = []
    owners: dict[int, set[str | None]] = {}
    seen: Counter[tuple[int, int]] = Counter()
    idempotent: Counter[int] = Counter()
    for g in h.grants:
        owners.setdefault(g.producer_id, set()).add(g.transactional_id)
        seen[(g.producer_id, g.epoch)] += 1
        if g.transactional_id is None:
            idempotent[g.producer_id] += 1
    for pid, ids in sorted(owners.items()):
        if len(ids) > 1 or idempotent[pid] > 1:
            who = sorted("idempotent" if i is None else f"transactional id {i}" for i in ids)
            out.append(Finding("producer-id-reuse", f"producer id {pid} was handed out "
                                                    f"{sum(1 for g in h.grants if g.producer_id == pid)} times, "
                                                    f"to {who}"))
        else:
            for (p, epoch), n in sorted(seen.items()):
                if p == pid and n > 1:
                    out.append(Finding("producer-id-reuse",
                                       f"producer id {pid} epoch {epoch} was handed out {n} times"))
    return out


def _start_checks(h: History) -> list[Finding]:
    return [Finding("broker-start", f"broker {s.broker} failed to start at t={s.at:.1f}: {s.detail[-600:]}")
            for s in h.starts if not s.ok]


def _places(places: list[tuple[int, int]]) -> str:
    return ", ".join(f"{p}@{o}" for p, o in places)
