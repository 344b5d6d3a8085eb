"""What the tierer needs from the rest of the broker, and nothing more.

Role: the :class:`~laketail.storage.tierer.Tierer` moves records from the hot logs
(:class:`~laketail.storage.log_manager.LogManager`, a storage part it is given as is)
into the topics' Delta tables (:class:`~laketail.storage.table_reader.TableReader`,
likewise). From outside storage it reads only the topics and their configs and who
leads what: these two ports. The :class:`~laketail.broker.Broker` (the composition
root) implements both and is passed for them.

Threads: :class:`TopicConfigs` is called on the event loop thread. The
:class:`LeadershipView` is also called from the tierer's worker thread (one per
topic pass): its answers are plain reads of dicts the event loop replaces, safe to
call from any thread, and may be one step stale (a tier commit then fails on the
leader epoch it records in the table, see ``tierer.LeaderFenced``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from laketail.config import TopicConfig
    from laketail.storage.partition_log import PartitionLog


class TopicConfigs(Protocol):
    """The topics this broker knows and their effective configs (event loop thread)."""

    def list_topics(self, include_internal: bool = True) -> list[str]:
        """Every topic name, sorted."""
        ...

    def topic_config(self, name: str) -> TopicConfig:
        """The topic's effective config (defaults filled in). Raises
        UNKNOWN_TOPIC_OR_PARTITION for a topic that is gone (deleted meanwhile)."""
        ...


class LeadershipView(Protocol):
    """Which partitions this broker leads now (any thread; never raises)."""

    def leads(self, topic: str, partition: int) -> bool:
        """Whether this broker leads the partition and is not fenced."""
        ...

    def leader_epoch(self, plog: PartitionLog) -> int | None:
        """The leader epoch at which this broker leads ``plog``'s partition with exactly
        this replica (``plog``), or None when it does not (a follower, fenced, or the
        replica was replaced meanwhile): only a leader tiers."""
        ...
