"""The lag job as a Structured Streaming query: its driver killed with ``kill -9`` and
started again on the same checkpoint writes no lag row twice, and lag keeps moving
while the group commits nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from integration.support import wait_until

from laketail.client import Consumer, TopicPartition
from laketail.jobs.common import REPORT_PREFIX

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(900)]  # two driver JVMs

LAG_JOB = Path(__file__).resolve().parents[2] / "jobs" / "lag.py"


def _rows(table: Path) -> list[dict]:
    if not (table / "_delta_log").exists():
        return []
    return DeltaTable(str(table)).to_pyarrow_table().to_pylist()


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, str(LAG_JOB), *argv], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(LAG_JOB.parents[1]))


def _kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the JVM it started
    proc.wait(timeout=60)


def test_lag_query_survives_a_driver_kill9_without_duplicate_rows(broker, make_topic, tmp_path):
    topic = make_topic(1)
    rest = broker.rest
    assert rest.produce_binary(topic, [{"value": b"x"}] * 5, partition=0).status_code == 200
    group = f"{topic}-lag"
    consumer = Consumer({"bootstrap.servers": broker.url, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()

    table, checkpoint, log = tmp_path / "consumer_lag", tmp_path / "checkpoint", tmp_path / "driver.log"
    argv = ["--servers", broker.url, "--table", str(table), "--checkpoint", str(checkpoint),
            "--group", group, "--streaming", "--interval-s", "1"]
    proc = _start(argv, log)
    try:
        wait_until(lambda: any(r["lag"] == 3 for r in _rows(table)), "the first lag rows", 300)
        # The group commits nothing more; producers go on: lag moves anyway.
        assert rest.produce_binary(topic, [{"value": b"y"}] * 4, partition=0).status_code == 200
        wait_until(lambda: any(r["lag"] == 7 and r["status"] == "OK" for r in _rows(table)),
                   "lag to move while the group commits nothing", 120)
        _kill9(proc)
    finally:
        if proc.poll() is None:
            _kill9(proc)

    # The driver died at an arbitrary point; make the last batch one Spark runs again
    # (as when the kill falls between the Delta commit and the checkpoint's commit).
    def batch_files(kind: str) -> list[int]:
        return sorted(int(p.name) for p in (checkpoint / kind).iterdir() if p.name.isdigit())

    def forget(kind: str, batch: int) -> None:
        for name in (str(batch), f".{batch}.crc"):
            (checkpoint / kind / name).unlink(missing_ok=True)

    last = batch_files("commits")[-1]
    forget("commits", last)
    for planned in [b for b in batch_files("offsets") if b > last]:
        forget("offsets", planned)  # a next batch planned, not run: Spark plans it again
    assert max(r["batch_id"] for r in _rows(table)) >= last  # that batch's rows are in the table

    proc = _start(argv, log)
    try:
        wait_until(lambda: max(r["batch_id"] for r in _rows(table)) >= last + 2, "batches after the restart", 300)
    finally:
        _kill9(proc)

    rows = _rows(table)
    keys = [(r["batch_id"], r["group_id"], r["topic"], r["partition"]) for r in rows]
    assert len(keys) == len(set(keys)), "a micro-batch wrote its lag rows twice"
    assert sorted({r["batch_id"] for r in rows}) == list(range(max(r["batch_id"] for r in rows) + 1))
    # Spark's console progress bar shares the driver's terminal: a report may follow it on a line.
    reports = [json.loads(line[line.index(REPORT_PREFIX) + len(REPORT_PREFIX):])
               for line in log.read_text(errors="replace").splitlines() if REPORT_PREFIX in line]
    assert {"batch_id": last, "replayed": True} in [
        {k: r.get(k) for k in ("batch_id", "replayed")} for r in reports
    ], "the batch run again after the kill was not recognised as written"
