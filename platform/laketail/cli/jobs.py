"""``laketail jobs``: run laketail's Spark jobs with spark-submit.

``run NAME [JOB OPTIONS...]`` runs ``jobs/NAME.py`` through pyspark's ``spark-submit``
with ``conf/spark-defaults.conf`` and ``conf/log4j2.properties``
(:mod:`laketail.maintenance.spark_submit`), on ``--master`` (default ``local[2]``),
with extra ``--conf key=value`` settings. Every option ``run`` does not know goes to
the job (``--data``, ``--servers``, ``--topic``, ``--command-config``, ...); the client
credentials of ``laketail --command-config FILE`` and ``LAKETAIL_SASL_*`` /
``LAKETAIL_SSL_*`` reach the job too::

    laketail jobs run compaction --data ./laketail-data --topic orders
    laketail jobs run retention --data ./laketail-data --vacuum-after-ms 0
    laketail jobs run lag --servers http://127.0.0.1:8082 --data ./laketail-data --streaming

While it runs, a spinner shows the job and its elapsed time and each of the job's
report lines is printed as it arrives; Spark's own log (warnings only) is shown when
the job fails. The exit code is the job's. ``list`` names the jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import click
from rich.console import Console

from laketail.cli.options import COMMAND_CONFIG_ENV, CommandError, command_config_path, parse_pairs
from laketail.jobs.common import REPORT_PREFIX
from laketail.maintenance.spark_submit import DEFAULT_MASTER, JOBS, job_env, job_script, spark_submit_argv


@click.group()
def jobs() -> None:
    """Run laketail's Spark jobs (compaction, retention, lag, eos_pipeline)."""


@jobs.command("list")
def list_jobs() -> None:
    """Name each job with the first line of its description."""
    for name in JOBS:
        summary = ""
        script = job_script(name)
        for line in script.read_text().splitlines() if script.is_file() else ():
            if line.startswith('"""'):
                summary = line.strip('"').strip()
                break
        click.echo(f"{name:<14}{summary}")


@jobs.command(
    "run",
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
)
@click.argument("name", metavar=f"[{'|'.join(JOBS)}]", required=False)
@click.option("--master", default=DEFAULT_MASTER, show_default=True, help="Spark master URL.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable).")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, name: str | None, master: str, confs: tuple[str, ...], job_args: tuple[str, ...]) -> None:
    """Run job NAME with spark-submit; other options go to the job.

    -h / --help after NAME shows the job's own options too."""
    if name in ("-h", "--help"):
        name = None
    elif name is not None and name not in JOBS:
        raise click.UsageError(f"unknown job '{name}' (jobs: {', '.join(JOBS)})", ctx)
    if name is None or {"-h", "--help"} & set(job_args):
        help_line = "Options:\n  -h, --help        Show this message (and the job's options)."
        click.echo(ctx.get_help().replace("Options:", help_line, 1))
        if name is not None:
            click.echo(f"\nOptions of {name}:")
            _print_job_help(name)
        return
    argv = spark_submit_argv(name, job_args, master=master, conf=parse_pairs(confs, "--conf"))
    env = job_env()  # LAKETAIL_SASL_* and the other client variables pass through to the job
    path = command_config_path()
    if path:  # laketail --command-config FILE jobs run ...: the job reads the same file
        env[COMMAND_CONFIG_ENV] = os.path.abspath(path)
    code = run_with_progress(name, master, argv, Console(stderr=True), env)
    if code != 0:
        raise CommandError(f"job {name} failed (exit code {code})")


def _print_job_help(name: str) -> None:
    import importlib

    module = importlib.import_module(f"laketail.jobs.{name}")
    try:
        module.main(["--help"])
    except SystemExit:
        pass


def run_with_progress(name: str, master: str, argv: list[str], console: Console,
                      env: dict[str, str] | None = None) -> int:
    """Run spark-submit, echoing the job's report lines under a spinner; its exit code."""
    with tempfile.TemporaryFile("w+") as log, subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
        env=env if env is not None else job_env(),
    ) as proc:
        started = time.monotonic()
        reports = 0
        with console.status(f"[bold]{name}[/] on {master}", spinner="dots") as status:
            ticker = _Ticker(status, name, master, started)
            ticker.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    if line.startswith(REPORT_PREFIX):
                        reports += 1
                        click.echo(_render(json.loads(line[len(REPORT_PREFIX):])))
                    elif line:
                        click.echo(line)
                code = proc.wait()
            except KeyboardInterrupt:
                proc.terminate()
                code = proc.wait()
            finally:
                ticker.stop()
        elapsed = time.monotonic() - started
        if code == 0:
            console.print(f"[green]{name} done[/] in {elapsed:.1f}s ({reports} report(s))")
        else:
            log.seek(0)
            tail = log.read()[-4000:]
            console.print(f"[red]{name} failed[/] after {elapsed:.1f}s; spark-submit's output:")
            sys.stderr.write(tail + ("\n" if tail and not tail.endswith("\n") else ""))
        return code


def _render(doc: dict) -> str:
    """A report line as ``topic: k=v ...`` (the job and topic first)."""
    head = " ".join(str(doc.pop(k)) for k in ("job", "topic") if k in doc)
    return f"{head}: " + " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in doc.items())


class _Ticker(threading.Thread):
    """Keeps the spinner's elapsed time current while the job is quiet."""

    def __init__(self, status, name: str, master: str, started: float) -> None:
        super().__init__(daemon=True)
        self.status, self.name_, self.master, self.started = status, name, master, started
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.5):
            elapsed = time.monotonic() - self.started
            self.status.update(f"[bold]{self.name_}[/] on {self.master} ({elapsed:.0f}s)")

    def stop(self) -> None:
        self._halt.set()
        self.join()
