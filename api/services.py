"""What the gateway may ask of the broker, as narrow services (docs/architecture.md §3.3).

Role: routes, middleware, the console, the metrics and the v2 consumer instances call
the broker's public methods (produce, fetch, topics, partition states: the
:class:`~laketail.broker.Broker` itself) and, for everything else, one of the services
below, each naming only the methods the gateway calls. The composition root
(:func:`laketail.api.app.create_app`) hands them over as one :class:`Services`; mypy
checks there that the broker's parts satisfy them, and ``tests/test_architecture.py``
fails when gateway code reaches into a part of the Broker (``broker.groups``,
``broker.cluster`` ...) instead.

A service is a view: the coordinators, the cluster node and the table reader stay the
Broker's, built and started by it (§3.4); the gateway holds no state of theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from starlette.requests import Request

if TYPE_CHECKING:
    import httpx

    from laketail.broker import Broker
    from laketail.catalog import TopicInfo
    from laketail.cluster.metadata import ClusterImage, PartitionRegistration
    from laketail.coordinator.groups import Group, JoinResult
    from laketail.coordinator.offsets import CommittedOffset, TopicPartition
    from laketail.coordinator.transactions import SinkState, TxnMetadata, TxnState
    from laketail.schemas.registry import SchemaRegistry
    from laketail.schemas.validation import SchemaValidation
    from laketail.storage.table_check import Damage
    from laketail.storage.tier_child import TierChild
    from laketail.storage.tierer import TierFailure


class GroupService(Protocol):
    """Kafka's group coordinator: membership, assignments, committed offsets."""

    min_session_timeout_ms: int
    max_session_timeout_ms: int

    async def join(
        self, group_id: str, member_id: str, *, topics: list[str],
        strategies: list[str] | tuple[str, ...] = ..., client_id: str = ..., client_host: str = ...,
        session_timeout_ms: int = ..., rebalance_timeout_ms: int = ...,
        owned: list[TopicPartition] | None = None,
    ) -> JoinResult: ...
    def sync(self, group_id: str, generation_id: int, member_id: str) -> list[TopicPartition]: ...
    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> None: ...
    def leave(self, group_id: str, member_id: str) -> None: ...
    async def commit(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset], *,
                     generation_id: int = -1, member_id: str = "") -> None: ...
    def committed(self, group_id: str, tps: list[TopicPartition]) -> dict[TopicPartition, CommittedOffset | None]: ...
    async def delete_offsets(self, group_id: str, tps: list[TopicPartition]) -> list[TopicPartition]: ...
    def list_groups(self) -> list[Group]: ...
    def describe(self, group_id: str) -> Group: ...
    def group(self, group_id: str) -> Group | None: ...


class OffsetsView(Protocol):
    """The committed offsets as ``__consumer_offsets`` holds them (every group, read only)."""

    def committed(self, group: str, tp: TopicPartition) -> CommittedOffset | None: ...
    def groups(self) -> list[str]: ...
    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]: ...


class TransactionService(Protocol):
    """Kafka's transaction coordinator, and laketail's Spark sink batches on it (§9.5)."""

    async def init_producer_id(self, transactional_id: str | None = None, timeout_ms: int = 60000,
                               expected: tuple[int, int] | None = None) -> tuple[int, int]: ...
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> None: ...
    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          offsets: dict[TopicPartition, CommittedOffset], generation_id: int = -1,
                          member_id: str = "") -> None: ...
    async def end(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnState: ...
    def describe(self, transactional_id: str) -> TxnMetadata: ...
    async def enlist(self, sink_id: str, batch_id: int, timeout_ms: int = 60000) -> tuple[str, int, int]: ...
    async def commit_batch(self, sink_id: str, batch_id: int, transactional_ids: list[str]) -> bool: ...
    async def abort_batch(self, sink_id: str, batch_id: int) -> None: ...
    def sink(self, sink_id: str) -> SinkState: ...
    def list_transactions(self) -> list[TxnMetadata]: ...
    def transactional_id_of(self, producer_id: int) -> str | None: ...
    def check_idempotent_produce(self, producer_id: int, producer_epoch: int) -> None: ...


class ControllerService(Protocol):
    """The active controller's answers to its peers (the ``/internal/v1`` routes)."""

    async def heartbeat(self, broker_id: int, url: str, incarnation: str, leos: dict[str, int],
                        known_version: int, broker_url: str = "") -> dict: ...
    async def alter_partition(self, topic: str, partition: int, leader: int, leader_epoch: int,
                              partition_epoch: int, isr: list[int]) -> PartitionRegistration: ...
    async def alter_topic(self, name: str, configs: dict[str, str]) -> TopicInfo: ...


class ReplicaFetchService(Protocol):
    async def handle_fetch(self, replica_id: int, partitions: list[dict], max_wait_ms: int,
                           max_bytes: int) -> bytes: ...


class ClusterService(Protocol):
    """This broker's membership: the cluster image, the controller, calls to peers."""

    @property
    def broker_id(self) -> int: ...
    @property
    def image(self) -> ClusterImage: ...
    @property
    def is_controller(self) -> bool: ...
    @property
    def controller(self) -> ControllerService | None: ...
    @property
    def replicas(self) -> ReplicaFetchService: ...
    @property
    def http(self) -> httpx.AsyncClient: ...
    @property
    def isr_shrinks(self) -> int: ...
    @property
    def isr_expands(self) -> int: ...

    async def apply_image(self, image: ClusterImage) -> None: ...
    async def call_controller_raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response: ...


class TableService(Protocol):
    """The topic tables as the table reader knows them (damage found by reads)."""

    def known_damage(self, topic: str) -> dict[int, list[Damage]]: ...


class TopicConfigService(Protocol):
    @staticmethod
    def normalise_configs(configs: Mapping[str, Any]) -> dict[str, str]: ...


class TierService(Protocol):
    @property
    def child(self) -> TierChild | None: ...

    @property
    def failing(self) -> Mapping[str, TierFailure]: ...

    @property
    def pass_failures(self) -> Mapping[str, int]: ...


@dataclass(frozen=True)
class Services:
    """Every service the gateway uses, handed over by the composition root."""

    groups: GroupService
    offsets: OffsetsView
    transactions: TransactionService
    cluster: ClusterService
    tables: TableService
    topic_configs: TopicConfigService
    tier: TierService
    schemas: SchemaRegistry
    #: a follower's copy of ``__schemas`` (schema'd produce and validation off the controller)
    schema_copies: SchemaValidation | None

    @classmethod
    def of(cls, broker: Broker) -> Services:
        """The broker's parts, as the gateway sees them."""
        return cls(
            groups=broker.groups,
            offsets=broker.offsets,
            transactions=broker.transactions,
            cluster=broker.cluster,
            tables=broker.tables,
            topic_configs=broker.catalog,
            tier=broker.tierer,
            schemas=broker.schemas,
            schema_copies=broker.produce_path.schema_validation,
        )


def services_of(request: Request) -> Services:
    return request.app.state.services


def groups_of(request: Request) -> GroupService:
    return request.app.state.services.groups


def transactions_of(request: Request) -> TransactionService:
    return request.app.state.services.transactions


def cluster_of(request: Request) -> ClusterService:
    return request.app.state.services.cluster
