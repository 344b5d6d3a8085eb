"""Incremental fetch sessions (KIP-227), as Kafka's ``FetchManager`` keeps them.

A consumer that fetches many partitions from one broker need not name them all in
every Fetch, nor read every one of them back: the broker remembers the set (a *fetch
session*), the client sends only what changed, and the broker answers only the
partitions that have something to say. The request's ``session_id`` and
``session_epoch`` (Fetch v7+) pick one of four contexts, Kafka's rules exactly:

* ``session_id`` 0, ``session_epoch`` -1 (FINAL; v4-6 always, and librdkafka):
  *sessionless*, a full fetch and no session;
* any id, epoch 0 (INITIAL): *full*, closes the session it names (if any) and opens a
  new one holding every requested partition; the answer names it (0 when the cache has
  no room);
* an id other than 0, epoch -1: *sessionless*, after closing the named session;
* an id, epoch above 0: *incremental*. The session must exist (else
  FETCH_SESSION_ID_NOT_FOUND, 70) and expect this epoch (else INVALID_FETCH_SESSION_EPOCH,
  71); the request's partitions are added or updated (fetch offset, max bytes), its
  ``forgotten_topics_data`` removed, and every partition of the session is read at its
  remembered fetch offset. A session left empty is closed and the fetch is sessionless.

The epoch starts at 1 when a session opens and moves on by one with every incremental
request accepted (wrapping past ``2**31 - 1`` to 1); a request repeated after a lost
answer therefore gets INVALID_FETCH_SESSION_EPOCH and the client starts over with a
full fetch. A session error answers no partitions and session id 0.

An incremental answer carries a partition only when (``CachedPartition.must_respond``):
it has records, or its high watermark, last stable offset or log start offset differs
from what the session last sent, or it has an error (and then its remembered high
watermark becomes -1, so the partition is sent again once the error is gone). Kafka's
broker compares the high watermark and log start offset; laketail compares the last
stable offset too (a ``read_committed`` consumer must learn that a commit moved it),
which can only add partitions. Partitions answered move to the end of the session, so
they are read last next time (Kafka's round robin).

:class:`FetchSessionCache` holds at most ``max.incremental.fetch.session.cache.slots``
sessions (Kafka's key and default, 1000) per broker, shared by its Kafka listeners. When
it is full a new session may evict one unused for more than 120 s (Kafka's
``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``), else the smallest session older than
that if it holds fewer partitions than the new one; otherwise the full fetch is
answered without a session. Kafka's followers' privileged sessions have no counterpart:
the Kafka listener serves consumers only.

One difference from Kafka, on purpose: a session belongs to the principal that opened
it. Another principal naming its id gets FETCH_SESSION_ID_NOT_FOUND and cannot close it
(Kafka authorizes every partition of every fetch, as laketail does, so a borrowed
session read nothing more; it could only disturb its owner's epochs).

Pure state over an injected ``now_ms``; event loop thread only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable

from laketail.security.principal import KafkaPrincipal

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
#: Kafka's ``KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``.
EVICTION_MS = 120_000
_MAX_INT = 2**31 - 1

TopicPartition = tuple[str, int]
#: A partition to read: topic, partition, fetch offset, partition max bytes.
Wanted = tuple[str, int, int, int]


def next_epoch(epoch: int) -> int:
    """The epoch after a session's ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``): the
    largest int wraps to 1."""
    return 1 if epoch == _MAX_INT else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: what the client last asked (fetch offset, max bytes)
    and what the broker last answered (offsets; -1 before any answer)."""

    fetch_offset: int
    max_bytes: int
    answered_hw: int = -1  # the high watermark last sent (a copy; the partition log owns the real one)
    answered_lso: int = -1
    answered_log_start: int = -1

    def must_respond(self, answer: dict) -> bool:
        """Whether an incremental answer carries this partition (module docstring), and
        remember what it carries."""
        must = bool(answer["records"])
        for key, name in _ANSWERED.items():
            if getattr(self, name) != answer[key]:
                setattr(self, name, answer[key])
                must = True
        if answer["error_code"]:
            self.answered_hw = -1  # sent again once the error is gone
            must = True
        return must


#: the offsets of an answer a session remembers: answer key -> :class:`CachedPartition` field
_ANSWERED = {"high_watermark": "answered_hw", "last_stable_offset": "answered_lso",
             "log_start_offset": "answered_log_start"}


@dataclass(slots=True)
class FetchSession:
    """A session: its partitions in the order they are read, its owner and epoch."""

    session_id: int
    principal: KafkaPrincipal
    partitions: dict[TopicPartition, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int = 1

    def update(self, requested: dict[TopicPartition, tuple[int, int]], forgotten: Iterable[TopicPartition]) -> None:
        """Add or update the request's partitions, then drop the forgotten ones (Kafka's order)."""
        for tp, (offset, max_bytes) in requested.items():
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition(offset, max_bytes)
            else:
                cached.fetch_offset, cached.max_bytes = offset, max_bytes
        for tp in forgotten:
            self.partitions.pop(tp, None)


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The top of a Fetch answer and the partitions it carries, in order."""

    error_code: int
    session_id: int
    partitions: list[tuple[TopicPartition, dict]]


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request reads (``wanted``) and how its answer is shaped
    (:meth:`respond`). ``kind`` is ``sessionless``, ``full``, ``incremental`` or ``error``."""

    kind: str
    wanted: list[Wanted]
    error_code: int = 0
    cache: "FetchSessionCache | None" = None
    session: FetchSession | None = None
    principal: KafkaPrincipal | None = None
    expected_epoch: int = 0
    requested: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    def respond(self, answers: list[tuple[TopicPartition, dict]], now_ms: int) -> FetchAnswer:
        """The answer for ``answers`` (one per ``wanted``, same order)."""
        if self.kind == "error":
            return FetchAnswer(self.error_code, INVALID_SESSION_ID, [])
        if self.kind == "sessionless":
            return FetchAnswer(0, INVALID_SESSION_ID, answers)
        if self.kind == "full":
            assert self.cache is not None and self.principal is not None
            opened = self.cache.open(self.principal, self.requested, answers, now_ms)
            return FetchAnswer(0, opened, answers)
        session = self.session
        assert session is not None
        if session.epoch != self.expected_epoch:  # another request of this session came between
            return FetchAnswer(INVALID_FETCH_SESSION_EPOCH, session.session_id, [])
        kept = []
        for tp, answer in answers:
            cached = session.partitions.get(tp)
            if cached is not None and cached.must_respond(answer):
                kept.append((tp, answer))
                session.partitions[tp] = session.partitions.pop(tp)  # to the end: read last next time
        return FetchAnswer(0, session.session_id, kept)


class FetchSessionCache:
    """This broker's fetch sessions, at most ``max_slots`` (see the module docstring).
    Event loop thread only."""

    def __init__(self, max_slots: int = 1000, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self.sessions)

    def new_context(self, session_id: int, epoch: int, requested: dict[TopicPartition, tuple[int, int]],
                    forgotten: Iterable[TopicPartition], principal: KafkaPrincipal, now_ms: int) -> FetchContext:
        """The context of one Fetch request (Kafka's ``FetchManager.newContext``)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch closes the session it names
            named = self.sessions.get(session_id)
            if named is not None and named.principal == principal:
                del self.sessions[session_id]
            wanted = [(t, p, offset, max_bytes) for (t, p), (offset, max_bytes) in requested.items()]
            if epoch == FINAL_EPOCH:
                return FetchContext("sessionless", wanted)
            return FetchContext("full", wanted, cache=self, principal=principal, requested=dict(requested))
        session = self.sessions.get(session_id)
        if session is None or session.principal != principal:
            return FetchContext("error", [], FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext("error", [], INVALID_FETCH_SESSION_EPOCH)
        session.update(requested, forgotten)
        if not session.partitions:
            del self.sessions[session_id]
            return FetchContext("sessionless", [(t, p, o, m) for (t, p), (o, m) in requested.items()])
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        wanted = [(t, p, c.fetch_offset, c.max_bytes) for (t, p), c in session.partitions.items()]
        return FetchContext("incremental", wanted, session=session, expected_epoch=session.epoch)

    def open(self, principal: KafkaPrincipal, requested: dict[TopicPartition, tuple[int, int]],
             answers: list[tuple[TopicPartition, dict[str, Any]]], now_ms: int) -> int:
        """Open a session holding the partitions of a full fetch and what it answered;
        its id, or 0 when there is no room (Kafka's ``maybeCreateSession``)."""
        if len(self.sessions) >= self.max_slots and not self._evict_for(len(requested), now_ms):
            return INVALID_SESSION_ID
        partitions = {}
        for tp, answer in answers:
            offset, max_bytes = requested[tp]
            partitions[tp] = CachedPartition(offset, max_bytes, answer["high_watermark"],
                                             answer["last_stable_offset"], answer["log_start_offset"])
        session_id = self._new_id()
        self.sessions[session_id] = FetchSession(session_id, principal, partitions, now_ms, now_ms)
        return session_id

    def _new_id(self) -> int:
        while True:
            candidate = self._rng.randint(1, _MAX_INT - 1)
            if candidate not in self.sessions:
                return candidate

    def _evict_for(self, size: int, now_ms: int) -> bool:
        """Make room for a new session of ``size`` partitions (Kafka's ``tryEvict``): the
        least recently used session if it is stale, else the smallest one past its first
        ``eviction_ms`` if it is smaller than the new one."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.session_id))
        victim: FetchSession | None = None
        if now_ms - lru.last_used_ms > self.eviction_ms:
            victim = lru
        else:
            old = [s for s in self.sessions.values() if now_ms - s.creation_ms > self.eviction_ms]
            if old:
                smallest = min(old, key=lambda s: (len(s.partitions), s.session_id))
                if size > len(smallest.partitions):
                    victim = smallest
        if victim is None:
            return False
        del self.sessions[victim.session_id]
        self.evictions += 1
        return True
