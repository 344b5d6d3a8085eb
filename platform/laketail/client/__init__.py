"""laketail's Python client, mirroring confluent-kafka's API so code ports by its import.

::

    from laketail.client import Producer, Consumer, AdminClient, TopicPartition, KafkaError

The same names and semantics as ``confluent_kafka``: ``Producer`` (asynchronous
produce, delivery reports from ``poll()`` / ``flush()``), ``Consumer`` (consumer
groups with rebalance callbacks, commits, seeks), ``AdminClient`` (topics, configs,
groups; in :mod:`laketail.client.admin` with its request and result types, as in
``confluent_kafka.admin``), ``Message``, ``TopicPartition``, ``KafkaError``,
``KafkaException`` and the offset and timestamp constants. ``bootstrap.servers``
lists laketail gateway URLs. Layout: ``producer`` / ``accumulator`` / ``sender`` /
``transaction_manager`` (idempotence and transactions); ``consumer`` / ``coordinator``
/ ``fetcher``; ``admin``; ``gateway`` (HTTP and the one error translation);
``config``; ``message``; ``errors``; ``metadata``.
"""

from laketail.client.admin import AdminClient
from laketail.client.admin_types import ConsumerGroupState, ConsumerGroupTopicPartitions
from laketail.client.consumer import Consumer, ConsumerGroupMetadata
from laketail.client.errors import KafkaError, KafkaException
from laketail.client.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)
from laketail.client.producer import Producer

__all__ = [
    "AdminClient",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "KafkaError",
    "KafkaException",
    "Message",
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "Producer",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "TopicPartition",
]
