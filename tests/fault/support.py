"""What the restart tests share: REST helpers for the coordinators' state, and writing
records into an internal topic's hot log behind the broker's back.

* :func:`commit_offset` / :func:`committed` -- a group's committed offsets (``/v1/groups``);
* :func:`sink_state` / :func:`enlist` -- the exactly-once sink's batches (``/v1/sinks``);
* :func:`inject` -- append records straight to a partition of a *stopped* broker's hot
  log (the way a disk, an old version or an outside tool could have left them), since
  the client API refuses every append to the internal topics;
* :func:`skipped_metric` -- ``laketail_internal_records_skipped_total{topic}``.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx

from laketail.clock import SystemClock
from laketail.config import TopicConfig
from laketail.coordinator.offsets import partition_for_group
from laketail.records import build_frame_batch
from laketail.storage.partition_log import PartitionLog


def commit_offset(http: httpx.Client, group: str, topic: str, partition: int, offset: int) -> None:
    resp = http.post(f"/v1/groups/{group}/commit",
                     json={"offsets": [{"topic": topic, "partition": partition, "offset": offset}]})
    assert resp.status_code == 200, resp.text


def committed(http: httpx.Client, group: str, topic: str, partition: int) -> int:
    """The group's committed offset (-1: none)."""
    resp = http.post(f"/v1/groups/{group}/committed", json={"partitions": [{"topic": topic, "partition": partition}]})
    assert resp.status_code == 200, resp.text
    return resp.json()["offsets"][0]["offset"]


def sink_state(http: httpx.Client, sink: str) -> int:
    """The sink's last committed batch id (-1: none)."""
    resp = http.get(f"/v1/sinks/{sink}")
    assert resp.status_code == 200, resp.text
    return resp.json()["committed_batch"]


def enlist(http: httpx.Client, sink: str, batch: int) -> dict[str, Any]:
    resp = http.post(f"/v1/sinks/{sink}/batches/{batch}/enlist")
    assert resp.status_code == 200, resp.text
    return resp.json()


def inject(data_dir: Path, topic: str, key_for_partition: str, partitions: int,
           records: list[tuple[bytes | None, bytes | None]], broker_id: int = 0) -> None:
    """Append ``records`` (key, value) as one frame to the hot log of ``topic``'s
    partition that ``partition_for_group(key_for_partition)`` picks, on a stopped broker."""
    partition = partition_for_group(key_for_partition, partitions)
    directory = Path(data_dir) / "logs" / f"broker-{broker_id}" / f"{topic}-{partition}"
    assert directory.is_dir(), f"no hot log at {directory}"

    async def run() -> None:
        plog = PartitionLog.open(directory, topic, partition, TopicConfig(), SystemClock())
        frame = build_frame_batch(
            timestamps_us=[1_000_000] * len(records),
            keys=[k for k, _ in records], values=[v for _, v in records],
        )
        await plog.append(frame, leader_epoch=max(plog.latest_epoch, 0))
        await plog.close()

    asyncio.run(run())


def skipped_metric(http: httpx.Client, topic: str) -> float:
    resp = http.get("/metrics")
    assert resp.status_code == 200, resp.text
    found = re.search(
        r'^laketail_internal_records_skipped_total\{topic="' + re.escape(topic) + r'"\} (\S+)$',
        resp.text, re.MULTILINE,
    )
    assert found, f"no skipped-records metric for {topic} in /metrics"
    return float(found.group(1))
