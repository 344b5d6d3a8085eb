"""The topic catalog: small Delta tables under ``<root>/_system/``.

* ``_system/cluster`` -- one row, the cluster id, made by the first broker to start.
* ``_system/topics``  -- one row per topic: name, topic id, partition count, replication
  factor, config overrides (Kafka keys, JSON), creation time.

Changes are rare (create, alter, delete) and each is a read-modify-write that replaces
the table's file: a concurrent change by another broker makes delta-rs's conflict check
fail, and the change is retried on the fresh state (docs/architecture.md §4.5). The catalog
keeps the latest state in memory; callers read that.

Topic names are validated (:func:`validate_topic_name`) before any path is built.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from laketail.config import validate_topic_overrides
from laketail.errors import InvalidPartitions, InvalidTopic, TopicAlreadyExists, UnknownTopicOrPartition
from laketail.storage import object_store

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")  # used with fullmatch: "$" would let "name\n" through
MAX_NAME_LENGTH = 249
#: Folder names Delta Lake gives a meaning of its own: a topic's table lives in
#: ``topics/<name>``, so a topic named like one of them would be read as Delta's.
RESERVED_NAMES = frozenset({"_delta_log", "_change_data", "_delta_index"})

TOPICS_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("topic_id", pa.string()),
        ("partitions", pa.int32()),
        ("replication_factor", pa.int16()),
        ("configs", pa.string()),
        ("created_ms", pa.int64()),
    ]
)
CLUSTER_SCHEMA = pa.schema([("cluster_id", pa.string()), ("created_ms", pa.int64())])


def validate_topic_name(name: Any) -> str:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, never ``.`` or ``..``;
    and never a folder name Delta Lake reserves (:data:`RESERVED_NAMES`)."""
    if not isinstance(name, str) or not name:
        raise InvalidTopic("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name cannot be '{name}'")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopic(f"topic name is {len(name)} characters, more than {MAX_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopic(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
        )
    if name in RESERVED_NAMES:
        raise InvalidTopic(f"topic name '{name}' is reserved by Delta Lake")
    return name


#: The coordinators' topics (Kafka's ``Topic.INTERNAL_TOPICS``): only the group and
#: transaction coordinators write, alter or delete them; clients may read them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__schemas"})  # + the schema registry


def check_not_internal(name: str, action: str) -> None:
    """INVALID_TOPIC_EXCEPTION when a client asks to ``action`` (``append to``,
    ``delete``, ...) one of :data:`INTERNAL_TOPICS`, as Kafka answers an append."""
    if name in INTERNAL_TOPICS:
        raise InvalidTopic(f"Cannot {action} internal topic {name}")


def check_partition_increase(name: str, current: int, wanted: object) -> None:
    """INVALID_PARTITIONS unless ``wanted`` is an int32 above the topic's ``current``
    count: Kafka adds partitions and never removes any (its messages)."""
    if type(wanted) is not int or not 1 <= wanted <= 2**31 - 1:
        raise InvalidPartitions(f"partitions must be an int32 of at least 1, got {wanted!r}")
    if wanted == current:
        raise InvalidPartitions(f"Topic already has {current} partitions.")
    if wanted < current:
        raise InvalidPartitions(
            f"Topic currently has {current} partitions, which is higher than the requested {wanted}."
        )


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0
    internal: bool = False


class Catalog:
    """Topics of the cluster. Thread-safe (one lock around the in-memory map)."""

    def __init__(self, root: str | Path) -> None:
        self.root = str(root)
        self.topics_uri = f"{self.root}/_system/topics"
        self.cluster_uri = f"{self.root}/_system/cluster"
        self._lock = threading.Lock()
        self._topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""

    # -- opening ------------------------------------------------------------------------

    def open(self) -> str:
        """Create the system tables on first start; load them. Returns the cluster id."""
        object_store.make_root(self.root)
        self.cluster_id = self._open_cluster()
        try:
            DeltaTable(self.topics_uri)
        except TableNotFoundError:
            try:
                DeltaTable.create(self.topics_uri, TOPICS_SCHEMA, mode="error", name="laketail_topics")
            except DeltaError:  # another broker created it first (the open below fails if not)
                DeltaTable(self.topics_uri)
        self.reload()
        return self.cluster_id

    def _open_cluster(self) -> str:
        try:
            return self._first_cluster_id()
        except TableNotFoundError:
            pass
        # Kafka's cluster ids are 22-character URL-safe base64 of a UUID.
        import base64

        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        row = pa.table({"cluster_id": [cid], "created_ms": [int(time.time() * 1000)]}, schema=CLUSTER_SCHEMA)
        try:
            write_deltalake(self.cluster_uri, row, mode="error")
        except DeltaError:
            pass  # another broker of the cluster created it first (the read below fails if not)
        return self._first_cluster_id()

    def _first_cluster_id(self) -> str:
        """The id the cluster table's first commit holds. Brokers starting together may
        each write a row (the one that loses the race for version 0 appends its own
        after it); the first commit is the same for every broker whenever it reads,
        while the set of rows, and so their smallest ``created_ms``, depends on when a
        broker reads. A table whose first commit is gone from the log (never the case
        for a table written once or twice) is read whole."""
        try:
            table = DeltaTable(self.cluster_uri, version=0)
        except TableNotFoundError:
            raise
        except DeltaError:
            table = DeltaTable(self.cluster_uri)
        rows = table.to_pyarrow_table().to_pylist()
        return min(rows, key=lambda r: (r["created_ms"], r["cluster_id"]))["cluster_id"]

    def _read_rows(self) -> tuple[DeltaTable, list[dict]]:
        dt = DeltaTable(self.topics_uri)
        return dt, dt.to_pyarrow_table().to_pylist()

    def reload(self) -> None:
        """Blocking (worker thread): read ``_system/topics`` again (the controller changed it)."""
        _, rows = self._read_rows()
        topics = {}
        for row in rows:
            topics[row["name"]] = TopicInfo(
                name=row["name"],
                topic_id=row["topic_id"],
                partitions=row["partitions"],
                replication_factor=row["replication_factor"],
                configs=json.loads(row["configs"] or "{}"),
                created_ms=row["created_ms"],
                internal=row["name"].startswith("__"),
            )
        with self._lock:
            self._topics = topics

    # -- reads ----------------------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        with self._lock:
            return sorted(self._topics.values(), key=lambda t: t.name)

    def get(self, name: str) -> TopicInfo:
        with self._lock:
            info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartition.topic(name)
        return info

    @staticmethod
    def normalise_configs(configs: Mapping[str, Any]) -> dict[str, str]:
        return validate_topic_overrides(configs)

    def check_can_create(self, name: str) -> None:
        validate_topic_name(name)
        with self._lock:
            if name in self._topics:
                raise TopicAlreadyExists(f"topic '{name}' already exists")
            key = _collision_key(name)
            for other in self._topics:
                if _collision_key(other) == key:
                    raise InvalidTopic(
                        f"topic '{name}' collides with existing topic '{other}' "
                        "('.' and '_' are interchangeable in metric names)"
                    )

    # -- changes (read-modify-write, retried on conflict) ------------------------------------

    def _mutate(self, change) -> None:
        for attempt in range(20):
            dt, rows = self._read_rows()
            new_rows = change(rows)
            try:
                write_deltalake(
                    dt,
                    pa.Table.from_pylist(new_rows, schema=TOPICS_SCHEMA),
                    mode="overwrite",
                )
                self.reload()
                return
            except CommitFailedError:
                time.sleep(0.05 * (attempt + 1))
        raise RuntimeError("catalog update kept conflicting with concurrent changes")

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        self.check_can_create(name)
        info = TopicInfo(
            name=name,
            topic_id=str(uuid.uuid4()),
            partitions=partitions,
            replication_factor=replication_factor,
            configs=dict(configs),
            created_ms=int(time.time() * 1000),
            internal=name.startswith("__"),
        )

        def change(rows: list[dict]) -> list[dict]:
            if any(r["name"] == name for r in rows):
                raise TopicAlreadyExists(f"topic '{name}' already exists")
            return rows + [self._row(info)]

        self._mutate(change)
        return self.get(name)

    def alter_topic(self, name: str, configs: dict[str, str]) -> TopicInfo:
        current = self.get(name)
        updated = replace(current, configs=dict(configs))

        def change(rows: list[dict]) -> list[dict]:
            return [self._row(updated) if r["name"] == name else r for r in rows]

        self._mutate(change)
        return self.get(name)

    def set_partitions(self, name: str, partitions: int) -> TopicInfo:
        """The topic's partition count, now ``partitions`` (the controller checked that
        it grows: Kafka never takes partitions away)."""
        self.get(name)

        def change(rows: list[dict]) -> list[dict]:
            return [{**r, "partitions": partitions} if r["name"] == name else r for r in rows]

        self._mutate(change)
        return self.get(name)

    def delete_topic(self, name: str) -> None:
        self.get(name)
        self._mutate(lambda rows: [r for r in rows if r["name"] != name])

    @staticmethod
    def _row(info: TopicInfo) -> dict:
        return {
            "name": info.name,
            "topic_id": info.topic_id,
            "partitions": info.partitions,
            "replication_factor": info.replication_factor,
            "configs": json.dumps(info.configs, sort_keys=True),
            "created_ms": info.created_ms,
        }


def remove_tree(path: str | Path) -> None:
    """Delete a folder of the data root, local or on an object store."""
    object_store.remove_tree(str(path))
