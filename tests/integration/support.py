"""Helpers the integration tests share: polling with a deadline, decoding fetched
records, reading a topic's Delta table, and checking error bodies.

Nothing here sleeps a fixed time to wait for the broker: :func:`wait_until` polls a
condition and fails with a description of what never happened.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import httpx
import pyarrow as pa
from deltalake import DeltaTable

T = TypeVar("T")

#: Failure bound for waiting on the tierer (the test topics flush every 100 ms).
TIER_DEADLINE_S = 90.0


def wait_until(check: Callable[[], T], what: str, timeout_s: float = 60.0, every_s: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy and return that; fail after
    ``timeout_s`` with ``what`` and the last value (or exception) seen."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except AssertionError as exc:  # a check may assert; keep polling
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(every_s)


def child_processes(pid: int, marker: bytes) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid`` and whose command line holds
    ``marker`` (read from ``/proc``)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z" and marker in cmdline:
            out.append(int(entry))
    return out


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (read from ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def decode_headers(raw: Any) -> list[tuple[str, bytes | None]]:
    """Headers of a fetched record (binary format) as ``[(name, value bytes)]``.

    Accepts the v3 shape ``[{"name", "value": base64}]`` and the ``{"key", ...}``
    spelling of Spark's Kafka source; null or missing means no headers."""
    out = []
    for h in raw or []:
        name = h["name"] if "name" in h else h["key"]
        out.append((name, unb64(h.get("value"))))
    return out


def decode_binary(entry: dict) -> dict:
    """One fetched record (binary embedded format) with bytes for key and value."""
    return {
        "topic": entry["topic"],
        "partition": entry["partition"],
        "offset": entry["offset"],
        "key": unb64(entry["key"]),
        "value": unb64(entry["value"]),
        "timestamp": entry.get("timestamp"),
        "headers": decode_headers(entry.get("headers")),
    }


def parse_concatenated_json(text: str) -> list[Any]:
    """Objects of a body of concatenated (optionally whitespace-separated) JSON."""
    decoder = json.JSONDecoder()
    out, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        obj, pos = decoder.raw_decode(text, pos)
        out.append(obj)


def assert_error(resp: httpx.Response, status: int, error_code: int, kafka_name: str) -> dict:
    """The response is the gateway's error body with these codes and Kafka's name."""
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text}"
    body = resp.json()
    assert body.get("error_code") == error_code, body
    assert kafka_name in body.get("message", ""), body
    return body


def read_table(path: Path) -> pa.Table:
    return DeltaTable(str(path)).to_pyarrow_table()


def table_offsets(table: pa.Table) -> dict[int, list[int]]:
    """Offsets per partition in the table, sorted (duplicates kept)."""
    out: dict[int, list[int]] = {}
    for p, o in zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()):
        out.setdefault(p, []).append(o)
    return {p: sorted(v) for p, v in out.items()}


def wait_for_table(path: Path, end_offsets: dict[int, int], timeout_s: float = TIER_DEADLINE_S) -> pa.Table:
    """Poll the Delta table until every partition holds every offset below its end
    offset; return the table read at that moment."""

    def caught_up() -> pa.Table | None:
        table = read_table(path)
        have = table_offsets(table)
        for p, end in end_offsets.items():
            if set(range(end)) - set(have.get(p, [])):
                return None
        return table

    return wait_until(caught_up, f"the Delta table at {path} to reach {end_offsets}", timeout_s, 0.1)


def rows_by_offset(table: pa.Table) -> dict[tuple[int, int], dict]:
    """Table rows keyed by (partition, offset); asserts there are no duplicates."""
    out = {}
    for row in table.to_pylist():
        key = (row["partition"], row["offset"])
        assert key not in out, f"duplicate row for partition {key[0]} offset {key[1]}"
        out[key] = row
    return out


def ipc(table: pa.Table, compression: str | None = None) -> bytes:
    """``table`` as one Arrow IPC stream (a /v1 produce body), optionally compressed."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def prom_sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one Prometheus sample in a /metrics answer (labels matched exactly,
    in any order), or None when there is no such sample."""
    for line in text.splitlines():
        m = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        if dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")) == labels:
            return float(m.group(3))
    return None
