"""SCRAM credentials in the catalog: ``<data>/_system/credentials``, a small Delta table.

One row per (user, mechanism): ``user``, ``mechanism`` (SCRAM-SHA-256 or -512),
``salt``, ``iterations``, ``stored_key``, ``server_key`` (RFC 5802's, see
:mod:`laketail.security.scram`) and ``updated_ms``. Never a password.

Changes (``laketail users add|remove``) are read-modify-writes that replace the table's
file, refused by delta-rs's conflict check when another writer got there first and
then retried on the fresh rows, like the topics table (:mod:`laketail.catalog`).
Reading is forgiving: a row that does not decode is skipped and counted.

Thread-safety: every method does blocking IO; call it from a worker thread (the
gateway uses ``asyncio.to_thread``). Instances hold no state besides the path.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from typing import Callable

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from laketail.errors import InvalidConfig
from laketail.security.scram import MECHANISMS, ScramCredential

log = logging.getLogger(__name__)

CREDENTIALS_SCHEMA = pa.schema([
    ("user", pa.string()),
    ("mechanism", pa.string()),
    ("salt", pa.string()),
    ("iterations", pa.int32()),
    ("stored_key", pa.string()),
    ("server_key", pa.string()),
    ("updated_ms", pa.int64()),
])
#: Kafka's SCRAM user names are free text; laketail keeps them printable, without ``:``
#: (HTTP Basic splits there) and at most 256 characters.
_USER = re.compile(r"[^\x00-\x20:\x7f]{1,256}")

Credentials = dict[str, dict[str, ScramCredential]]  # user -> mechanism -> credential


def validate_user(name: object) -> str:
    if not isinstance(name, str) or _USER.fullmatch(name) is None:
        raise InvalidConfig(f"user name {name!r}: 1-256 printable characters, no spaces or ':'")
    return name


class CredentialStore:
    """The SCRAM credentials table, ``<data>/_system/credentials``: read, add, remove.

    :meth:`load` and :meth:`load_if_changed` read it forgivingly (rows that do not decode
    are skipped and counted in ``skipped``); :meth:`upsert` and :meth:`remove` are
    conflict-checked read-modify-writes. Never holds a password. Thread-safety: blocking
    IO, call from worker threads.
    """

    def __init__(self, root: str) -> None:
        self.uri = f"{str(root).rstrip('/')}/_system/credentials"
        self.skipped = 0  # rows that did not decode at the last load
        self._watched: DeltaTable | None = None  # for load_if_changed (one reader thread at a time)

    def load(self) -> Credentials:
        """Every credential now in the table (empty when there is no table)."""
        return self._decode(self._rows()[1])

    def load_if_changed(self, known_version: int | None) -> tuple[int | None, Credentials | None]:
        """``(version, credentials)`` when the table moved past ``known_version``, else
        ``(known_version, None)``: a check that costs a listing of the table's log, not a read."""
        try:
            if self._watched is None:
                self._watched = DeltaTable(self.uri)
            else:
                self._watched.update_incremental()
        except TableNotFoundError:
            return None, ({} if known_version is not None else None)
        version = self._watched.version()
        if version == known_version:
            return known_version, None
        return version, self._decode(self._watched.to_pyarrow_table().to_pylist())

    def upsert(self, user: str, credential: ScramCredential) -> None:
        validate_user(user)
        row = {
            "user": user, "mechanism": credential.mechanism, "salt": _b64(credential.salt),
            "iterations": credential.iterations, "stored_key": _b64(credential.stored_key),
            "server_key": _b64(credential.server_key), "updated_ms": int(time.time() * 1000),
        }
        self._mutate(lambda rows: [r for r in rows if (r["user"], r["mechanism"]) != (user, credential.mechanism)]
                     + [row])

    def remove(self, user: str, mechanism: str | None = None) -> int:
        """Drop the user's credential for ``mechanism`` (every mechanism when None);
        returns how many were dropped."""
        dropped = 0

        def change(rows: list[dict]) -> list[dict] | None:
            nonlocal dropped
            kept = [r for r in rows if not (r["user"] == user and mechanism in (None, r["mechanism"]))]
            dropped = len(rows) - len(kept)
            return kept if dropped else None

        self._mutate(change)
        return dropped

    # -- the table --------------------------------------------------------------------

    def _rows(self) -> tuple[DeltaTable | None, list[dict]]:
        try:
            dt = DeltaTable(self.uri)
        except TableNotFoundError:
            return None, []
        return dt, dt.to_pyarrow_table().to_pylist()

    def _decode(self, rows: list[dict]) -> Credentials:
        out: Credentials = {}
        skipped = 0
        for r in rows:
            try:
                if r["mechanism"] not in MECHANISMS:
                    raise ValueError(r["mechanism"])
                cred = ScramCredential(r["mechanism"], base64.b64decode(r["salt"]), int(r["iterations"]),
                                       base64.b64decode(r["stored_key"]), base64.b64decode(r["server_key"]))
            except (KeyError, TypeError, ValueError):
                skipped += 1
                continue
            out.setdefault(r["user"], {})[cred.mechanism] = cred
        if skipped:
            log.warning("%s: skipped %d credential rows that do not decode", self.uri, skipped)
        self.skipped = skipped
        return out

    def _mutate(self, change: Callable[[list[dict]], list[dict] | None], attempts: int = 30) -> None:
        for attempt in range(attempts):
            dt, rows = self._rows()
            new_rows = change(rows)
            if new_rows is None:
                return
            table = pa.Table.from_pylist(new_rows, schema=CREDENTIALS_SCHEMA)
            once = CommitProperties(max_commit_retries=0)  # lose a race, then retry on fresh rows
            try:
                if dt is None:
                    write_deltalake(self.uri, table, mode="error", commit_properties=once)
                else:
                    write_deltalake(dt, table, mode="overwrite", commit_properties=once)
                return
            except CommitFailedError:
                time.sleep(0.02 * (attempt + 1))
            except Exception as exc:  # a racing first write: "table already exists"
                if dt is None and "exist" in str(exc).lower():
                    continue
                raise
        raise InvalidConfig(f"{self.uri} kept changing under us; try again")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
