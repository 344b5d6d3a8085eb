"""Data files of a topic's Delta table: how laketail writes them.

``partition=<p>/<first:020d>-<last:020d>-<tag>.parquet``: the record schema less the
partition column (Delta keeps it in the path), plus ``value_struct`` / ``key_struct`` when
the rows carry them (a topic with typed columns), row groups of ``ROW_GROUP_ROWS`` rows so
reads prune by offset, snappy, dictionaries for the columns that repeat
(``DICTIONARY_COLUMNS``), and Delta statistics (min/max of ``offset``, ``timestamp``,
``leader_epoch`` and ``transactional``, null counts) in the add action: a file whose
``control`` null count is its record count and whose ``transactional`` maximum is
false holds only records outside transactions, which ``format("laketail_table")``
uses to scan such files without a row filter. Timestamps in Delta statistics are
milliseconds: the minimum is rounded down and the maximum up.

On an object store (:mod:`laketail.storage.object_store`) the file is uploaded as it is
written and is whole once its stream is closed, before its add action is returned.

A written local file's data is synced (``fdatasync``) before its add action is returned, so
what a commit names is on disk, and its pages then leave the page cache
(:func:`release_pages`): a data file is read later and rarely, readers keep what they
decoded (``block_cache``), and the tierer writes as many bytes as are produced. The pages
freed are what the next writes take: on the benchmarks' machine, writing into memory the
kernel had not used for a few seconds cost 2.2 ms per MB against 0.22 ms into pages just
freed (its balloon device hands idle free memory back to the host; bench/README.md).
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from laketail.records import RECORD_SCHEMA, TYPED_COLUMNS
from laketail.storage import object_store
from laketail.storage.table_reader import DataFile

ROW_GROUP_ROWS = 8_192
FILE_SCHEMA = pa.schema([f for f in RECORD_SCHEMA if f.name != "partition"])
#: Columns written with dictionary encoding: all but ``offset`` (every value distinct)
#: and ``value`` (rarely repeated whole). Trying a dictionary on those two cost a
#: quarter of the tier child's Parquet encoding (random 100-byte values: 26 -> 20 ms CPU
#: per 100,000 records) and made the files larger.
DICTIONARY_COLUMNS = [name for name in FILE_SCHEMA.names if name not in ("offset", "value")]
WRITE_BUFFER_BYTES = 1 << 20


def write_data_file(
    table_uri: str, partition: int, rows: pa.Table, now_ms: int, *, data_change: bool = True, tag: str = ""
) -> tuple[str, AddAction, DataFile]:
    """Write ``rows`` (sorted by offset) as one file; return its path relative to the
    table, the add action to commit and its index entry."""
    offsets = rows.column("offset")
    first = offsets[0].as_py()
    last = offsets[-1].as_py()
    rel = f"partition={partition}/{first:020d}-{last:020d}-{tag}{uuid.uuid4().hex[:12]}.parquet"
    path = f"{table_uri}/{rel}"
    if "partition" in rows.column_names:
        rows = rows.drop_columns(["partition"])
    schema = FILE_SCHEMA
    for typed in TYPED_COLUMNS:  # typed columns (tierer.py): kept as typed
        if typed in rows.column_names:
            schema = schema.append(rows.schema.field(typed))
    body = rows.select(schema.names).cast(schema)
    # Buffered: the writer asks for its position at every page, an lseek on a bare file.
    with object_store.open_output(path, WRITE_BUFFER_BYTES) as out:
        pq.write_table(body, out, row_group_size=ROW_GROUP_ROWS, compression="snappy", write_statistics=True,
                       use_dictionary=DICTIONARY_COLUMNS)
    # An object is whole once its upload completed (closing the stream); a local file is synced here.
    size = object_store.size(path) if object_store.is_remote(path) else release_pages(path)
    ts = pc.min_max(body.column("timestamp").cast(pa.int64()))
    min_ts, max_ts = ts["min"].as_py(), ts["max"].as_py()
    epoch = pc.min_max(body.column("leader_epoch"))
    txn = pc.min_max(body.column("transactional"))
    stats = {
        "numRecords": body.num_rows,
        "minValues": {"offset": first, "timestamp": iso_ms(min_ts, ceil=False), "leader_epoch": epoch["min"].as_py(),
                      "transactional": txn["min"].as_py()},
        "maxValues": {"offset": last, "timestamp": iso_ms(max_ts, ceil=True), "leader_epoch": epoch["max"].as_py(),
                      "transactional": txn["max"].as_py()},
        "nullCount": {
            "offset": 0,
            "timestamp": 0,
            "key": body.column("key").null_count,
            "value": body.column("value").null_count,
            "control": body.column("control").null_count,
        },
    }
    add = AddAction(rel, size, {"partition": str(partition)}, now_ms, data_change, json.dumps(stats))
    return rel, add, DataFile(first, last, rel, body.num_rows, min_ts, max_ts, size)


def release_pages(path: str) -> int:
    """``fdatasync`` the file, then drop its pages from the page cache (only clean pages
    can be dropped, hence the sync first); its size. macOS has neither call: there the
    file is ``fsync``-ed and its pages stay."""
    fd = os.open(path, os.O_RDONLY)
    try:
        getattr(os, "fdatasync", os.fsync)(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def iso_ms(us: int, ceil: bool) -> str:
    """A Delta statistics timestamp: ISO 8601, milliseconds, UTC."""
    ms = -(-us // 1000) if ceil else us // 1000
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
