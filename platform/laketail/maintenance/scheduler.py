"""The broker's maintenance scheduler: retention and compaction of user topics.

Role: every ``laketail.maintenance.interval.ms`` (first one interval after start),
run the retention job, then the compaction job, each as a ``spark-submit`` child
process (:mod:`laketail.maintenance.spark_submit`, local mode by default) over the
broker's data root, asking the broker's own gateway for topic configs. Runs never
overlap; a run that outlives the interval delays the next. Internal topics are not
touched (the broker compacts those itself).

Set ``laketail.maintenance.enable = false`` (``laketail serve --no-maintenance``) to
leave maintenance to an external scheduler (``laketail jobs run``, cron, Airflow...).

The job's report lines are logged at INFO; a failed job is logged at WARNING with
the tail of its output and retried at the next interval. Closing the broker cancels
the task, which kills a running job (SIGTERM, then SIGKILL) -- jobs are safe to stop
at any point: nothing is committed until their single Delta commit per topic.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Callable, Sequence

from laketail.config import BrokerSettings
from laketail.maintenance.spark_submit import DEFAULT_MASTER, job_env, spark_submit_argv

log = logging.getLogger(__name__)

SCHEDULED_JOBS = ("retention", "compaction")
_KILL_AFTER_S = 10.0


class MaintenanceScheduler:
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

    def argv(self, job: str) -> list[str]:
        return spark_submit_argv(job, ["--data", self.data, "--servers", self.server], master=self.master)

    async def run(self) -> None:
        """The scheduler's loop (an asyncio task of the broker)."""
        while True:
            await asyncio.sleep(self.interval_s)
            if self.is_due():
                await self.run_once()

    async def run_once(self, jobs: Sequence[str] = SCHEDULED_JOBS) -> dict[str, int]:
        """Run each job once, in order; their exit codes."""
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
            env={**job_env(), **self.peer_env},
            start_new_session=True,
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
