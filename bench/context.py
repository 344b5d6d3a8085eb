"""What every benchmark gets: parameters, a work directory, servers, progress, profiling.

Role: keep the benchmarks themselves short. :class:`Params` holds the sizes (the small
default suite, or the issue's sizes under ``--full``); :class:`Context` starts servers
(and stops them all at the end), shows progress with rich, and re-measures a missed
target under py-spy (:meth:`Context.explain`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from bench import profile
from bench.figures import Figure
from bench.procs import BaselineServer, LaketailServer, NatsServer


@dataclass
class Params:
    full: bool = False
    seconds: float = 5.0  # each wrk measurement
    warmup_s: float = 1.0
    repeats: int = 3  # baseline and laketail alternate this many times; medians kept
    #: Benchmark 1 again with the broker split into this many request processes (issue
    #: 18): one per core of this machine; 1 leaves the figures out.
    request_processes: int = field(default_factory=lambda: min(os.cpu_count() or 1, 4))
    connections: int = 8
    batches: tuple[int, ...] = (1, 100, 1000)
    value_bytes: int = 100
    arrow_records: int = 1000  # per Arrow produce request ...
    arrow_value_bytes: int = 1000  # ... of this value size (1 MB bodies)
    arrow_connections: int = 4
    fetch_records: int = 500  # per fetch response (the broker's default max)
    flat_commits: int = 300
    flat_records: int = 1_000_000
    flat_stages: int = 3
    flat_rate: float = 100.0  # half of target 5's load: measure the path, not queueing
    flat_window_s: float = 10.0
    naive_commits: int = 300
    latency_rate: float = 200.0
    latency_seconds: float = 20.0
    nats_seconds: float = 5.0
    memory_seconds: float = 120.0
    memory_rate: float = 100.0
    memory_batch: int = 100
    spark_records: int = 10_000_000  # benchmark 6's topic (the issue's size, also by default)
    group_records: int = 200_000  # benchmark 10: records each producer, consumer and loop handles
    txn_interval_ms: int = 100  # benchmark 10: the transactional producer commits this often
    rebalance_rounds: int = 5
    schema_records: int = 1_000_000  # benchmark 14's typed topic for the Spark figure
    tier_rate: float = 2000.0  # benchmark 14: records/s produced to each of the tier-delay topics
    profile: bool = True
    only: tuple[int, ...] = ()

    @classmethod
    def full_suite(cls, **overrides: Any) -> "Params":
        """The issue's sizes: 5,000 commits and 10M records, 10 minutes of memory."""
        base = dict(full=True, seconds=15.0, warmup_s=3.0, flat_commits=5000,
                    flat_records=10_000_000, flat_stages=5, flat_window_s=20.0, naive_commits=5000,
                    latency_seconds=60.0, nats_seconds=15.0, memory_seconds=600.0)
        base.update(overrides)
        return cls(**base)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Context:
    params: Params
    workdir: Path
    results_dir: Path
    stamp: str
    console: Console = field(default_factory=Console)
    plots: list[str] = field(default_factory=list)
    _stack: ExitStack = field(default_factory=ExitStack)
    _baseline: BaselineServer | None = None
    _progress: Progress | None = None
    _task: Any = None

    # -- servers ---------------------------------------------------------------------

    def laketail(self, name: str, processes: int = 1) -> LaketailServer:
        """A fresh broker on its own data root (``processes`` request processes),
        stopped when the suite ends."""
        server = LaketailServer(self.workdir / f"laketail-{name}", processes=processes)
        self.status(f"starting laketail ({name})")
        server.start()
        self._stack.callback(server.stop)
        return server

    def stop(self, server) -> None:
        server.stop()

    def baseline(self) -> BaselineServer:
        """The bare FastAPI app, shared by all benchmarks."""
        if self._baseline is None or self._baseline.proc.poll() is not None:
            self._baseline = BaselineServer(self.workdir / "baseline")
            self.status("starting the baseline app")
            self._baseline.start()
            self._stack.callback(self._baseline.stop)
        return self._baseline

    def nats(self, sync_always: bool) -> NatsServer:
        server = NatsServer(self.workdir / "nats", sync_always)
        server.start()
        self._stack.callback(server.stop)
        return server

    def close(self) -> None:
        self._stack.close()

    # -- progress --------------------------------------------------------------------

    def progress(self) -> Progress:
        if self._progress is None:
            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                      TimeElapsedColumn(), console=self.console, transient=False)
        return self._progress

    def begin(self, title: str) -> None:
        progress = self.progress()
        if self._task is not None:
            progress.update(self._task, completed=1, total=1)
        self._task = progress.add_task(title, total=None)
        self._title = title

    def status(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=f"{self._title}: {text}")

    def wait(self, seconds: float, text: str) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.status(f"{text} ({left:.0f}s left)")
            time.sleep(min(1.0, left))

    # -- explaining a miss -------------------------------------------------------------

    def explain(self, figure: Figure, pid: int, seconds: float, rerun: Callable[[], Any]) -> None:
        """When ``figure`` missed its target, run ``rerun`` again under py-spy on ``pid``
        and attach the top frames to the figure's details."""
        if not self.params.profile or figure.passed is not False:
            return
        slug = "".join(c if c.isalnum() else "-" for c in f"{figure.bench}-{figure.name}").strip("-")
        out = self.results_dir / "profiles" / f"{self.stamp}-{slug}.txt"
        self.status(f"profiling a miss: {figure.name}")
        with profile.recording(pid, out, seconds) as summary:
            try:
                rerun()
            except Exception as exc:  # the profile still says where time went
                summary["rerun_error"] = str(exc)
        figure.details["profile"] = summary


def save_plot(ctx: Context, fig, name: str) -> str:
    """Save a matplotlib figure as bench/results/<name>.png (the latest run's plot)."""
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.results_dir / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    ctx.plots.append(str(path))
    return str(path)
