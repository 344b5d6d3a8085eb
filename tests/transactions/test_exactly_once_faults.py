"""Exactly-once under SIGKILL: of the consume-transform-produce worker, many times at
random moments, and of the broker between a transaction's PREPARE and its markers.

Randomness is seeded and the seed is in every failure message, so a failing run can
be replayed. Nothing waits a fixed time for an outcome: the tests poll with deadlines.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from .conftest import TXN_ENV
from .support import Session, read_records, read_values, unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

WORKER = Path(__file__).with_name("eos_worker.py")
PARTITIONS = 2
RECORDS_PER_PARTITION = 300
KILLS = 6


def committed_offsets(http: httpx.Client, group: str, topic: str) -> dict[int, int]:
    resp = http.post(f"/v1/groups/{group}/committed", json={
        "partitions": [{"topic": topic, "partition": p} for p in range(PARTITIONS)],
    })
    assert resp.status_code == 200, resp.text
    return {o["partition"]: o["offset"] for o in resp.json()["offsets"]}


def test_a_worker_killed_at_random_moments_leaves_each_input_exactly_once(txn_broker, make_topic, tmp_path):
    seed = int(os.environ.get("LAKETAIL_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    source = make_topic(partitions=PARTITIONS, broker=txn_broker)
    output = make_topic(partitions=PARTITIONS, broker=txn_broker)
    rest = txn_broker.rest
    for p in range(PARTITIONS):
        for start in range(0, RECORDS_PER_PARTITION, 100):
            resp = rest.produce_binary(
                source, [{"value": f"p{p}-{i}".encode()} for i in range(start, start + 100)], partition=p,
            )
            assert resp.status_code == 200, resp.text
    group, txid = unique("eos-group"), unique("eos-worker")
    argv = [sys.executable, str(WORKER), txn_broker.url, source, output, group, txid, str(PARTITIONS),
            "--batch", "5"]

    def run(n: int) -> subprocess.Popen:
        with open(tmp_path / f"worker-{n}.out", "wb") as out, open(tmp_path / f"worker-{n}.err", "wb") as err:
            return subprocess.Popen(argv, stdout=out, stderr=err)

    def logs(n: int) -> str:
        return (tmp_path / f"worker-{n}.err").read_text()[-3000:]

    kills = 0
    last = committed_offsets(rest.http, group, source)
    for n in range(KILLS):
        worker = run(n)

        def committed_beyond(previous: dict[int, int], worker=worker, n=n) -> dict[int, int] | None:
            failed = worker.poll() not in (None, 0)
            assert not failed, f"seed {seed}: worker {n} failed:\n{logs(n)}"
            now = committed_offsets(rest.http, group, source)
            return now if now != previous or worker.poll() == 0 else None

        # Two commits of this incarnation (so every kill leaves work behind it) tell how
        # long a transaction takes here; the kill then comes at a random moment within
        # about one more transaction: before, inside or after it, on any machine.
        first = wait_until(lambda last=last: committed_beyond(last), f"worker {n}'s first commit (seed {seed})",
                           timeout_s=120, every_s=0.01)
        started = time.monotonic()
        wait_until(lambda first=first: committed_beyond(first), f"worker {n}'s second commit (seed {seed})",
                   timeout_s=120, every_s=0.01)
        if worker.poll() is not None:
            break  # it finished before this kill came
        time.sleep(rng.uniform(0.0, 1.5 * (time.monotonic() - started)))
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        kills += 1
        last = committed_offsets(rest.http, group, source)
    assert kills >= KILLS - 1, f"seed {seed}: the worker finished after only {kills} kills; give it more input"

    final = run(KILLS)
    try:
        assert final.wait(timeout=300) == 0, f"seed {seed}: the last worker failed:\n{logs(KILLS)}"
    finally:
        if final.poll() is None:
            final.kill()
            final.wait()

    assert committed_offsets(rest.http, group, source) == {p: RECORDS_PER_PARTITION for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        expected = [f"out:p{p}-{i}".encode() for i in range(RECORDS_PER_PARTITION)]
        got = read_values(rest.http, output, p)
        counts = Counter(got)
        twice = sorted(v for v, c in counts.items() if c > 1)
        missing = sorted(set(expected) - set(got))
        assert not twice and not missing, f"seed {seed}: partition {p}: duplicated {twice[:10]}, missing {missing[:10]}"
        assert got == expected, f"seed {seed}: partition {p} is out of order"
        # Attempts the kills cut short are in the log, aborted; read_committed skipped them.
        uncommitted = read_values(rest.http, output, p, "read_uncommitted")
        assert set(uncommitted) == set(expected) and len(uncommitted) >= len(got)
        print(f"partition {p}: {len(uncommitted) - len(got)} aborted record(s) skipped (seed {seed})")
    # Every run was a new session of the same transactional id (epochs 0..kills; each fenced the last).
    described = rest.http.get(f"/v1/transactions/{txid}").json()
    assert described["producer_epoch"] == kills and described["state"] == "CompleteCommit"


PAUSE_ENV = {**TXN_ENV, "LAKETAIL_FAULT_PAUSE_AFTER_PREPARE_MS": "600000"}


def test_a_broker_killed_between_prepare_and_the_markers_completes_the_commit_on_restart(
        broker_factory, make_topic):
    broker = broker_factory(env=PAUSE_ENV)
    topic = make_topic(partitions=2, broker=broker)
    source = make_topic(broker=broker)
    http = broker.rest.http
    txid, group = unique("prepared"), unique("prepared-group")
    session = Session(http, txid)
    assert session.begin().status_code == 200
    for p in range(2):
        assert session.produce(topic, p, [f"txn-{p}-a".encode(), f"txn-{p}-b".encode()]).status_code == 200
    assert session.send_offsets(group, {(source, 0): 42}).status_code == 200
    # Plain data after the transaction: read_committed must not see it before the commit.
    assert broker.rest.produce_binary(topic, [{"value": b"after"}], partition=0).status_code == 200

    answer: list = []

    def commit() -> None:  # blocks in the pause; its connection dies with the broker
        with httpx.Client(base_url=broker.url, timeout=120) as client:
            try:
                answer.append(client.post(f"{session.path}/commit", json=session.ident))
            except httpx.TransportError as exc:
                answer.append(exc)

    committer = threading.Thread(target=commit)
    committer.start()
    wait_until(lambda: session.describe()["state"] == "PrepareCommit", "the transaction to be prepared")
    assert read_values(http, topic, 0) == []  # no marker yet: still held back
    broker.kill9()
    committer.join(timeout=60)
    assert answer and isinstance(answer[0], httpx.TransportError), answer

    broker.extra_env = dict(TXN_ENV)  # recovery must not need the pause; later commits must not pause
    broker.restart()
    http = session.http = broker.rest.http  # the old client went with the old process
    assert session.describe()["state"] == "CompleteCommit"
    assert read_values(http, topic, 0) == [b"txn-0-a", b"txn-0-b", b"after"]
    assert read_values(http, topic, 1) == [b"txn-1-a", b"txn-1-b"]
    offsets = [r["offset"] for r in read_records(http, topic, 0)]
    assert offsets == [0, 1, 2]  # the marker comes after them all, at 3
    resp = http.post(f"/v1/groups/{group}/committed", json={"partitions": [{"topic": source, "partition": 0}]})
    assert resp.json()["offsets"][0]["offset"] == 42
    # The session lives on after the restart: its next transaction works.
    assert session.begin().status_code == 200
    assert session.produce(topic, 1, [b"next"]).status_code == 200
    assert session.abort().json() == {"state": "CompleteAbort"}
    assert read_values(http, topic, 1) == [b"txn-1-a", b"txn-1-b"]
