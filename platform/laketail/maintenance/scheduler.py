"""The broker's maintenance scheduler: retention and compaction of user topics.

Role: supervise ONE long-lived child, the maintenance application
(``spark-submit jobs/maintenance.py``, :mod:`laketail.maintenance.spark_submit`, local
mode by default) over the broker's data root, asking the broker's own gateway for topic
configs. The child is a Structured Streaming query that looks at the topics' table
commits every ``laketail.maintenance.interval.ms`` (its ``--interval-s``) and runs
retention and compaction of the topics that moved -- one JVM for the broker's life, not
one per interval. Internal topics are not touched (the broker compacts those itself).

Lifecycle (:meth:`MaintenanceScheduler.run`, an asyncio task of the broker): the child
starts one interval after the broker (so a starting broker does not compete with a JVM
start), and only while ``is_due()`` (in a cluster: while this broker is the controller;
it is stopped when the broker stops being it). A child that exits or dies (``kill -9``)
is logged at WARNING with the tail of its output and started again after
:attr:`restart_backoff_s`; its checkpoint makes it resume where it was. Cancelling the
task (closing the broker) stops the child's whole process group (SIGTERM, then SIGKILL)
-- maintenance is safe to stop at any point: nothing is committed until its single Delta
commit per topic and step. The child's report lines are logged at INFO as they come.

:meth:`run_once` keeps the batch form (each job once, a new ``spark-submit`` per job) for
tests and tools; cron and Airflow run ``laketail jobs run maintenance --once``.

Set ``laketail.maintenance.enable = false`` (``laketail serve --no-maintenance``) to
leave maintenance to an external scheduler (``laketail jobs run``, cron, Airflow...).

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
from typing import Callable, Sequence

from laketail.config import BrokerSettings
from laketail.maintenance.spark_submit import DEFAULT_MASTER, job_env, spark_submit_argv
from laketail.parent_death import die_with_parent_preexec

log = logging.getLogger(__name__)

SCHEDULED_JOBS = ("retention", "compaction")
_KILL_AFTER_S = 10.0
_TAIL_LINES = 200


class MaintenanceScheduler:
    """Runs the maintenance application of user topics as one supervised child of the broker.

    :meth:`run` (an asyncio task) starts ``spark-submit jobs/maintenance.py`` one interval
    after the broker, only while ``is_due()`` (the controller, in a cluster), and starts it
    again after it dies; cancelling the task stops the child's process group.
    :meth:`run_once` runs each job once, for tests and tools. Lifecycle: module docstring.
    Thread-safety: event loop only.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        master: str = DEFAULT_MASTER,
        is_due: Callable[[], bool] = lambda: True,
    ) -> None:
        self.is_due = is_due  # in a cluster only the controller runs the jobs
        self.data = settings.data
        # the jobs call this broker as a peer: its inter-broker listener, with the cluster
        # secret and CA passed in their environment (laketail.maintenance.topics.Gateway)
        self.server = settings.inter_broker_url
        self.peer_env = {k: v for k, v in (("LAKETAIL_INTER_BROKER_SECRET", settings.inter_broker_secret),
                                          ("LAKETAIL_SSL_TRUSTSTORE_LOCATION", settings.ssl_truststore_location))
                         if v}
        self.interval_s = settings.maintenance_interval_ms / 1000
        self.master = master
        self.runs = 0
        #: how long after the child exited it is started again
        self.restart_backoff_s = min(self.interval_s, 10.0)
        #: how often the supervisor looks at the child and at ``is_due``
        self.poll_s = min(self.interval_s, 1.0)
        self.starts = 0  # children started (the long-lived one, and each restart)
        self.polls = 0  # supervisor looks while a child ran
        self.child: asyncio.subprocess.Process | None = None

    def job_env(self) -> dict[str, str]:
        """The jobs' environment: they call this broker as a peer (:attr:`peer_env`), never
        with client credentials the broker's own environment may hold."""
        from laketail.client.security import CLIENT_VARIABLES

        env = {k: v for k, v in job_env().items() if k not in CLIENT_VARIABLES}
        return {**env, **self.peer_env}

    def argv(self, job: str) -> list[str]:
        return spark_submit_argv(job, ["--data", self.data, "--servers", self.server], master=self.master)

    def child_argv(self) -> list[str]:
        """The long-lived child: the maintenance application, triggered every interval."""
        return spark_submit_argv(
            "maintenance",
            ["--data", self.data, "--servers", self.server, "--interval-s", f"{self.interval_s:g}"],
            master=self.master,
        )

    async def run(self) -> None:
        """Supervise the long-lived child (module doc): start it one interval after the
        broker, restart it when it dies, stop it when cancelled or no longer due."""
        await asyncio.sleep(self.interval_s)
        while True:
            if not self.is_due():
                await asyncio.sleep(self.poll_s)
                continue
            code = await self._supervise_child()
            if code is not None:  # it exited by itself: start it again a little later
                await asyncio.sleep(self.restart_backoff_s)

    async def _supervise_child(self) -> int | None:
        """Start the child and watch it until it exits (its exit code) or is no longer
        due (stopped; ``None``). Cancelled: the child is stopped, then re-raised."""
        proc = await asyncio.create_subprocess_exec(
            *self.child_argv(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.job_env(),  # it calls this broker as a peer, as the batch jobs do
            start_new_session=True,  # its own process group: stopped as a whole
            preexec_fn=die_with_parent_preexec(),  # killed with the broker, even by kill -9
        )
        self.child = proc
        self.starts += 1
        log.info("maintenance application started (pid %s)", proc.pid)
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        pump = asyncio.create_task(_pump(proc, tail), name="laketail-maintenance-output")
        exited = asyncio.ensure_future(proc.wait())
        try:
            while not exited.done() and self.is_due():
                await asyncio.wait({exited}, timeout=self.poll_s)
                self.polls += 1
            if not exited.done():  # no longer the controller
                await _stop(proc)
                return None
        except asyncio.CancelledError:
            await _stop(proc)
            raise
        finally:
            self.child = None
            exited.cancel()
            pump.cancel()
            await asyncio.gather(exited, pump, return_exceptions=True)
        _kill_group(proc.pid)  # what the child left behind (its Python workers, after a kill -9)
        log.warning("maintenance application (pid %s) exited (exit %s); restarting in %.1f s:\n%s",
                    proc.pid, proc.returncode, self.restart_backoff_s, "\n".join(tail)[-4000:])
        return proc.returncode

    async def run_once(self, jobs: Sequence[str] = SCHEDULED_JOBS) -> dict[str, int]:
        """The batch form: run each job once, in order (a ``spark-submit`` each); their
        exit codes."""
        codes = {}
        for job in jobs:
            codes[job] = await self._run_job(job)
        self.runs += 1
        return codes

    async def _run_job(self, job: str) -> int:
        proc = await asyncio.create_subprocess_exec(
            *self.argv(job),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.job_env(),
            start_new_session=True,
            preexec_fn=die_with_parent_preexec(),
        )
        try:
            output, _ = await proc.communicate()
        except asyncio.CancelledError:
            await _stop(proc)
            raise
        text = output.decode(errors="replace")
        if proc.returncode == 0:
            for line in text.splitlines():
                if line.startswith("laketail-job "):
                    log.info("maintenance %s", line[len("laketail-job "):])
        else:
            log.warning("maintenance job %s failed (exit %s):\n%s", job, proc.returncode, text[-4000:])
        return proc.returncode if proc.returncode is not None else -1


async def _pump(proc: asyncio.subprocess.Process, tail: collections.deque[str]) -> None:
    """Read the child's output as it comes: report lines logged at INFO, the last lines
    kept for the warning when it exits (a pipe nobody reads would block the child)."""
    assert proc.stdout is not None
    async for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        tail.append(line)
        if line.startswith("laketail-job "):
            log.info("maintenance %s", line[len("laketail-job "):])


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Stop a job's whole process group (spark-submit's JVM and its Python workers)."""
    for sig, wait_s in ((signal.SIGTERM, _KILL_AFTER_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), wait_s)
            return
        except asyncio.TimeoutError:
            continue
