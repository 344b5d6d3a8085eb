"""Users' own Delta tools on a running broker's topic table: OPTIMIZE keeps every fetch
in offset order; an outside append at an existing offset is found by the tierer's next
pass, shown in ``topics describe``, in metrics and by ``laketail check``, and fetches of
that offset fail with CORRUPT_MESSAGE instead of serving two records."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from laketail.records import RECORD_SCHEMA

from .support import wait_for_table, wait_until

pytestmark = pytest.mark.integration

N = 20
SMALL_HOT = {"segment.bytes": "14", "local.retention.ms": "0"}  # tiered records leave the hot tier


def _produce_in_files(broker, topic: str) -> None:
    """Five produces of four records, each tiered (a file each) before the next."""
    rest = broker.rest
    for b in range(5):
        resp = rest.produce_binary(topic, [{"value": f"v{b * 4 + i}".encode()} for i in range(4)])
        assert resp.status_code == 200, resp.text
        wait_for_table(broker.table_path(topic), {0: (b + 1) * 4})
    hot_dir = broker.data_dir / "logs" / "broker-0" / f"{topic}-0"
    wait_until(lambda: len(list(hot_dir.iterdir())) < 4, "tiered hot segments to be deleted", timeout_s=90)


def _laketail(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "laketail.cli", *args, "--server", broker.url],
                          capture_output=True, timeout=120)


def test_fetches_after_an_outside_optimize_are_in_offset_order(broker, make_topic):
    topic = make_topic(configs=SMALL_HOT)
    _produce_in_files(broker, topic)
    DeltaTable(str(broker.table_path(topic))).optimize.compact()  # rows come out newest file first
    rest = broker.rest
    for start in (0, 3, 9, 17):
        def fetched(start=start):
            resp = rest.fetch(topic, 0, start, max_records=5)
            assert resp.status_code == 200, resp.text
            return [r["offset"] for r in resp.json()]
        assert fetched() == list(range(start, min(N, start + 5)))
    assert [r["offset"] for r in rest.fetch_range(topic, 0, 0, N)] == list(range(N))
    arrow = rest.http.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": 3, "max_records": 5})
    assert arrow.status_code == 200, arrow.text
    assert pa.ipc.open_stream(arrow.content).read_all().column("offset").to_pylist() == [3, 4, 5, 6, 7]
    assert _consume_v2(broker, topic) == list(range(N))
    result = _laketail(broker, "check", topic)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert f"{topic}: ok" in result.stdout.decode()


def _consume_v2(broker, topic: str) -> list[int]:
    """Offsets a v2 consumer instance (group, manual assignment, from the beginning) reads."""
    v2 = "application/vnd.kafka.v2+json"
    http = broker.rest.http
    group = f"g-{topic}"
    created = http.post(f"/consumers/{group}", json={"auto.offset.reset": "earliest"}, headers={"Content-Type": v2})
    assert created.status_code == 200, created.text
    path = f"/consumers/{group}/instances/{created.json()['instance_id']}"
    assigned = http.post(f"{path}/assignments", json={"partitions": [{"topic": topic, "partition": 0}]},
                         headers={"Content-Type": v2})
    assert assigned.status_code in (200, 204), assigned.text
    got: list[int] = []

    def read_some():
        resp = http.get(f"{path}/records", params={"timeout": 200, "max_bytes": 60},
                        headers={"Accept": "application/vnd.kafka.binary.v2+json"})
        assert resp.status_code == 200, resp.text
        got.extend(r["offset"] for r in resp.json())
        return len(got) >= N

    wait_until(read_some, f"a v2 consumer to read {N} records of {topic}")
    http.delete(path, headers={"Content-Type": v2})
    return got


def test_an_outside_append_at_an_existing_offset_is_marked_and_refused(broker, make_topic):
    topic = make_topic(configs=SMALL_HOT)
    _produce_in_files(broker, topic)
    path = str(broker.table_path(topic))
    row = DeltaTable(path).to_pyarrow_table().filter(pc.field("offset") == 7)
    row = row.set_column(row.schema.get_field_index("value"), "value", pa.array([b"intruder"]))
    write_deltalake(path, row.cast(RECORD_SCHEMA), mode="append", partition_by=["partition"])
    rest = broker.rest

    def described_damage():
        resp = rest.http.get(f"/topics/{topic}")
        assert resp.status_code == 200, resp.text
        return resp.json()["partitions"][0].get("damaged")

    damaged = wait_until(described_damage, "the tierer to mark the partition damaged")
    assert [(d["first_offset"], d["last_offset"]) for d in damaged] == [(7, 7)]

    # a consumer before the damage gets the records up to it, then a clear error at it
    before = rest.fetch(topic, 0, 4)
    assert before.status_code == 200, before.text
    assert [r["offset"] for r in before.json()] == [4, 5, 6]
    at = rest.fetch(topic, 0, 7)
    assert at.status_code == 500, at.text
    assert at.json()["message"].startswith("CORRUPT_MESSAGE: ")
    assert "7-7" in at.json()["message"]
    assert [r["offset"] for r in rest.fetch(topic, 0, 8, max_records=3).json()] == [8, 9, 10]

    metrics = rest.http.get("/metrics").text
    assert f'laketail_partition_damaged_offsets{{partition="0",topic="{topic}"}} 1.0' in metrics

    described = _laketail(broker, "topics", "describe", topic)
    assert described.returncode == 0, described.stderr.decode()
    assert "DAMAGED partition 0 offsets 7-7" in described.stdout.decode()

    checked = _laketail(broker, "check", topic)
    out = checked.stdout.decode()
    assert checked.returncode == 1, out + checked.stderr.decode()
    assert "PROBLEM offsets 7-7: offsets present more than once" in out
    assert ".parquet" in out  # names the files
