"""Files under the data root, on a local folder or an object store.

Role: the one place that knows whether a path under the data root (``--data``) is a
local file or an object in a bucket (``s3://bucket/prefix``, ``gs://``, ``az://``: any
URI delta-rs understands), and does for both what the table tier needs of files:
write a data file, open one for reading, delete a file or a folder.

An object store is reached through delta-rs's own object store (its
``DeltaStorageHandler`` wrapped as a pyarrow file system), so data files travel with
the same settings as the Delta commits that name them: delta-rs reads its storage
options from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, ``GOOGLE_*``, ``AZURE_*``:
each option as its upper-case variable). Delta commits on S3 need no lock provider:
delta-rs 1.x writes each commit file with a conditional put (``If-None-Match: *``).

Local paths keep their fast paths (``fdatasync`` and page release of written files,
plain ``open``); callers ask :func:`is_remote` where the two differ.

Thread-safety: the file systems are cached per bucket and shared; delta-rs's object
store is safe to use from several threads.
"""

from __future__ import annotations

import os
import shutil
import threading
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

_FILE_SYSTEMS: dict[str, pafs.FileSystem] = {}
_LOCK = threading.Lock()


def is_remote(uri: str) -> bool:
    """Whether ``uri`` names an object store (a URI with a scheme other than ``file``)."""
    return "://" in uri and not uri.startswith("file://")


def _split(uri: str) -> tuple[pafs.FileSystem, str]:
    """The cached file system of ``uri``'s bucket and the key inside it."""
    parts = urlsplit(uri)
    bucket = f"{parts.scheme}://{parts.netloc}"
    with _LOCK:
        fs = _FILE_SYSTEMS.get(bucket)
        if fs is None:
            from deltalake.fs import DeltaStorageHandler

            fs = _FILE_SYSTEMS[bucket] = pafs.PyFileSystem(DeltaStorageHandler(bucket))
    return fs, parts.path.lstrip("/")


def open_output(uri: str, buffer_size: int) -> pa.NativeFile:
    """A buffered stream writing the object or file at ``uri`` (its folders made when
    local). An object is uploaded as the stream goes and appears whole at its close."""
    if is_remote(uri):
        fs, key = _split(uri)
        return pa.BufferedOutputStream(fs.open_output_stream(key), buffer_size)
    os.makedirs(os.path.dirname(uri), exist_ok=True)
    return pa.output_stream(uri, buffer_size=buffer_size)


def parquet_file(uri: str, **kwargs) -> pq.ParquetFile:
    """The Parquet file at ``uri``, opened for reading (``kwargs`` go to ``ParquetFile``)."""
    if is_remote(uri):
        fs, key = _split(uri)
        return pq.ParquetFile(fs.open_input_file(key), **kwargs)
    return pq.ParquetFile(uri, **kwargs)


def read_parquet(uri: str, columns: list[str] | None = None) -> pa.Table:
    """``columns`` of the whole Parquet file at ``uri``, as a pyarrow Table."""
    if is_remote(uri):
        return parquet_file(uri).read(columns=columns)
    return pq.read_table(uri, columns=columns)


def read_bytes(uri: str) -> bytes:
    """The whole file or object at ``uri`` (FileNotFoundError, an OSError, when absent)."""
    if is_remote(uri):
        fs, key = _split(uri)
        with fs.open_input_stream(key) as stream:
            return stream.read()
    with open(uri, "rb") as file:
        return file.read()


def size(uri: str) -> int:
    """The size in bytes of the file or object at ``uri``."""
    if is_remote(uri):
        fs, key = _split(uri)
        return fs.get_file_info(key).size or 0
    return os.stat(uri).st_size


def exists(uri: str) -> bool:
    """Whether a file or object is at ``uri`` (a stat; one HEAD request on an object store)."""
    if is_remote(uri):
        fs, key = _split(uri)
        return fs.get_file_info(key).type != pafs.FileType.NotFound
    return os.path.exists(uri)


def remove_file(uri: str) -> None:
    """Delete the file or object at ``uri``; nothing when it is not there."""
    try:
        if is_remote(uri):
            fs, key = _split(uri)
            fs.delete_file(key)
        else:
            os.unlink(uri)
    except (FileNotFoundError, OSError):
        pass


def remove_tree(uri: str) -> None:
    """Delete the folder at ``uri`` with everything under it (every object under the
    prefix on an object store); nothing when it is not there."""
    if is_remote(uri):
        fs, key = _split(uri.rstrip("/"))
        try:
            fs.delete_dir(key)
        except (FileNotFoundError, OSError):
            pass
        return
    shutil.rmtree(uri, ignore_errors=True)


def list_folders(uri: str) -> list[str]:
    """Names of the folders right under ``uri`` (the common prefixes under it, on an
    object store); empty when there is none."""
    if is_remote(uri):
        fs, key = _split(uri.rstrip("/"))
        try:
            infos = fs.get_file_info(pafs.FileSelector(key, allow_not_found=True))
        except (FileNotFoundError, OSError):
            return []
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)
    return sorted(e.name for e in os.scandir(uri) if e.is_dir()) if os.path.isdir(uri) else []


def make_root(uri: str) -> None:
    """Make the local folder ``uri``; an object store needs none (keys are made by writes)."""
    if not is_remote(uri):
        os.makedirs(uri, exist_ok=True)
