"""The cluster image: brokers and partition registrations, as the controller sees them.

A :class:`PartitionRegistration` is Kafka's partition record: the ordered replica list
(the first is the preferred leader), the leader (-1 when the partition is offline), the
leader epoch (bumped by every election), the ISR and the partition epoch (bumped by
every change, so a leader's ISR change made from a stale view is refused).

The controller sends the whole image in heartbeat answers whenever its ``version``
moved; it is small (a few rows per partition).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

NO_LEADER = -1


@dataclass
class BrokerRegistration:
    broker_id: int
    url: str
    incarnation: str
    alive: bool = True
    registered_ms: int = 0
    #: The inter-broker listener's URL (``url`` is the client listener's); "" when one
    #: listener serves both. Peers are called at :attr:`peer_url` only.
    broker_url: str = ""
    #: The broker's other advertised listeners, Kafka's ``NAME://host:port,...`` form
    #: (the Kafka-protocol listeners, whose Metadata answers list every broker's); the
    #: cluster only carries them.
    endpoints: str = ""

    @property
    def peer_url(self) -> str:
        return self.broker_url or self.url


@dataclass
class PartitionRegistration:
    topic: str
    partition: int
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER


@dataclass
class ClusterImage:
    version: int = 0
    controller_id: int = NO_LEADER
    controller_epoch: int = 0
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, dict] = field(default_factory=dict)  # name -> TopicInfo fields
    partitions: dict[tuple[str, int], PartitionRegistration] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "controller_id": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "brokers": [asdict(b) for b in self.brokers.values()],
            "topics": list(self.topics.values()),
            "partitions": [asdict(p) for p in self.partitions.values()],
        }

    @classmethod
    def from_json(cls, doc: dict) -> "ClusterImage":
        brokers = {b["broker_id"]: BrokerRegistration(**b) for b in doc["brokers"]}
        partitions = {}
        for raw in doc["partitions"]:
            reg = PartitionRegistration(**raw)
            partitions[(reg.topic, reg.partition)] = reg
        return cls(
            version=doc["version"],
            controller_id=doc["controller_id"],
            controller_epoch=doc["controller_epoch"],
            brokers=brokers,
            topics={t["name"]: t for t in doc["topics"]},
            partitions=partitions,
        )

    def isr_changes(self, newer: "ClusterImage", leader: int) -> tuple[int, int]:
        """``(shrinks, expands)`` from this image to ``newer`` among the partitions
        ``leader`` leads in ``newer`` (Kafka counts them on the leader): an ISR that
        lost a member shrank, one that gained a member expanded (both when it swapped)."""
        shrinks = expands = 0
        for key, reg in newer.partitions.items():
            old = self.partitions.get(key)
            if old is None or reg.leader != leader:
                continue
            before, after = set(old.isr), set(reg.isr)
            shrinks += bool(before - after)
            expands += bool(after - before)
        return shrinks, expands

    def live_brokers(self) -> list[int]:
        return sorted(b.broker_id for b in self.brokers.values() if b.alive)


def assign_replicas(
    partitions: int, replication_factor: int, live: list[int], start: int = 0
) -> list[list[int]]:
    """Replica lists for a new topic: leaders round-robin over the live brokers from
    ``start`` (so successive topics spread their leaders too), followers the next
    brokers in order. Each list has distinct brokers; the first is the leader."""
    ordered = sorted(live)
    n = len(ordered)
    out = []
    for p in range(partitions):
        first = (start + p) % n
        out.append([ordered[(first + i) % n] for i in range(replication_factor)])
    return out
