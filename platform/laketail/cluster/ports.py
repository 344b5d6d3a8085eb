"""What the cluster parts need from the rest of the broker, and nothing more.

Role: the :class:`~laketail.cluster.node.ClusterNode` (membership), its
:class:`~laketail.cluster.replicas.ReplicaManager` (leading and following) and the
:class:`~laketail.cluster.controller.Controller` act on this broker's storage through
one port, :class:`ClusterHost`: hooks to apply a metadata image, open a partition's
replica, reload the catalog, clear a topic's leftovers, take over or give up the coordinators and
schedule tiering. The storage parts themselves (hot logs, tables, catalog) are handed
over as they are. The :class:`~laketail.broker.Broker` (the composition root)
implements the port and is passed for it.

Threads: every method is called on the event loop thread; the ones that do disk or
Delta work say so and are run by the caller with ``asyncio.to_thread``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from laketail.catalog import Catalog
    from laketail.cluster.metadata import ClusterImage
    from laketail.config import BrokerSettings
    from laketail.storage.log_manager import LogManager
    from laketail.storage.partition_log import PartitionLog
    from laketail.storage.table_reader import TableReader


class ClusterHost(Protocol):
    """The broker as the cluster parts see it."""

    @property
    def settings(self) -> BrokerSettings: ...

    @property
    def catalog(self) -> Catalog:
        """Topics and configs (``_system/topics``); the controller writes it, in worker threads."""
        ...

    @property
    def logs(self) -> LogManager:
        """This broker's replicas (hot logs), by (topic, partition)."""
        ...

    @property
    def tables(self) -> TableReader:
        """The topics' Delta tables (tiered offsets; the controller creates them)."""
        ...

    async def allocate_producer_ids(self, size: int, at_least: int = 0) -> tuple[int, int]:
        """A durable block ``(first, end)`` of producer ids (``_system/producer_ids``) for
        the internal identities of forwarded appends (``cluster/forwarding.py``)."""
        ...

    def take_over_coordinators(self) -> None:
        """This broker became the controller: its group and transaction coordinators
        refuse requests (COORDINATOR_LOAD_IN_PROGRESS) until they have loaded their
        internal partitions to the high watermark, retried in the background until that
        succeeds. Returns at once."""
        ...

    def give_up_coordinators(self) -> None:
        """This broker was deposed as controller: its coordinators stop answering
        (NOT_COORDINATOR). Returns at once."""
        ...

    async def apply_topics(self, image: ClusterImage) -> None:
        """Make the broker's topics those of ``image`` (called by the node under its apply
        lock, before the replica manager applies the partitions): new ones known, configs
        current, deleted ones and their local replicas gone."""
        ...

    def has_topic(self, name: str) -> bool:
        """Whether the broker knows the topic (from the last image applied)."""
        ...

    async def open_partition(self, topic: str, partition: int, replicated: bool) -> PartitionLog:
        """This broker's replica of the partition, opened and recovered on first use (the
        same object afterwards). A ``replicated`` log reopens with its high watermark at
        what the table holds. Raises UNKNOWN_TOPIC_OR_PARTITION for an unknown topic."""
        ...

    def remove_leftovers(self, name: str) -> None:
        """Blocking (run in a worker thread): delete what a topic of this name left
        behind (its table, its hot log directories) before the name is created again."""
        ...

    def schedule_tiering(self, topic: str) -> None:
        """Tier the topic at the tierer's next pass (a new leader with untiered records)."""
        ...


class LeadershipListener(Protocol):
    """Told when this broker takes up or gives up a partition's leadership (Kafka's
    metadata publisher calls the group and transaction coordinators' ``onElection`` /
    ``onResignation`` so): registered in :attr:`ReplicaManager.listeners
    <laketail.cluster.replicas.ReplicaManager.listeners>`, called on the event loop from
    the apply of a cluster image, for every partition (a listener picks its topics). It
    must return at once (schedule its work) and not raise; one that raises is logged."""

    def on_election(self, topic: str, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``topic-partition`` at ``leader_epoch``."""
        ...

    def on_resignation(self, topic: str, partition: int, leader_epoch: int | None) -> None:
        """This broker no longer leads ``topic-partition``: ``leader_epoch`` is the
        epoch of the registration that moved it (another leader, or none), None when
        the partition is gone (its topic deleted)."""
        ...
