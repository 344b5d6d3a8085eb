"""ACL storage: the ``_system/acls`` Delta table, one row per :class:`~laketail.security.acl.AclBinding`.

Columns (all strings, Kafka's enum names): ``resource_type``, ``resource_name``,
``pattern_type``, ``principal``, ``host``, ``operation``, ``permission``. A change is a
read-modify-write that replaces the table's file, retried on the fresh state when
another broker committed first (as the topic catalog does). Every broker sees the
others' changes by reloading when the table's version moves (:meth:`AclStore.reload_if_changed`).

Loading is forgiving: a row that does not decode into a valid binding is skipped and
counted (``skipped``), never a reason for a broker not to start. Writing is strict:
bindings are validated by :meth:`AclBinding.of` before they reach the store.

Not thread-safe by itself: the :class:`~laketail.security.authorizer.Authorizer` calls
it from one worker thread at a time (under its own lock).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from laketail.errors import InvalidRequest, KafkaStorageError
from laketail.security.acl import AclBinding
from laketail.storage import object_store

log = logging.getLogger(__name__)

_COLUMNS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")
ACLS_SCHEMA = pa.schema([(name, pa.string()) for name in _COLUMNS])


def _row(binding: AclBinding) -> dict[str, str]:
    p, e = binding.pattern, binding.entry
    return {"resource_type": p.resource_type.name, "resource_name": p.name, "pattern_type": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.name,
            "permission": e.permission.name}


class AclStore:
    """The cluster's ACLs in ``<root>/_system/acls``; :attr:`bindings` is the last state read."""

    def __init__(self, root: str | Path) -> None:
        self.uri = f"{root}/_system/acls"
        self.bindings: frozenset[AclBinding] = frozenset()
        self.version = -1
        self.skipped = 0

    def open(self) -> None:
        object_store.make_root(self.uri.rsplit("/", 1)[0])
        try:
            DeltaTable(self.uri)
        except TableNotFoundError:
            try:
                DeltaTable.create(self.uri, ACLS_SCHEMA, mode="error", name="laketail_acls")
            except DeltaError:  # another broker created it first; the load below proves it
                log.debug("acls table created concurrently", exc_info=True)
        self._load(DeltaTable(self.uri))

    def reload_if_changed(self) -> bool:
        """Reload when another broker committed a change; True when the bindings were reloaded."""
        dt = DeltaTable(self.uri)
        if dt.version() == self.version:
            return False
        self._load(dt)
        return True

    def _load(self, dt: DeltaTable) -> None:
        bindings, skipped = set(), 0
        for row in dt.to_pyarrow_table().to_pylist():
            try:
                bindings.add(AclBinding.of(row["resource_type"], row["resource_name"], row["pattern_type"],
                                           row["principal"], row["host"], row["operation"], row["permission"]))
            except InvalidRequest:
                skipped += 1
        if skipped:
            log.warning("skipped %d ACL rows of %s that do not decode", skipped, self.uri)
        self.bindings, self.version, self.skipped = frozenset(bindings), dt.version(), skipped

    def mutate(self, change: Callable[[frozenset[AclBinding]], Iterable[AclBinding]]) -> None:
        """Replace the bindings with ``change(current)``, retried on concurrent commits."""
        for attempt in range(20):
            dt = DeltaTable(self.uri)
            self._load(dt)
            rows = [_row(b) for b in sorted(change(self.bindings), key=_row_key)]
            try:
                write_deltalake(dt, pa.Table.from_pylist(rows, schema=ACLS_SCHEMA), mode="overwrite")
            except CommitFailedError:
                time.sleep(0.05 * (attempt + 1))
                continue
            self._load(DeltaTable(self.uri))
            return
        raise KafkaStorageError("the ACL table kept conflicting with concurrent changes")


def _row_key(binding: AclBinding) -> tuple[str, ...]:
    return tuple(_row(binding).values())
