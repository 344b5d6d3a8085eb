"""What the Spark tests share: producing through the gateway and waiting on offsets.

* :func:`produce` -- records to one partition through the ``/v1`` Arrow endpoint;
* :class:`Txn` -- one transactional producer session (``/v1/producers``, transactional
  per-partition produce, commit / abort);
* :func:`table_info` / :func:`wait_tiered` -- ``GET /v1/topics/{t}/table``, and polling
  it until the Delta table holds everything below the high watermark;
* :func:`read` -- a ``format("laketail")`` batch read as sorted Python tuples;
* :func:`retain_after_first_file` -- retention of a partition's first table file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import httpx
import pyarrow as pa

from laketail.maintenance.retention import RetentionPlan
from laketail.maintenance.table_commit import TableSnapshot, commit_retention

ARROW = "application/vnd.apache.arrow.stream"
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = 120.0, every_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def records_table(values: list[bytes | None], keys: list[bytes | None] | None = None,
                  headers: list | None = None, timestamps_ms: list[int] | None = None) -> pa.Table:
    columns: dict[str, pa.Array] = {"value": pa.array(values, pa.binary())}
    if keys is not None:
        columns["key"] = pa.array(keys, pa.binary())
    if headers is not None:
        columns["headers"] = pa.array(headers, HEADERS)
    if timestamps_ms is not None:
        columns["timestamp"] = pa.array(timestamps_ms, pa.int64())
    return pa.table(columns)


def produce(url: str, topic: str, partition: int, values: list[bytes | None], **columns: Any) -> list[int]:
    """Produce to one partition; the offsets assigned, in order."""
    body = ipc(records_table(values, **columns))
    resp = httpx.post(f"{url}/v1/topics/{topic}/partitions/{partition}/records", content=body,
                      headers={"Content-Type": ARROW}, timeout=60)
    assert resp.status_code == 200, resp.text
    span = resp.json()["offsets"][0]
    return list(range(span["base_offset"], span["last_offset"] + 1))


class Txn:
    """One transactional producer session."""

    def __init__(self, url: str, transactional_id: str) -> None:
        self.url = url
        self.transactional_id = transactional_id
        doc = httpx.post(f"{url}/v1/producers", json={"transactional_id": transactional_id}, timeout=60).json()
        self.session = {"producer_id": doc["producer_id"], "producer_epoch": doc["producer_epoch"]}
        self.sequences: dict[tuple[str, int], int] = {}

    def produce(self, topic: str, partition: int, values: list[bytes]) -> list[int]:
        sequence = self.sequences.get((topic, partition), 0)
        resp = httpx.post(
            f"{self.url}/v1/topics/{topic}/partitions/{partition}/records",
            content=ipc(records_table(values)), headers={"Content-Type": ARROW},
            params={**self.session, "sequence": sequence, "transactional": "true"}, timeout=60,
        )
        assert resp.status_code == 200, resp.text
        self.sequences[(topic, partition)] = sequence + len(values)
        span = resp.json()["offsets"][0]
        return list(range(span["base_offset"], span["last_offset"] + 1))

    def end(self, commit: bool) -> None:
        verb = "commit" if commit else "abort"
        resp = httpx.post(f"{self.url}/v1/transactions/{self.transactional_id}/{verb}", json=self.session, timeout=60)
        assert resp.status_code == 200, resp.text


def aborted_then_committed(url: str, topic: str) -> None:
    """Two transactions on partition 0 of ``topic``: one aborted (``gone-1``, ``gone-2``),
    then one committed (``kept``); each ends with its marker."""
    aborted = Txn(url, f"{topic}-a")
    aborted.produce(topic, 0, [b"gone-1", b"gone-2"])
    aborted.end(commit=False)
    committed = Txn(url, f"{topic}-c")
    committed.produce(topic, 0, [b"kept"])
    committed.end(commit=True)


def table_info(url: str, topic: str) -> dict:
    resp = httpx.get(f"{url}/v1/topics/{topic}/table", timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def wait_tiered(url: str, topic: str) -> dict:
    """Until every partition's table holds all records below its high watermark."""
    def tiered() -> dict | None:
        doc = table_info(url, topic)
        return doc if all(p["tiered_offset"] == p["high_watermark"] for p in doc["partitions"]) else None

    return wait_until(tiered, f"{topic} to be tiered")


def read(spark: Any, url: str, topic: str, **options: str) -> list[tuple]:
    """A batch read of ``topic``: (partition, offset, key, value) sorted."""
    reader = spark.read.format("laketail").option("laketail.servers", url).option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().select("partition", "offset", "key", "value").collect()
    return sorted((r.partition, r.offset, _bytes(r.key), _bytes(r.value)) for r in rows)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def delete_topic(url: str, topic: str, uri: str) -> None:
    """Delete ``topic`` through v3 and wait until its table (at ``uri``) is gone."""
    cluster = httpx.get(f"{url}/v3/clusters", timeout=30).json()["data"][0]["cluster_id"]
    resp = httpx.delete(f"{url}/v3/clusters/{cluster}/topics/{topic}", timeout=60)
    assert resp.status_code == 204, resp.text
    wait_until(lambda: not (Path(uri) / "_delta_log").exists(), "the deleted topic's table to go")


def make_again(make_topic: Callable[..., str], topic: str) -> None:
    """Create ``topic`` again under its name once its deletion has finished."""

    def made_again() -> bool:
        try:
            return make_topic(name=topic) == topic
        except AssertionError:  # the deletion is still finishing
            return False

    wait_until(made_again, "the topic to be created again", every_s=0.5)



def retain_after_first_file(data_dir: Path, topic: str) -> None:
    """Retention deletes partition 0's first table file, which must hold offsets 0-9: the
    log then starts at 10 (the table's log start transaction)."""
    snapshot = TableSnapshot.load(str(data_dir), topic, 1)
    first = snapshot.files[0][0]
    assert (first.first_offset, first.last_offset) == (0, 9)
    commit_retention(snapshot, [RetentionPlan(0, (first,), 10)])
