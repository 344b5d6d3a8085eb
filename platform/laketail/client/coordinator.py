"""The consumer's group membership: join, sync, heartbeat, rebalance, leave.

Role: Kafka's consumer-side group protocol over laketail's ``/v1/groups`` endpoints,
on one background thread per subscribed consumer. The broker's coordinator computes
the assignment, so a member only joins (``POST .../join``, which blocks until the
rebalance completes), syncs (``.../sync`` -> its partitions) and heartbeats
(``.../heartbeat`` every ``heartbeat.interval.ms``).

Rebalances are handed to the application's thread, as librdkafka does: the thread
posts a :class:`RebalanceEvent` and the consumer's ``poll()`` runs ``on_revoke`` /
``on_assign`` / ``on_lost`` and applies the change, then marks the event done.

* Eager protocols (``range``, ``roundrobin``): when a rebalance starts
  (REBALANCE_IN_PROGRESS), the whole assignment is revoked -- and the thread waits
  until ``poll()`` has run the revocation -- before rejoining; the new assignment is
  then assigned whole.
* ``cooperative-sticky``: the member rejoins at once, keeping its partitions; after
  the sync only the partitions that moved away are revoked and only the new ones are
  assigned (the broker hands moved partitions over in a follow-up rebalance).
* ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID mean the assignment is *lost* (``on_lost``
  if given, else ``on_revoke``): no commit for it, then rejoin.
* ``max.poll.interval.ms`` without a ``poll()``: the member leaves the group, its
  assignment is lost and ``poll()`` reports ``_MAX_POLL_EXCEEDED``; the next
  ``poll()`` rejoins.

While waiting for the application the thread keeps heartbeating, so the broker does
not expire the member in the meantime. Topics given as ``^regex`` are matched
against the cluster's topics every ``topic.metadata.refresh.interval.ms``; a change
of the matched set rejoins. Auto-commit (``enable.auto.commit``) runs here too,
every ``auto.commit.interval.ms``, through the consumer's ``commit_stored``.

Thread-safety: the membership fields are read by the application thread under
``cond``; only this thread changes them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Literal

from laketail.client.config import ConsumerConfig
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.gateway import Gateway
from laketail.client.message import Message, TopicPartition, error_message
from laketail.topic_pattern import TopicPattern

log = logging.getLogger(__name__)

TP = tuple[str, int]
REBALANCE_IN_PROGRESS = 27
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25


@dataclass
class RebalanceEvent:
    """A change of assignment for ``poll()`` to run on the application's thread."""

    kind: Literal["assign", "revoke", "lost"]
    partitions: list[TopicPartition]
    cooperative: bool
    done: threading.Event = field(default_factory=threading.Event)


Post = Callable[["RebalanceEvent | Message"], None]


class ConsumerCoordinator:
    """One consumer's membership in its group."""

    def __init__(self, config: ConsumerConfig, gateway: Gateway, cond: threading.Condition, post: Post,
                 commit_stored: Callable[[], None], last_poll: Callable[[], float]) -> None:
        assert config.group_id
        self.config = config
        self.group = config.group_id
        self.gateway = gateway
        self.cond = cond
        self.post = post
        self.commit_stored = commit_stored
        self.last_poll = last_poll
        self.member_id = ""
        self.generation_id = -1
        self.protocol = ""
        self.owned: set[TP] = set()
        self._subscription: list[str] = []
        self._topics: list[str] = []
        self._need_join = False
        self._pending: list[RebalanceEvent] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._poll_exceeded = False
        self._exceeded_at = 0.0
        self._rejoin_requested = False
        self._join_failures = 0
        self._last_join_error: int | None = None
        self._next_heartbeat = 0.0
        self._next_commit = 0.0
        self._next_refresh = 0.0
        self.hb_s = config.heartbeat_interval_ms / 1000.0

    # -- control (application thread) -----------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        with self.cond:
            self._subscription = list(topics)
            self._next_refresh = 0.0
            self._rejoin_requested = True
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"laketail-group-{self.group}", daemon=True)
            self._thread.start()
        self._wake.set()

    @property
    def cooperative(self) -> bool:
        return self.protocol == "cooperative-sticky"

    def stop(self, leave: bool = True) -> None:
        """Stop the thread and leave the group (the caller revoked and committed first)."""
        self._stop.set()
        self._wake.set()
        with self.cond:
            for event in self._pending:
                event.done.set()
            member = self.member_id
        if leave and member:
            try:
                self.gateway.request("POST", f"/v1/groups/{self.group}/leave", json={"member_id": member},
                                     timeout_s=5.0)
            except KafkaException as exc:
                log.debug("leave %s: %s", self.group, exc)
        with self.cond:
            self.member_id, self.generation_id, self.owned = "", -1, set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)
        self._thread = None

    def identity(self) -> tuple[int, str]:
        """(generation_id, member_id) for commits: (-1, "") outside a stable membership."""
        with self.cond:
            return (self.generation_id, self.member_id) if self.member_id else (-1, "")

    # -- the thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._turn()
            except Exception:  # never let one bad turn end the membership
                log.exception("group %s member %s: coordinator turn failed", self.group, self.member_id or "(none)")
                self._sleep(self.config.retry_backoff_ms / 1000.0)

    def _turn(self) -> None:
        now = time.monotonic()
        if self._poll_exceeded:
            if self.last_poll() > self._exceeded_at:
                self._poll_exceeded = False
                self._need_join = True
            else:
                self._sleep(0.1)
                return
        if self._refresh_due(now):
            self._refresh_topics(now)
        if self._rejoin_requested:
            self._rejoin_requested = False
            self._rejoin()
        if self._need_join:
            self._join()
            return
        if now - self.last_poll() > self.config.max_poll_interval_ms / 1000.0 and self.member_id:
            self._leave_for_poll_interval()
            return
        if now >= self._next_heartbeat:
            self._heartbeat()
            if self._need_join:  # the heartbeat said rejoin: do it now, not after a sleep
                return
        if self.config.enable_auto_commit and now >= self._next_commit:
            self._next_commit = now + self.config.auto_commit_interval_ms / 1000.0
            self._auto_commit()
        wake_at = self._next_heartbeat
        if self.config.enable_auto_commit:
            wake_at = min(wake_at, self._next_commit)
        self._sleep(max(0.0, wake_at - time.monotonic()))

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(min(seconds, 0.5))
        self._wake.clear()

    def _sleep_for(self, seconds: float) -> None:
        """Sleep the whole time unless stopped."""
        self._stop.wait(seconds)

    # -- membership ----------------------------------------------------------------------------------

    def _join(self) -> None:
        self._await_app()
        if self._stop.is_set():
            return
        body = {
            "member_id": self.member_id,
            "client_id": self.config.client_id,
            "topics": self._topics,
            "strategies": list(self.config.partition_assignment_strategy),
            "session_timeout_ms": self.config.session_timeout_ms,
            "rebalance_timeout_ms": self.config.max_poll_interval_ms,
            "owned": [{"topic": t, "partition": p} for t, p in sorted(self.owned)],
        }
        long_s = self.config.max_poll_interval_ms / 1000.0 + self.config.socket_timeout_ms / 1000.0
        try:
            joined = self.gateway.post_json(f"/v1/groups/{self.group}/join", body, timeout_s=long_s)
            with self.cond:
                self.member_id = joined["member_id"]
                self.generation_id = joined["generation_id"]
                self.protocol = joined.get("protocol") or ""
            synced = self.gateway.post_json(
                f"/v1/groups/{self.group}/sync",
                {"generation_id": self.generation_id, "member_id": self.member_id},
            )
        except KafkaException as exc:
            self._join_failed(exc.args[0])
            return
        self._need_join = False
        self._join_failures, self._last_join_error = 0, None
        now = time.monotonic()
        self._next_heartbeat = now + self.hb_s
        self._next_commit = max(self._next_commit, now + self.config.auto_commit_interval_ms / 1000.0)
        self._assigned({(a["topic"], a["partition"]) for a in synced.get("assignment", [])})

    def _join_failed(self, err: KafkaError) -> None:
        code = err.code()
        if code == UNKNOWN_MEMBER_ID:
            self._lose("unknown member")
            with self.cond:
                self.member_id, self.generation_id = "", -1
            return
        if code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
            return  # join again at once
        if self._stop.is_set():
            return
        if not err.retriable() and err.code() != self._last_join_error:
            self.post(error_message(err))  # each new error once, as librdkafka's error events
        self._last_join_error = err.code()
        self._join_failures += 1
        backoff = self.config.retry_backoff_ms / 1000.0 * 2 ** min(self._join_failures, 6)
        self._sleep_for(min(backoff, 5.0))

    def _assigned(self, new: set[TP]) -> None:
        old = set(self.owned)
        if self.cooperative:
            revoked = old - new
            if revoked:
                self._post(RebalanceEvent("revoke", _tps(revoked), True))
            self._post(RebalanceEvent("assign", _tps(new - old), True))
        else:
            self._post(RebalanceEvent("assign", _tps(new), False))
        with self.cond:
            self.owned = new

    def _heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + self.hb_s
        try:
            self.gateway.post_json(
                f"/v1/groups/{self.group}/heartbeat",
                {"generation_id": self.generation_id, "member_id": self.member_id},
            )
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == REBALANCE_IN_PROGRESS:
                self._rejoin()
            elif code == ILLEGAL_GENERATION:
                self._lose("illegal generation")
                self._need_join = True
            elif code == UNKNOWN_MEMBER_ID:
                self._lose("unknown member")
                with self.cond:
                    self.member_id, self.generation_id = "", -1
                self._need_join = True
            else:
                log.debug("heartbeat %s: %s", self.group, exc)

    def _rejoin(self) -> None:
        """A rebalance started: eager protocols revoke everything first."""
        if not self.cooperative and self.owned:
            self._post(RebalanceEvent("revoke", _tps(self.owned), False))
            with self.cond:
                self.owned = set()
        self._need_join = True

    def _lose(self, why: str) -> None:
        log.info("group %s: assignment lost (%s)", self.group, why)
        if self.owned:
            self._post(RebalanceEvent("lost", _tps(self.owned), self.cooperative))
        with self.cond:
            self.owned = set()

    def _leave_for_poll_interval(self) -> None:
        log.warning("group %s: max.poll.interval.ms exceeded; leaving the group", self.group)
        try:
            self.gateway.request("POST", f"/v1/groups/{self.group}/leave", json={"member_id": self.member_id})
        except KafkaException as exc:
            log.debug("leave %s: %s", self.group, exc)
        self._lose("max.poll.interval.ms")
        with self.cond:
            self.member_id, self.generation_id = "", -1
        self.post(error_message(local_error(
            "_MAX_POLL_EXCEEDED",
            f"Application maximum poll interval ({self.config.max_poll_interval_ms}ms) exceeded by the application",
        )))
        self._poll_exceeded = True
        self._exceeded_at = time.monotonic()

    # -- waiting for the application ------------------------------------------------------------------

    def _post(self, event: RebalanceEvent) -> None:
        with self.cond:
            self._pending.append(event)
        self.post(event)

    def _await_app(self) -> None:
        """Wait (heartbeating) until ``poll()`` has run every posted rebalance event."""
        while not self._stop.is_set():
            with self.cond:
                self._pending = [e for e in self._pending if not e.done.is_set()]
                if not self._pending:
                    return
                first = self._pending[0]
            if time.monotonic() >= self._next_heartbeat and self.member_id:
                self._next_heartbeat = time.monotonic() + self.hb_s
                try:
                    self.gateway.post_json(f"/v1/groups/{self.group}/heartbeat",
                                           {"generation_id": self.generation_id, "member_id": self.member_id})
                except KafkaException:
                    pass  # REBALANCE_IN_PROGRESS is expected; the join tells the rest
            first.done.wait(0.1)

    # -- subscriptions and commits --------------------------------------------------------------------

    def _refresh_due(self, now: float) -> bool:
        return now >= self._next_refresh

    def _refresh_topics(self, now: float) -> None:
        self._next_refresh = now + self.config.metadata_max_age_ms / 1000.0
        with self.cond:
            subscription = list(self._subscription)
        patterns = [TopicPattern(s) for s in subscription if s.startswith("^")]
        topics = sorted({s for s in subscription if not s.startswith("^")})
        if patterns:
            try:
                names = self.gateway.get_json("/topics")
            except KafkaException as exc:
                log.debug("topic list for %s: %s", self.group, exc)
                self._next_refresh = now + self.config.retry_backoff_ms / 1000.0
                return
            topics = sorted(set(topics) | {n for n in names if any(p.search(n) for p in patterns)})
        if topics != self._topics:
            self._topics = topics
            if self.member_id and not self._need_join:
                self._rejoin()

    def _auto_commit(self) -> None:
        try:
            self.commit_stored()
        except KafkaException as exc:
            log.debug("auto commit %s: %s", self.group, exc)


def _tps(tps: set[TP]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in sorted(tps)]
