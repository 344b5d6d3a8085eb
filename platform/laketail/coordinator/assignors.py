"""Kafka's partition assignors, as pure functions.

Each assignor takes the members' subscriptions (member id -> topics), the partition
count of every subscribed topic and, for the sticky one, the current ownership, and
returns member id -> sorted list of ``(topic, partition)``. Members are ordered by
member id, as Kafka's group leader orders them, so every broker computes the same
answer. A member with nothing to do gets an empty list (more members than partitions
leaves the extras idle).

* ``range`` -- per topic, contiguous ranges; the first ``partitions % members``
  members get one extra (Kafka's ``RangeAssignor``).
* ``roundrobin`` -- every subscribed partition, sorted by topic then partition, dealt
  in turn to the members subscribed to its topic (``RoundRobinAssignor``).
* ``cooperative-sticky`` -- balanced (counts differ by at most one among members with
  the same subscription) while keeping as many partitions as possible with their
  current owner; a partition that changes owner is first only revoked, and handed to
  its new owner in the next rebalance (``CooperativeStickyAssignor`` with the
  incremental cooperative protocol). :func:`cooperative_sticky` returns the assignment
  for this generation and whether a follow-up rebalance is needed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, list[TopicPartition]]

ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


def _empty(members: Mapping[str, list[str]]) -> Assignment:
    return {member: [] for member in sorted(members)}


def range_assign(subscriptions: Mapping[str, list[str]], partitions: Mapping[str, int]) -> Assignment:
    out = _empty(subscriptions)
    by_topic: dict[str, list[str]] = defaultdict(list)
    for member in sorted(subscriptions):
        for topic in set(subscriptions[member]):
            by_topic[topic].append(member)
    for topic, members in sorted(by_topic.items()):
        count = partitions.get(topic, 0)
        each, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = each + (1 if i < extra else 0)
            out[member].extend((topic, p) for p in range(start, start + size))
            start += size
    return {m: sorted(tps) for m, tps in out.items()}


def roundrobin_assign(subscriptions: Mapping[str, list[str]], partitions: Mapping[str, int]) -> Assignment:
    out = _empty(subscriptions)
    members = sorted(subscriptions)
    topics = sorted({t for subs in subscriptions.values() for t in subs})
    turn = 0
    for topic in topics:
        for p in range(partitions.get(topic, 0)):
            # the next member in the circle that subscribes to this topic
            for _ in range(len(members)):
                member = members[turn % len(members)]
                turn += 1
                if topic in subscriptions[member]:
                    out[member].append((topic, p))
                    break
    return {m: sorted(tps) for m, tps in out.items()}


def sticky_assign(
    subscriptions: Mapping[str, list[str]],
    partitions: Mapping[str, int],
    owned: Mapping[str, list[TopicPartition]],
) -> Assignment:
    """A balanced assignment that moves as few partitions as it can."""
    members = sorted(subscriptions)
    out: Assignment = {m: [] for m in members}
    if not members:
        return out
    wanted = {(t, p) for subs in (set(s) for s in subscriptions.values()) for t in subs
              for p in range(partitions.get(t, 0))}
    # Keep what members still own and may still consume; a partition claimed twice
    # (a zombie's stale claim) stays with the first member in order.
    taken: set[TopicPartition] = set()
    for member in members:
        for tp in sorted(owned.get(member, [])):
            if tp in wanted and tp not in taken and tp[0] in subscriptions[member]:
                out[member].append(tp)
                taken.add(tp)
    free = sorted(wanted - taken)

    def eligible(tp: TopicPartition) -> list[str]:
        return [m for m in members if tp[0] in subscriptions[m]]

    # Give each free partition to the least loaded eligible member.
    for tp in free:
        candidates = eligible(tp)
        if candidates:
            target = min(candidates, key=lambda m: (len(out[m]), m))
            out[target].append(tp)
    # Rebalance: move from the most to the least loaded while that helps.
    moved = True
    while moved:
        moved = False
        for donor in sorted(members, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[donor], reverse=True):
                candidates = [m for m in eligible(tp) if len(out[m]) + 1 < len(out[donor])]
                if candidates:
                    target = min(candidates, key=lambda m: (len(out[m]), m))
                    out[donor].remove(tp)
                    out[target].append(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: sorted(tps) for m, tps in out.items()}


def cooperative_sticky(
    subscriptions: Mapping[str, list[str]],
    partitions: Mapping[str, int],
    owned: Mapping[str, list[TopicPartition]],
) -> tuple[Assignment, bool]:
    """This generation's assignment under the incremental cooperative protocol.

    A partition whose target owner differs from a current owner is withheld (its old
    owner revokes it; nobody gets it yet); the returned flag says a follow-up
    rebalance must hand it over.
    """
    target = sticky_assign(subscriptions, partitions, owned)
    current_owner: dict[TopicPartition, str] = {}
    for member, tps in owned.items():
        for tp in tps:
            current_owner.setdefault(tp, member)
    out: Assignment = {}
    follow_up = False
    for member, tps in target.items():
        keep = []
        for tp in tps:
            previous = current_owner.get(tp)
            if previous is not None and previous != member and previous in subscriptions:
                follow_up = True  # still owned by a live member that must revoke it first
                continue
            keep.append(tp)
        out[member] = keep
    return out, follow_up


def assign(
    strategy: str,
    subscriptions: Mapping[str, list[str]],
    partitions: Mapping[str, int],
    owned: Mapping[str, list[TopicPartition]] | None = None,
) -> tuple[Assignment, bool]:
    """Dispatch on ``partition.assignment.strategy``; returns (assignment, follow_up)."""
    if strategy == "range":
        return range_assign(subscriptions, partitions), False
    if strategy == "roundrobin":
        return roundrobin_assign(subscriptions, partitions), False
    if strategy == "cooperative-sticky":
        return cooperative_sticky(subscriptions, partitions, owned or {})
    raise ValueError(f"unknown partition.assignment.strategy '{strategy}'")
