"""The values ``AdminClient`` takes and returns, named as in ``confluent_kafka.admin``.

Requests: :class:`NewTopic`, :class:`ConfigResource` (with :class:`ResourceType`,
:class:`AlterConfigOpType`), :class:`ConsumerGroupTopicPartitions`.
Answers: :class:`ClusterMetadata` (``.topics`` -> :class:`TopicMetadata` ->
:class:`PartitionMetadata`; ``.brokers`` -> :class:`BrokerMetadata`),
:class:`ConfigEntry` (with :class:`ConfigSource`), :class:`ListConsumerGroupsResult` of
:class:`ConsumerGroupListing`, :class:`ConsumerGroupDescription`.
Enum values are librdkafka's, so they compare as confluent-kafka's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import total_ordering
from typing import Any

from laketail.client.errors import KafkaError
from laketail.client.message import TopicPartition


class ResourceType(Enum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    TRANSACTIONAL_ID = 5

    def __lt__(self, other: "ResourceType") -> bool:
        return self.value < other.value


class ConfigSource(Enum):
    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class AlterConfigOpType(Enum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConsumerGroupState(Enum):
    UNKNOWN = 0
    PREPARING_REBALANCE = 1
    COMPLETING_REBALANCE = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5

    @classmethod
    def of(cls, kafka_state: str | None) -> "ConsumerGroupState":
        """From Kafka's state names (``PreparingRebalance``, ``Stable``, ...)."""
        names = {"PreparingRebalance": cls.PREPARING_REBALANCE,
                 "CompletingRebalance": cls.COMPLETING_REBALANCE, "Stable": cls.STABLE,
                 "Dead": cls.DEAD, "Empty": cls.EMPTY}
        return names.get(kafka_state or "", cls.UNKNOWN)

    def __lt__(self, other: "ConsumerGroupState") -> bool:
        return self.value < other.value


# -- topics ---------------------------------------------------------------------------------------


class NewPartitions:
    """A topic to grow to ``new_total_count`` partitions (``create_partitions``); laketail
    assigns the new replicas itself, so ``replica_assignment`` must be None."""

    def __init__(self, topic: str, new_total_count: int, replica_assignment: list[list[int]] | None = None) -> None:
        self.topic = topic
        self.new_total_count = new_total_count
        self.replica_assignment = replica_assignment

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic!r}, new_total_count={self.new_total_count})"


@total_ordering
class NewTopic:
    """A topic to create; -1 leaves partitions / replication factor to the broker."""

    def __init__(
        self,
        topic: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        replica_assignment: list[list[int]] | None = None,
        config: dict[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignment = replica_assignment
        self.config = dict(config or {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NewTopic) and self.topic == other.topic

    def __lt__(self, other: "NewTopic") -> bool:
        return self.topic < other.topic

    def __hash__(self) -> int:
        return hash(self.topic)

    def __repr__(self) -> str:
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"


@dataclass
class BrokerMetadata:
    id: int = -1
    host: str | None = None
    port: int = -1

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


@dataclass
class PartitionMetadata:
    id: int = -1
    leader: int = -1
    replicas: list[int] = field(default_factory=list)
    isrs: list[int] = field(default_factory=list)
    error: KafkaError | None = None

    def __str__(self) -> str:
        return str(self.id)


@dataclass
class TopicMetadata:
    topic: str | None = None
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    error: KafkaError | None = None

    def __str__(self) -> str:
        return str(self.topic)


@dataclass
class ClusterMetadata:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    orig_broker_id: int = -1
    orig_broker_name: str | None = None

    def __str__(self) -> str:
        return str(self.cluster_id)


# -- configs --------------------------------------------------------------------------------------


class ConfigEntry:
    """One configuration property of a resource (``describe_configs``), or an
    incremental change to one (``incremental_operation``)."""

    def __init__(
        self,
        name: str,
        value: str | None,
        source: ConfigSource = ConfigSource.UNKNOWN_CONFIG,
        is_read_only: bool = False,
        is_default: bool = False,
        is_sensitive: bool = False,
        is_synonym: bool = False,
        synonyms: list["ConfigEntry"] | None = None,
        incremental_operation: AlterConfigOpType | None = None,
    ) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.is_read_only = bool(is_read_only)
        self.is_default = bool(is_default)
        self.is_sensitive = bool(is_sensitive)
        self.is_synonym = bool(is_synonym)
        self.synonyms = list(synonyms or [])
        self.incremental_operation = incremental_operation

    def __repr__(self) -> str:
        return f'ConfigEntry({self.name}="{self.value}")'

    def __str__(self) -> str:
        return f'{self.name}="{self.value}"'


@total_ordering
class ConfigResource:
    """A resource with configuration (laketail has topic configs), plus the changes to
    make to it: ``set_config`` for ``alter_configs``, ``incremental_configs`` for
    ``incremental_alter_configs``."""

    Type = ResourceType

    def __init__(
        self,
        restype: ResourceType | str | int,
        name: str,
        set_config: dict[str, str] | None = None,
        described_configs: dict[str, ConfigEntry] | None = None,
        error: KafkaError | None = None,
        incremental_configs: list[ConfigEntry] | None = None,
    ) -> None:
        if name is None:
            raise ValueError("Expected resource name to be a string")
        if isinstance(restype, str):
            try:
                restype = ResourceType[restype.upper()]
            except KeyError:
                raise ValueError(f'Unknown resource type "{restype}": should be a ConfigResource.Type') from None
        elif isinstance(restype, int):
            restype = ResourceType(restype)
        self.restype = restype
        self.restype_int = restype.value
        self.name = name
        self.set_config_dict = dict(set_config or {})
        self.incremental_configs = list(incremental_configs or [])
        self.configs = described_configs
        self.error = error

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        if overwrite or name not in self.set_config_dict:
            self.set_config_dict[name] = value

    def add_incremental_config(self, config_entry: ConfigEntry) -> None:
        self.incremental_configs.append(config_entry)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigResource) and (self.restype, self.name) == (other.restype, other.name)

    def __lt__(self, other: "ConfigResource") -> bool:
        return (self.restype.value, self.name) < (other.restype.value, other.name)

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __len__(self) -> int:
        return len(self.set_config_dict)

    def __repr__(self) -> str:
        return f"ConfigResource({self.restype},{self.name})"


# -- consumer groups --------------------------------------------------------------------------------


class ConsumerGroupTopicPartitions:
    """A group and some of its partitions (offsets to list or to alter)."""

    def __init__(self, group_id: str, topic_partitions: list[TopicPartition] | None = None) -> None:
        self.group_id = group_id
        self.topic_partitions = topic_partitions

    def __repr__(self) -> str:
        return f"ConsumerGroupTopicPartitions({self.group_id}, {self.topic_partitions})"


@dataclass
class ConsumerGroupListing:
    group_id: str
    is_simple_consumer_group: bool
    state: ConsumerGroupState | None = None
    type: Any = None


@dataclass
class ListConsumerGroupsResult:
    valid: list[ConsumerGroupListing] = field(default_factory=list)
    errors: list[KafkaError] = field(default_factory=list)


@dataclass
class MemberAssignment:
    topic_partitions: list[TopicPartition] = field(default_factory=list)


@dataclass
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: MemberAssignment
    group_instance_id: str | None = None


@dataclass
class ConsumerGroupDescription:
    group_id: str
    is_simple_consumer_group: bool
    members: list[MemberDescription]
    partition_assignor: str
    state: ConsumerGroupState
    coordinator: BrokerMetadata | None = None
