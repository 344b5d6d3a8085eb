"""A data file the tierer (or a compaction) writes leaves the page cache once it is
durable (``data_files.release_pages``): its pages are what the next write takes. Checked
with ``mincore`` over a mapping of the file, against a file written without it."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laketail.records import HEADER_TYPE, TIMESTAMP_TYPE
from laketail.storage.data_files import write_data_file

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_fadvise and mincore are Linux's")

PAGE = mmap.PAGESIZE


def resident_pages(path: str) -> int:
    """How many of the file's pages are in the page cache."""
    size = os.path.getsize(path)
    pages = (size + PAGE - 1) // PAGE
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mapped:
        address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        vector = (ctypes.c_ubyte * pages)()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(v & 1 for v in vector)


def rows(n: int) -> pa.Table:
    values = [os.urandom(1000) for _ in range(n)]
    return pa.table({
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([1_700_000_000_000_000] * n, TIMESTAMP_TYPE),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.nulls(n, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.nulls(n, HEADER_TYPE),
        "producer_id": pa.array([-1] * n, pa.int64()),
        "producer_epoch": pa.array([-1] * n, pa.int16()),
        "sequence": pa.array([-1] * n, pa.int32()),
        "transactional": pa.array([False] * n),
        "control": pa.nulls(n, pa.string()),
        "leader_epoch": pa.array([0] * n, pa.int32()),
    })


def test_a_written_data_file_is_on_disk_and_out_of_the_page_cache(tmp_path: Path) -> None:
    table = rows(2_000)  # about 2 MB of random values
    plain = tmp_path / "plain.parquet"
    pq.write_table(table, plain)
    assert resident_pages(str(plain)) > 100  # written the usual way, the pages stay cached

    rel, add, data_file = write_data_file(str(tmp_path / "t"), 0, table, 1_700_000_000_000)
    path = str(tmp_path / "t" / rel)
    assert resident_pages(path) == 0  # dropped, which only clean (written back) pages can be
    assert add.size == data_file.size_bytes == os.path.getsize(path)
    assert pq.read_table(path).column("value").equals(table.column("value"))  # read back from disk
