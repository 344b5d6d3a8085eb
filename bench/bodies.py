"""Request bodies the benchmarks send: Confluent v2 binary JSON and Arrow IPC streams.

Values are random bytes (so nothing compresses or dedupes unfairly), built once per
benchmark and sent many times.
"""

from __future__ import annotations

import base64
import os

import orjson
import pyarrow as pa

V2_BINARY = "application/vnd.kafka.binary.v2+json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"


def values(n: int, size: int) -> list[bytes]:
    blob = os.urandom(n * size)
    return [blob[i * size:(i + 1) * size] for i in range(n)]


def v2_binary(vals: list[bytes]) -> bytes:
    """``{"records": [{"value": base64}, ...]}``."""
    return orjson.dumps({"records": [{"value": base64.b64encode(v).decode()} for v in vals]})


def arrow_stream(vals: list[bytes]) -> bytes:
    """An Arrow IPC stream with one ``value`` (binary) column."""
    table = pa.table({"value": pa.array(vals, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
