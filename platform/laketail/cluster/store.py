"""The cluster's catalog tables under ``<root>/_system/`` (docs/architecture.md §4.5).

* ``brokers``    -- one row per broker that ever registered: id, advertised URL, the
  incarnation of its current process, whether the controller counts it alive;
* ``controller`` -- one row: the controller's broker id and epoch. Becoming controller
  is a read-modify-write of this row: two brokers that both read epoch E and both write
  E + 1 collide in delta-rs's conflict check, and only one wins;
* ``replicas``   -- one row per replica: topic, partition, broker, role, leader epoch,
  ISR membership, last known log end offset (plus the replica's place in the
  assignment and the partition epoch, so the registrations can be rebuilt from it);
* ``producer_ids`` -- one row: the first producer id no block has been given yet
  (Kafka's controller-allocated producer id blocks, KIP-730). A block is taken with a
  conflict-checked read-modify-write, so no id is ever handed out twice, whatever
  coordinator loses its state or whichever broker restarts.

Every change replaces the table's file (the tables are tiny) in a commit that fails on
a concurrent change; :func:`mutate` retries with fresh rows. Thread-safe: each call
opens the table anew; callers run these in worker threads.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from laketail.cluster.metadata import NO_LEADER, BrokerRegistration, PartitionRegistration

log = logging.getLogger(__name__)

BROKERS_SCHEMA = pa.schema([
    ("broker_id", pa.int32()),
    ("url", pa.string()),
    ("incarnation", pa.string()),
    ("alive", pa.bool_()),
    ("registered_ms", pa.int64()),
    ("updated_ms", pa.int64()),
    ("broker_url", pa.string()),  # the inter-broker listener's URL; null when it is ``url``
    ("endpoints", pa.string()),  # other advertised listeners, NAME://host:port,... (Kafka's protocol)
])
CONTROLLER_SCHEMA = pa.schema([
    ("controller_id", pa.int32()),
    ("controller_epoch", pa.int64()),
    ("elected_ms", pa.int64()),
])
REPLICAS_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("broker", pa.int32()),
    ("role", pa.string()),  # leader, follower, or offline (the partition has no leader)
    ("leader_epoch", pa.int32()),
    ("in_isr", pa.bool_()),
    ("log_end_offset", pa.int64()),
    ("replica_index", pa.int16()),
    ("partition_epoch", pa.int32()),
    ("updated_ms", pa.int64()),
])

PRODUCER_IDS_SCHEMA = pa.schema([
    ("next_producer_id", pa.int64()),
    ("broker_id", pa.int32()),  # who took the last block (for whoever reads the table)
    ("updated_ms", pa.int64()),
])

#: Checkpoint a system table every this many versions, so reading it stays cheap.
CHECKPOINT_EVERY = 50


class Conflict(Exception):
    """A conditional change found the table changed by someone else."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class ClusterStore:
    """Reads and conflict-checked writes of the cluster's ``_system`` tables under one root.

    ``brokers``, ``controller``, ``replicas`` and ``producer_ids`` (module docstring): each
    change is a :meth:`mutate` that replaces the table's one file and retries on a
    concurrent commit, so claiming the controller (:meth:`claim_controller`) and taking a
    producer-id block (:meth:`allocate_producer_ids`) are safe between brokers without
    another coordination service.

    Thread-safety: blocking IO; call from worker threads. Holds only the tables' URIs.
    """

    def __init__(self, root: str) -> None:
        self.root = str(root)
        self.brokers_uri = f"{self.root}/_system/brokers"
        self.controller_uri = f"{self.root}/_system/controller"
        self.replicas_uri = f"{self.root}/_system/replicas"
        self.producer_ids_uri = f"{self.root}/_system/producer_ids"

    # -- generic ----------------------------------------------------------------------------

    def _rows(self, uri: str, schema: pa.Schema) -> tuple[DeltaTable | None, list[dict]]:
        try:
            dt = DeltaTable(uri)
        except TableNotFoundError:
            return None, []
        return dt, dt.to_pyarrow_table().to_pylist()

    def mutate(
        self, uri: str, schema: pa.Schema, change: Callable[[list[dict]], list[dict] | None], attempts: int = 30
    ) -> list[dict]:
        """Replace the table's rows with ``change(rows)`` unless someone changed it
        meanwhile (then retry on fresh rows). ``change`` returning ``None`` means "no
        change"; it may raise to give up. Returns the rows written (or found)."""
        for attempt in range(attempts):
            dt, rows = self._rows(uri, schema)
            new_rows = change(rows)
            if new_rows is None:
                return rows
            table = pa.Table.from_pylist(new_rows, schema=schema)
            # No retries inside delta-rs: it would rebase a losing commit onto the winner's
            # (a racing create would even succeed), and the whole point is to lose.
            once = CommitProperties(max_commit_retries=0)
            try:
                if dt is None:
                    write_deltalake(uri, table, mode="error", commit_properties=once)
                else:
                    # schema_mode: a table written before a column was added takes the new schema
                    write_deltalake(dt, table, mode="overwrite", schema_mode="overwrite", commit_properties=once)
                    version = dt.version()
                    if version and version % CHECKPOINT_EVERY == 0:
                        self._tidy(uri)
                return new_rows
            except CommitFailedError:
                time.sleep(0.02 * (attempt + 1))
            except Exception as exc:  # "table already exists" from a racing first write
                if dt is None and "exist" in str(exc).lower():
                    continue
                raise
        raise Conflict(f"{uri} kept changing under us")

    @staticmethod
    def _tidy(uri: str) -> None:
        try:
            dt = DeltaTable(uri)
            dt.create_checkpoint()
            dt.cleanup_metadata()
            dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        except Exception as exc:  # tidying is an optimisation; the next checkpoint tries again
            log.warning("tidying %s (checkpoint, log cleanup, vacuum) failed: %s", uri, exc)

    # -- brokers ----------------------------------------------------------------------------

    def brokers(self) -> dict[int, BrokerRegistration]:
        _, rows = self._rows(self.brokers_uri, BROKERS_SCHEMA)
        return {
            r["broker_id"]: BrokerRegistration(
                r["broker_id"], r["url"], r["incarnation"], r["alive"], r["registered_ms"], r.get("broker_url") or "",
                r.get("endpoints") or "",
            )
            for r in rows
        }

    def register_broker(self, broker_id: int, url: str, incarnation: str, broker_url: str = "",
                        endpoints: str = "") -> None:
        now = _now_ms()

        def change(rows: list[dict]) -> list[dict]:
            others = [r for r in rows if r["broker_id"] != broker_id]
            return others + [{
                "broker_id": broker_id, "url": url, "incarnation": incarnation, "alive": True,
                "registered_ms": now, "updated_ms": now, "broker_url": broker_url or None,
                "endpoints": endpoints or None,
            }]

        self.mutate(self.brokers_uri, BROKERS_SCHEMA, change)

    def set_alive(self, alive: dict[int, bool]) -> None:
        now = _now_ms()

        def change(rows: list[dict]) -> list[dict] | None:
            if all(alive.get(r["broker_id"], r["alive"]) == r["alive"] for r in rows):
                return None
            return [
                {**r, "alive": alive.get(r["broker_id"], r["alive"]), "updated_ms": now}
                for r in rows
            ]

        self.mutate(self.brokers_uri, BROKERS_SCHEMA, change)

    # -- controller ----------------------------------------------------------------------------

    def controller(self) -> tuple[int, int]:
        """``(controller id, controller epoch)``; ``(-1, 0)`` before the first election."""
        _, rows = self._rows(self.controller_uri, CONTROLLER_SCHEMA)
        if not rows:
            return NO_LEADER, 0
        return rows[0]["controller_id"], rows[0]["controller_epoch"]

    def claim_controller(self, broker_id: int, seen_epoch: int) -> int:
        """Become controller if the epoch is still ``seen_epoch``; return the new epoch.
        Raises :class:`Conflict` when another broker got there first."""
        claimed: list[int] = []

        def change(rows: list[dict]) -> list[dict]:
            current = rows[0]["controller_epoch"] if rows else 0
            if current != seen_epoch:
                raise Conflict(f"controller epoch moved from {seen_epoch} to {current}")
            claimed.append(current + 1)
            return [{"controller_id": broker_id, "controller_epoch": current + 1, "elected_ms": _now_ms()}]

        self.mutate(self.controller_uri, CONTROLLER_SCHEMA, change, attempts=1)
        # Touch the replicas table too: a deposed controller that checked the epoch just
        # before this claim now conflicts on its next write there, and re-checks.
        self.mutate(self.replicas_uri, REPLICAS_SCHEMA, lambda rows: rows)
        return claimed[-1]

    # -- replicas -------------------------------------------------------------------------------

    def partitions(self) -> dict[tuple[str, int], PartitionRegistration]:
        _, rows = self._rows(self.replicas_uri, REPLICAS_SCHEMA)
        grouped: dict[tuple[str, int], list[dict]] = {}
        for r in rows:
            grouped.setdefault((r["topic"], r["partition"]), []).append(r)
        out = {}
        for (topic, partition), replicas in grouped.items():
            replicas.sort(key=lambda r: r["replica_index"])
            leader = next((r["broker"] for r in replicas if r["role"] == "leader"), NO_LEADER)
            out[(topic, partition)] = PartitionRegistration(
                topic=topic,
                partition=partition,
                replicas=[r["broker"] for r in replicas],
                leader=leader,
                leader_epoch=max(r["leader_epoch"] for r in replicas),
                isr=[r["broker"] for r in replicas if r["in_isr"]],
                partition_epoch=max(r["partition_epoch"] for r in replicas),
            )
        return out

    def write_partitions(
        self,
        partitions: dict[tuple[str, int], PartitionRegistration],
        leos: dict[tuple[str, int, int], int],
        controller_epoch: int,
    ) -> None:
        """Replace ``_system/replicas`` with ``partitions``, unless a newer controller
        has been elected (then :class:`Conflict`: this controller is deposed)."""
        now = _now_ms()
        rows = []
        for (topic, partition), reg in sorted(partitions.items()):
            for index, broker in enumerate(reg.replicas):
                if reg.leader == NO_LEADER:
                    role = "offline"
                else:
                    role = "leader" if broker == reg.leader else "follower"
                rows.append({
                    "topic": topic, "partition": partition, "broker": broker, "role": role,
                    "leader_epoch": reg.leader_epoch, "in_isr": broker in reg.isr,
                    "log_end_offset": leos.get((topic, partition, broker), -1),
                    "replica_index": index, "partition_epoch": reg.partition_epoch, "updated_ms": now,
                })

        def change(_rows: list[dict]) -> list[dict]:
            _, epoch = self.controller()
            if epoch != controller_epoch:
                raise Conflict(f"controller epoch is {epoch}, not {controller_epoch}: deposed")
            return rows

        self.mutate(self.replicas_uri, REPLICAS_SCHEMA, change)


    # -- producer id blocks ---------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, size: int, at_least: int = 0) -> tuple[int, int]:
        """Take the next block of ``size`` producer ids for ``broker_id``: ``(first, end)``,
        ``end`` excluded. The block starts at ``at_least`` or later (ids handed out before
        blocks lived here, which the caller read from ``__transaction_state``). Two
        brokers taking a block at once collide in the commit and the loser retries on
        the winner's row: every block is disjoint from every other ever taken."""
        if size <= 0:
            raise ValueError(f"a producer id block needs a positive size, not {size}")
        taken: list[int] = []

        def change(rows: list[dict]) -> list[dict]:
            first = max(rows[0]["next_producer_id"] if rows else 0, at_least)
            taken.append(first)
            return [{"next_producer_id": first + size, "broker_id": broker_id, "updated_ms": _now_ms()}]

        self.mutate(self.producer_ids_uri, PRODUCER_IDS_SCHEMA, change)
        return taken[-1], taken[-1] + size
