"""The group coordinator: members, generations, heartbeats, rebalances, offset commits.

Role: Kafka's classic consumer-group protocol, with the assignment computed by the
coordinator (the members' preferred ``partition.assignment.strategy`` that all of
them support, first by the leader's order) instead of by a leader member, so REST
consumer instances and the Python client need no assignor of their own.

States (Kafka's names)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> Stable
      ^                    ^    |                                          |
      |                    |    +---- last member gone ---> Empty          |
      +--- last member ----+--------- join / leave / session expiry -------+

* ``join`` adds or refreshes a member and (re)starts a rebalance; it returns when the
  rebalance completes with the new generation, the member id, the leader and the
  chosen protocol. A rebalance completes once every member has rejoined, or at the
  rebalance timeout (the largest ``max.poll.interval.ms``) without those that did not.
  An empty group's first rebalance waits ``group.initial.rebalance.delay.ms`` for
  more members.
* ``sync`` returns the member's assignment for its generation.
* ``heartbeat`` keeps a member alive (``session.timeout.ms``) and tells it to rejoin
  (REBALANCE_IN_PROGRESS) or that its generation is stale (ILLEGAL_GENERATION).
* ``commit`` follows Kafka's checks: generation -1 commits only into a group with no
  members; otherwise UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, and REBALANCE_IN_PROGRESS
  while a completed rebalance is not yet synced.
* ``delete`` (DeleteGroups) tombstones an empty group's offsets and forgets it.
* ``cooperative-sticky``: partitions that must move are revoked in one generation and
  handed over in the next, which the coordinator starts once every member has synced.

Time: deadlines are tasks on a :class:`~laketail.coordinator.timer.CoordinatorTimer`
over the injected clock, as on Kafka's coordinator timer: each member's session (put
back at ``last heartbeat + session.timeout.ms`` when it comes due and the member was
heard from since, or is waiting in a join), each rebalance's deadline and initial delay.
``tick()`` runs the tasks due, and starts a rebalance when a subscribed topic appears,
goes or changes its partition count (a check of the topic directory, not a deadline).
The Broker's housekeeping task calls it; tests advance a ``ManualClock`` and call it.
Thread-safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from laketail.clock import Clock
from laketail.coordinator.assignors import ASSIGNORS, assign
from laketail.coordinator.offsets import CommittedOffset, OffsetStore, TopicPartition
from laketail.coordinator.timer import CoordinatorTimer
from laketail.errors import (
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    NonEmptyGroup,
    NotCoordinator,
    RebalanceInProgress,
    UnknownMemberId,
    UnknownTopicOrPartition,
)

if TYPE_CHECKING:
    from laketail.coordinator.ports import TopicDirectory

log = logging.getLogger(__name__)

GroupState = Literal["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: list[str]
    strategies: list[str]
    owned: list[TopicPartition] = field(default_factory=list)
    last_heartbeat: float = 0.0
    join_waiter: asyncio.Future | None = None
    assignment: list[TopicPartition] = field(default_factory=list)
    synced_generation: int = -1


@dataclass(frozen=True)
class JoinResult:
    generation_id: int
    member_id: str
    leader_id: str
    protocol: str
    members: list[str]


@dataclass
class Group:
    group_id: str
    state: GroupState = "Empty"
    generation_id: int = 0
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline: float | None = None
    initial_delay_until: float | None = None
    follow_up: bool = False
    metadata: dict[str, int] = field(default_factory=dict)  # partition counts the assignment used

    def pending_joins(self) -> int:
        return sum(1 for m in self.members.values() if m.join_waiter is not None)


class GroupCoordinator:
    """Kafka's group membership and rebalances (see the module docstring).

    Parts (passed in by the broker): ``topics`` -- partition counts of the subscribed
    topics (:class:`~laketail.coordinator.ports.TopicDirectory`); ``offsets`` -- the
    sibling offset store commits go to; ``clock`` -- session and rebalance deadlines, run
    by ``timer`` (default: a :class:`CoordinatorTimer` on ``clock``). Event loop thread only."""

    def __init__(
        self,
        topics: "TopicDirectory",
        offsets: OffsetStore,
        clock: Clock,
        *,
        min_session_timeout_ms: int = 6_000,
        max_session_timeout_ms: int = 1_800_000,
        initial_rebalance_delay_ms: int = 3_000,
        timer: CoordinatorTimer | None = None,
    ) -> None:
        self.topics = topics
        self.offsets = offsets
        self.clock = clock
        self.timer = timer if timer is not None else CoordinatorTimer(clock)
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._groups: dict[str, Group] = {}

    # -- queries ------------------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def list_groups(self) -> list[Group]:
        names = set(self._groups) | set(self.offsets.groups())
        return [self._groups.get(n) or Group(n) for n in sorted(names)]

    def describe(self, group_id: str) -> Group:
        return self._groups.get(group_id) or Group(
            group_id, state="Dead" if group_id not in self.offsets.groups() else "Empty"
        )

    def active_groups(self) -> set[str]:
        return {g.group_id for g in self._groups.values() if g.members}

    # -- membership ---------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        topics: list[str],
        strategies: list[str] | tuple[str, ...] = ("range", "cooperative-sticky"),
        client_id: str = "laketail",
        client_host: str = "",
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        owned: list[TopicPartition] | None = None,
    ) -> JoinResult:
        if not group_id:
            raise InvalidGroupId("group.id must not be empty")
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            raise InvalidSessionTimeout(
                f"session.timeout.ms={session_timeout_ms} is outside "
                f"[{self.min_session_timeout_ms}, {self.max_session_timeout_ms}]"
            )
        strategies = [s for s in strategies if s in ASSIGNORS]
        if not strategies:
            raise InconsistentGroupProtocol(f"no supported partition.assignment.strategy among {ASSIGNORS}")
        self.offsets.check_group(group_id)  # its partition runs here and is loaded
        group = self._groups.setdefault(group_id, Group(group_id))
        now = self.clock.monotonic()
        if member_id:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberId(f"member '{member_id}' is not in group '{group_id}'")
            changed = sorted(member.topics) != sorted(topics) or member.strategies != list(strategies)
            member.topics, member.strategies = list(topics), list(strategies)
            member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            if owned is not None:
                member.owned = list(owned)
            member.last_heartbeat = now
            if group.state == "Stable" and not changed and not group.follow_up:
                return self._result(group, member)
        else:
            member_id = f"{client_id}-{uuid.uuid4()}"
            member = Member(
                member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                list(topics), list(strategies), list(owned or []), last_heartbeat=now,
            )
            group.members[member_id] = member
            self._schedule_session(group, member)
        if member.join_waiter is not None and not member.join_waiter.done():
            # A newer join from the same member supersedes the pending one.
            member.join_waiter.set_exception(
                RebalanceInProgress(f"member '{member.member_id}' joined again; this join is superseded")
            )
        member.join_waiter = asyncio.get_running_loop().create_future()
        waiter = member.join_waiter
        self._prepare_rebalance(group, now)
        self._maybe_complete(group, now)
        return await waiter

    def _prepare_rebalance(self, group: Group, now: float) -> None:
        if group.state != "PreparingRebalance":
            if group.state == "Empty" and self.initial_rebalance_delay_ms > 0:
                group.initial_delay_until = now + self.initial_rebalance_delay_ms / 1000.0
            group.state = "PreparingRebalance"
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            group.rebalance_deadline = now + timeout / 1000.0
            group_id = group.group_id
            self.timer.schedule(("rebalance", group_id), group.rebalance_deadline,
                                lambda: self._rebalance_deadline(group_id))
            if group.initial_delay_until is not None:
                self.timer.schedule(("initial-delay", group_id), group.initial_delay_until,
                                    lambda: self._rebalance_deadline(group_id))

    def _rebalance_deadline(self, group_id: str) -> None:
        """A rebalance's initial delay or deadline came due: complete it if it can."""
        group = self._groups.get(group_id)
        if group is not None and group.state == "PreparingRebalance":
            now = self.clock.monotonic()
            overdue = group.rebalance_deadline is not None and now >= group.rebalance_deadline
            self._maybe_complete(group, now, deadline_passed=overdue)

    def _schedule_session(self, group: Group, member: Member) -> None:
        group_id, member_id = group.group_id, member.member_id
        self.timer.schedule(("session", group_id, member_id),
                            member.last_heartbeat + member.session_timeout_ms / 1000.0,
                            lambda: self._session_deadline(group_id, member_id))

    def _session_deadline(self, group_id: str, member_id: str) -> None:
        """A member's session came due: it is removed if it has been silent longer than
        ``session.timeout.ms`` and is not waiting in a join; otherwise the task is put
        back at its last heartbeat's deadline (a member waiting in a join is checked at
        every poll, as long as it waits)."""
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return
        waiting = member.join_waiter is not None
        if not waiting and self.clock.monotonic() - member.last_heartbeat > member.session_timeout_ms / 1000.0:
            self._remove(group, member, "stopped heartbeating (session.timeout.ms)")
        else:
            self._schedule_session(group, member)

    def _maybe_complete(self, group: Group, now: float, deadline_passed: bool = False) -> None:
        if group.state != "PreparingRebalance":
            return
        if group.initial_delay_until is not None and now < group.initial_delay_until and not deadline_passed:
            return
        if not deadline_passed and group.pending_joins() < len(group.members):
            return
        for member_id in [m for m, member in group.members.items() if member.join_waiter is None]:
            log.info("group %s: member %s did not rejoin in time; removing it", group.group_id, member_id)
            del group.members[member_id]
            self.timer.cancel(("session", group.group_id, member_id))
        group.initial_delay_until = None
        group.rebalance_deadline = None
        self._cancel_rebalance_deadlines(group)
        if not group.members:
            group.state = "Empty"
            group.generation_id += 1
            group.leader_id = group.protocol = None
            return
        self._complete(group)

    def _cancel_rebalance_deadlines(self, group: Group) -> None:
        self.timer.cancel(("rebalance", group.group_id))
        self.timer.cancel(("initial-delay", group.group_id))

    def _complete(self, group: Group) -> None:
        members = list(group.members.values())
        leader = group.leader_id if group.leader_id in group.members else members[0].member_id
        common = [s for s in group.members[leader].strategies if all(s in m.strategies for m in members)]
        if not common:
            err = InconsistentGroupProtocol("members share no partition.assignment.strategy")
            for m in members:
                if m.join_waiter is not None and not m.join_waiter.done():
                    m.join_waiter.set_exception(err)
                m.join_waiter = None
                self.timer.cancel(("session", group.group_id, m.member_id))
            group.members.clear()
            group.state = "Empty"
            return
        protocol = common[0]
        partitions = {}
        for m in members:
            for topic in m.topics:
                try:
                    partitions[topic] = self.topics.topic(topic).partitions
                except UnknownTopicOrPartition:  # not created yet, or deleted: nothing to assign
                    partitions[topic] = 0
        group.metadata = dict(partitions)
        subscriptions = {m.member_id: m.topics for m in members}
        owned = {m.member_id: (m.owned or m.assignment) for m in members}
        assignment, follow_up = assign(protocol, subscriptions, partitions, owned)
        group.generation_id += 1
        group.protocol = protocol
        group.leader_id = leader
        group.follow_up = follow_up
        group.state = "Stable"
        for m in members:
            m.assignment = assignment.get(m.member_id, [])
            m.owned = []
            m.last_heartbeat = self.clock.monotonic()
            waiter, m.join_waiter = m.join_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(self._result(group, m))
        log.info("group %s: generation %d, %s, %d member(s)", group.group_id, group.generation_id,
                 protocol, len(members))

    def _result(self, group: Group, member: Member) -> JoinResult:
        return JoinResult(
            group.generation_id, member.member_id, group.leader_id or "", group.protocol or "",
            sorted(group.members) if member.member_id == group.leader_id else [],
        )

    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        self.offsets.check_group(group_id)
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if group is None or member is None:
            raise UnknownMemberId(f"member '{member_id}' is not in group '{group_id}'")
        return group, member

    def _alive(self, group_id: str, generation_id: int, member_id: str) -> tuple[Group, Member]:
        """A sign of life from a member of the current generation (sync, heartbeat)."""
        group, member = self._member(group_id, member_id)
        member.last_heartbeat = self.clock.monotonic()
        if group.state == "PreparingRebalance":
            raise RebalanceInProgress(f"group '{group_id}' is rebalancing; rejoin")
        if generation_id != group.generation_id:
            raise IllegalGeneration(f"generation {generation_id} is not the group's {group.generation_id}")
        return group, member

    def sync(self, group_id: str, generation_id: int, member_id: str) -> list[TopicPartition]:
        group, member = self._alive(group_id, generation_id, member_id)
        member.synced_generation = generation_id
        if group.follow_up and all(m.synced_generation == group.generation_id for m in group.members.values()):
            group.follow_up = False
            self._prepare_rebalance(group, self.clock.monotonic())
        return list(member.assignment)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> None:
        self._alive(group_id, generation_id, member_id)

    def leave(self, group_id: str, member_id: str) -> None:
        group, member = self._member(group_id, member_id)
        self._remove(group, member, "left the group")

    def _remove(self, group: Group, member: Member, why: str) -> None:
        log.info("group %s: member %s %s", group.group_id, member.member_id, why)
        del group.members[member.member_id]
        self.timer.cancel(("session", group.group_id, member.member_id))
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_exception(UnknownMemberId(f"member '{member.member_id}' {why}"))
        now = self.clock.monotonic()
        if not group.members:
            group.state = "Empty"
            group.generation_id += 1
            group.leader_id = group.protocol = None
            group.rebalance_deadline = None
            self._cancel_rebalance_deadlines(group)
            return
        self._prepare_rebalance(group, now)
        self._maybe_complete(group, now)

    def unload_partition(self, partition: int) -> None:
        """Kafka's ``onResignation`` for the groups of one ``__consumer_offsets``
        partition (call it with :meth:`OffsetStore.unload_partition`): their joins still
        waiting are answered NOT_COORDINATOR, their deadlines cancelled, and the groups
        forgotten here; their members find the new coordinator and rejoin there."""
        for group_id in [g for g in self._groups if self.offsets.partition_of(g) == partition]:
            group = self._groups.pop(group_id)
            self._cancel_rebalance_deadlines(group)
            for member in group.members.values():
                self.timer.cancel(("session", group_id, member.member_id))
                waiter, member.join_waiter = member.join_waiter, None
                if waiter is not None and not waiter.done():
                    waiter.set_exception(NotCoordinator(
                        f"group '{group_id}' is no longer coordinated here: find its coordinator and rejoin"))

    def resign(self) -> None:
        """This broker stops coordinating (it is shutting down): every join still waiting
        for its rebalance is answered NOT_COORDINATOR now, as Kafka's coordinator answers
        them when it unloads its groups, and the members rejoin wherever the coordinator
        is next. Without this a join waiting for a member that never rejoins (up to the
        largest ``rebalance.timeout.ms``, five minutes by default) held the stopping
        broker that long."""
        for group in self._groups.values():
            for member in group.members.values():
                waiter, member.join_waiter = member.join_waiter, None
                if waiter is not None and not waiter.done():
                    waiter.set_exception(NotCoordinator(
                        f"this broker is shutting down and no longer coordinates group '{group.group_id}'"))

    def tick(self) -> None:
        """Run the deadlines due (sessions, rebalances; :attr:`timer`), then rebalance
        every stable group whose subscribed topics changed."""
        self.timer.poll()
        now = self.clock.monotonic()
        for group in list(self._groups.values()):
            if group.state == "Stable" and group.members and self._metadata_changed(group):
                log.info("group %s: a subscribed topic appeared, went or changed its partitions; "
                         "rebalancing", group.group_id)
                self._prepare_rebalance(group, now)

    def _metadata_changed(self, group: Group) -> bool:
        """Kafka's leader rejoins when a subscribed topic's partitions change; here the
        coordinator, which assigns, notices it itself (members learn from heartbeats)."""
        for topic, count in group.metadata.items():
            try:
                now_count = self.topics.topic(topic).partitions
            except UnknownTopicOrPartition:  # deleted, or not created yet
                now_count = 0
            if now_count != count:
                return True
        return False

    # -- offsets ---------------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        offsets: dict[TopicPartition, CommittedOffset],
        *,
        generation_id: int = -1,
        member_id: str = "",
    ) -> None:
        member = self.check_member(group_id, generation_id, member_id)
        if member is not None:
            member.last_heartbeat = self.clock.monotonic()
        await self.offsets.commit(group_id, offsets)

    def check_member(self, group_id: str, generation_id: int, member_id: str) -> Member | None:
        """Kafka's checks on an offset commit (also run for offsets sent to a
        transaction with the consumer's group metadata). Generation -1 commits only
        into a group with no members; returns the committing member, if any."""
        if not group_id:
            raise InvalidGroupId("group.id must not be empty")
        group = self._groups.get(group_id)
        if generation_id < 0 and (group is None or not group.members):
            return None
        if group is None or member_id not in group.members:
            raise UnknownMemberId(f"member '{member_id}' is not in group '{group_id}'")
        if group.state == "CompletingRebalance":
            raise RebalanceInProgress(f"group '{group_id}' is completing a rebalance")
        if generation_id != group.generation_id:
            raise IllegalGeneration(
                f"commit from generation {generation_id}; the group is at {group.generation_id}"
            )
        return group.members[member_id]

    async def delete_offsets(self, group_id: str, tps: list[TopicPartition]) -> list[TopicPartition]:
        """Kafka's OffsetDelete: the group's committed offsets for ``tps`` are removed
        (tombstoned); returns those that were there. GROUP_SUBSCRIBED_TO_TOPIC, and
        nothing removed, when a member of the group is subscribed to one of the topics."""
        if not group_id:
            raise InvalidGroupId("group.id must not be empty")
        group = self._groups.get(group_id)
        subscribed = {t for m in group.members.values() for t in m.topics} if group is not None else set()
        busy = sorted({t for t, _ in tps} & subscribed)
        if busy:
            raise GroupSubscribedToTopic(
                f"group '{group_id}' has members subscribed to {', '.join(busy)}: their offsets stay"
            )
        present = [tp for tp in dict.fromkeys(tps) if self.offsets.committed(group_id, tp) is not None]
        await self.offsets.delete(group_id, present)
        return present

    def committed(self, group_id: str, tps: list[TopicPartition]) -> dict[TopicPartition, CommittedOffset | None]:
        return {tp: self.offsets.committed(group_id, tp) for tp in tps}

    async def delete(self, group_id: str) -> None:
        """Kafka's DeleteGroups: an empty group's offsets are tombstoned and the group is
        forgotten; NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND when neither
        the group nor its offsets exist."""
        group = self._groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroup(f"group '{group_id}' has {len(group.members)} member(s)")
        if group is None and group_id not in self.offsets.groups():
            raise GroupIdNotFound(f"group '{group_id}' does not exist")
        await self.offsets.delete(group_id, list(self.offsets.group_offsets(group_id)))
        if not (group := self._groups.get(group_id)) or not group.members:  # nobody joined meanwhile
            self._groups.pop(group_id, None)
