"""``kill -9`` of the exactly-once pipeline's driver, three times, loses and duplicates
nothing: every input lands in the sink exactly once for read_committed readers.

``jobs/eos_pipeline.py`` runs as a plain script, in its own process group (the Python
driver, its JVM, the JVM's Python workers), over a two-partition source filled up front
and read in micro-batches of :data:`MAX_OFFSETS_PER_TRIGGER` records. Each run is
killed with SIGKILL to the whole group once it has provably made progress, at a
different point each time (:data:`KILL_POINTS`):

1. ``between_batches`` -- this run recorded a finished batch in the checkpoint's
   ``commits/``;
2. ``mid_batch`` -- this run finished a batch and planned the next one (in
   ``offsets/``, not yet in ``commits/``): its writer tasks may be producing into
   transactions of the sink that the replay must abort;
3. ``after_sink_commit`` -- the sink's committed records grew during this run (the
   sink committed a batch, which Spark may not have recorded yet: its replay must be
   a no-op).

A last run with ``--available-now`` resumes from the checkpoint and finishes. The sink,
read with ``isolation_level=read_committed``, must then hold each upper-cased input
exactly once, and no transaction may be left open (last stable offset = high
watermark). At each kill the sink must already be free of duplicates, and at least one
kill must find some but not all inputs there, so a restart really resumed mid-stream.

Waiting is polling with a deadline; a deadline bounds how long a broken run can hang
the test, it says nothing about speed (a Spark driver takes 12 s or more to start, far
more on a loaded machine).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.fault]

PIPELINE = Path(__file__).resolve().parents[2] / "jobs" / "eos_pipeline.py"
PARTITIONS = 2
INPUTS_PER_PARTITION = 1200
MAX_OFFSETS_PER_TRIGGER = 400  # six micro-batches in all
KILL_POINTS = ("between_batches", "mid_batch", "after_sink_commit")
#: Failure bound for one run to start and make the progress its kill waits for.
PROGRESS_DEADLINE_S = 300.0
#: Failure bound for the last run (start, then every batch left).
FINISH_DEADLINE_S = 420.0
#: Spark waits a fixed 10 s for each Python worker it starts (data source planning,
#: the stream reader) to connect back; on a loaded machine one can take longer, and
#: the query fails by itself with this message. Such a run is started again -- one more
#: crash and restart, which exactly-once has to survive as well -- at most this often.
WORKER_TIMEOUT = "Python worker failed to connect back"
WORKER_TIMEOUT_RESTARTS = 3
#: The drivers' Spark settings: no UI and no progress bar; a C1-only JIT, so a driver
#: that lives a minute spends its CPU on the pipeline rather than on compiling it; and
#: the JVM's case mapping for upper() instead of ICU's (the same for these ASCII values,
#: without ICU's table build in every new JVM). Measured on this pipeline: a whole
#: six-batch run took 33 s of CPU with them; without them, one had used 40 s and not yet
#: finished its first batch. Less CPU also means fewer workers missing Spark's 10 s.
SUBMIT_ARGS = ("--master local[2] --conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false "
               "--conf spark.sql.icu.caseMappings.enabled=false --driver-java-options -XX:TieredStopAtLevel=1 "
               "pyspark-shell")


def _tail(path: Path, limit: int = 4000) -> str:
    text = path.read_text(errors="replace") if path.exists() else "<no output>"
    return text if len(text) <= limit else "...\n" + text[-limit:]


class SparkGaveUp(Exception):
    """The run exited by itself because a Python worker missed Spark's 10 s."""


class PipelineRun:
    """One ``python jobs/eos_pipeline.py`` process group; its output goes to files."""

    def __init__(self, argv: list[str], run_dir: Path, name: str) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = run_dir / f"{name}.stdout"
        self.stderr_path = run_dir / f"{name}.stderr"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKETAIL_", "PYSPARK_"))}
        env["PYTHONUNBUFFERED"] = "1"
        env["PYSPARK_SUBMIT_ARGS"] = SUBMIT_ARGS
        env["SPARK_LOCAL_DIRS"] = str(run_dir / "spark-local")  # what a killed JVM leaves stays here
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(PIPELINE), *argv], cwd=run_dir, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
            )

    def output(self) -> str:
        return (f"--- stderr ({self.stderr_path}) ---\n{_tail(self.stderr_path)}\n"
                f"--- stdout ({self.stdout_path}) ---\n{_tail(self.stdout_path, 2000)}")

    def check_alive(self) -> None:
        """Raise when the run has exited: :class:`SparkGaveUp`, or a test failure."""
        code = self.proc.poll()
        if code is None:
            return
        if code == 1 and WORKER_TIMEOUT in self.stderr_path.read_text(errors="replace"):
            raise SparkGaveUp(self.output())
        raise AssertionError(f"the pipeline exited by itself with code {code}\n{self.output()}")

    def kill9(self) -> int:
        """SIGKILL to the whole group (driver, JVM, workers); the driver's exit code."""
        self._killpg()
        return self.proc.wait()

    def _killpg(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def reap(self) -> None:
        """Kill whatever is left of the group and wait (after the run, whatever happened)."""
        self._killpg()
        self.proc.wait()


def _batches(checkpoint: Path, log: str) -> set[int]:
    """Batch ids in the checkpoint's ``offsets/`` or ``commits/`` log (files named by
    the id; Spark writes each under a temporary name and renames it)."""
    folder = checkpoint / log
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


class CommittedSink:
    """What read_committed consumers see in the sink topic."""

    PARAMS = {"isolation_level": "read_committed"}

    def __init__(self, rest: Any, topic: str, expected: Counter) -> None:
        self.rest, self.topic, self.expected = rest, topic, expected
        self._ends: list[int] | None = None
        self._values: Counter = Counter()

    def end_offsets(self, isolation_level: str = "read_committed") -> list[int]:
        ends = []
        for p in range(PARTITIONS):
            resp = self.rest.http.get(f"/topics/{self.topic}/partitions/{p}/offsets",
                                      params={"isolation_level": isolation_level})
            assert resp.status_code == 200, resp.text
            ends.append(resp.json()["end_offset"])
        return ends

    def values(self) -> Counter:
        """Every committed value, read again only when a last stable offset moved;
        fails at once on a value written twice or never sent."""
        ends = self.end_offsets()
        if ends != self._ends:
            values: Counter = Counter()
            for p, end in enumerate(ends):
                offset = 0
                while offset < end:
                    resp = self.rest.http.get(
                        f"/topics/{self.topic}/partitions/{p}/records", params={**self.PARAMS, "offset": offset},
                        headers={"Accept": "application/vnd.kafka.binary.v2+json"})
                    assert resp.status_code == 200, resp.text
                    batch = resp.json()
                    if not batch:
                        break
                    values.update(base64.b64decode(r["value"]) for r in batch)
                    offset = batch[-1]["offset"] + 1
            extra = values - self.expected
            assert not extra, f"the sink holds values twice or never sent: {sorted(extra.items())[:10]}"
            self._ends, self._values = ends, values
        return self._values

    def count(self) -> int:
        return sum(self.values().values())


def _poll(run: PipelineRun, check: Callable[[], Any], what: str) -> None:
    """Poll ``check`` while the run is alive, until it returns something truthy."""
    deadline = time.monotonic() + PROGRESS_DEADLINE_S
    while True:
        run.check_alive()
        if check():
            return
        assert time.monotonic() < deadline, f"no {what} within {PROGRESS_DEADLINE_S:.0f}s\n{run.output()}"
        time.sleep(0.1)


@pytest.mark.timeout(1200)
def test_pipeline_killed_three_times_writes_each_input_exactly_once(broker, make_topic, tmp_path):
    rest = broker.rest
    source, sink_topic = make_topic(PARTITIONS), make_topic(PARTITIONS)
    inputs = [f"in-p{p}-{i:05d}".encode() for p in range(PARTITIONS) for i in range(INPUTS_PER_PARTITION)]
    for p in range(PARTITIONS):
        mine = inputs[p * INPUTS_PER_PARTITION:(p + 1) * INPUTS_PER_PARTITION]
        for start in range(0, len(mine), 500):
            resp = rest.produce_binary(source, [{"value": v} for v in mine[start:start + 500]], partition=p)
            assert resp.status_code == 200, resp.text
    expected = Counter(v.upper() for v in inputs)
    sink = CommittedSink(rest, sink_topic, expected)

    checkpoint = tmp_path / "checkpoint"
    argv = ["--servers", broker.url, "--source", source, "--sink", sink_topic, "--checkpoint", str(checkpoint),
            "--max-offsets-per-trigger", str(MAX_OFFSETS_PER_TRIGGER), "--trigger-interval-s", "0.5"]
    runs_dir = tmp_path / "runs"
    started = time.monotonic()
    kills: list[dict[str, Any]] = []
    gave_up: list[str] = []

    def progress(point: str) -> tuple[Callable[[], Any], str]:
        commits_before = _batches(checkpoint, "commits")
        in_sink_before = sink.count()

        def new_commit() -> bool:
            return bool(_batches(checkpoint, "commits") - commits_before)

        def next_planned() -> bool:
            return new_commit() and max(_batches(checkpoint, "offsets")) > max(_batches(checkpoint, "commits"))

        if point == "between_batches":
            return new_commit, "new batch in commits/"
        if point == "mid_batch":
            return next_planned, "new batch in commits/ and a planned one after it"
        return (lambda: sink.count() > in_sink_before), "new committed records in the sink"

    for n, point in enumerate(KILL_POINTS):
        check, what = progress(point)
        for attempt in range(WORKER_TIMEOUT_RESTARTS + 1):
            run = PipelineRun(argv, runs_dir, f"run-{n}-{point}-{attempt}")
            try:
                _poll(run, check, what)
                code = run.kill9()
                break
            except SparkGaveUp:
                gave_up.append(run.stderr_path.name)
                assert attempt < WORKER_TIMEOUT_RESTARTS, f"Spark gave up on every run: {gave_up}\n{run.output()}"
            finally:
                run.reap()
        assert code == -signal.SIGKILL, f"run {n} ended with {code}, not by SIGKILL\n{run.output()}"
        kills.append({"point": point, "in_sink": sink.count(), "commits": sorted(_batches(checkpoint, "commits")),
                      "offsets": sorted(_batches(checkpoint, "offsets")), "at_s": round(time.monotonic() - started)})

    for attempt in range(WORKER_TIMEOUT_RESTARTS + 1):
        last = PipelineRun([*argv, "--available-now"], runs_dir, f"run-final-{attempt}")
        try:
            code = last.proc.wait(timeout=FINISH_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the --available-now run did not finish within {FINISH_DEADLINE_S:.0f}s\n{last.output()}")
        finally:
            last.reap()
        if code == 0:
            break
        try:
            last.check_alive()
        except SparkGaveUp:
            gave_up.append(last.stderr_path.name)
            assert attempt < WORKER_TIMEOUT_RESTARTS, f"Spark gave up on every run: {gave_up}\n{last.output()}"
    print(f"kills: {kills}; runs Spark gave up on: {gave_up}; done after {time.monotonic() - started:.0f}s")

    assert any(0 < k["in_sink"] < len(inputs) for k in kills), f"no kill found the pipeline mid-stream: {kills}"
    assert sink.values() == expected, f"inputs missing from the sink; kills: {kills}\n{last.output()}"
    committed, everything = sink.end_offsets(), sink.end_offsets("read_uncommitted")
    assert committed == everything, f"a transaction is left open in the sink: LSOs {committed}, HWs {everything}"
