"""A topic's Delta table in a few numbers, for the console's topic page.

``version`` (the latest), ``files`` and ``size_bytes`` of the current snapshot, and the
newest commits of the table's history (version, time, operation, its parameters, and
laketail's own commit info when the tierer wrote it). Blocking delta-rs IO: call it
from a worker thread.
"""

from __future__ import annotations

from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

#: Keys of a history entry worth showing (others are engine details).
_HISTORY_KEYS = ("version", "timestamp", "operation", "operationParameters", "clientVersion", "operationMetrics")


def table_summary(uri: str, history: int = 10) -> dict[str, Any]:
    """``{"uri", "exists", "version", "files", "size_bytes", "last_commit", "history"}``;
    ``exists`` false (and zeros) before the first commit."""
    try:
        table = DeltaTable(uri)
    except TableNotFoundError:
        return {"uri": uri, "exists": False, "version": -1, "files": 0, "size_bytes": 0,
                "last_commit": None, "history": []}
    adds = table.get_add_actions(flatten=True)
    size_bytes = int(sum(adds.column("size_bytes").to_pylist())) if adds.num_rows else 0
    commits = [{k: entry[k] for k in _HISTORY_KEYS if k in entry} for entry in table.history(history)]
    for commit in commits:  # a CREATE TABLE's parameters hold the whole schema: not worth showing
        params = commit.get("operationParameters") or {}
        commit["operationParameters"] = {k: v for k, v in params.items() if len(str(v)) <= 200}
    return {
        "uri": uri,
        "exists": True,
        "version": table.version(),
        "files": adds.num_rows,
        "size_bytes": size_bytes,
        "last_commit": commits[0] if commits else None,
        "history": commits,
    }


def table_size(uri: str) -> int:
    """Bytes of the table's current files (0 before the first commit)."""
    try:
        adds = DeltaTable(uri).get_add_actions(flatten=True)
    except TableNotFoundError:
        return 0
    return int(sum(adds.column("size_bytes").to_pylist())) if adds.num_rows else 0
