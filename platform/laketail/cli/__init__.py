"""The ``laketail`` command: runs a broker and talks to one over HTTP.

One module per command group; this one only assembles them::

    laketail serve      run a broker (serve.py)
    laketail topics     create, list, describe, alter, delete topics (topics.py)
    laketail produce    records from stdin, one per line (produce.py)
    laketail consume    records to stdout, one per line (consume.py)
    laketail groups     consumer groups and their lag (groups.py)
    laketail sql        SQL over topics on a local SparkSession (sql.py)
    laketail jobs       run the Spark jobs with spark-submit (jobs.py)
    laketail check      verify a topic's table and hot logs (check.py)
    laketail acls       add, remove, list ACLs with kafka-acls's flags (acls.py)
    laketail users      SCRAM users in the catalog (users.py)

Every command that talks to a broker takes ``--server URL`` (default
``$LAKETAIL_SERVER`` or http://127.0.0.1:8082), before the command's name
(``laketail --server URL topics list``) or after it. Errors print ``error: <message>`` on
stderr and exit 1; usage errors exit 2. Client security settings (TLS, SASL) come from
``laketail --command-config FILE`` (Kafka's client properties) or ``LAKETAIL_SASL_*`` /
``LAKETAIL_SSL_*`` / ``LAKETAIL_SECURITY_PROTOCOL`` variables.

A command that finished ends its process with ``os._exit`` after flushing its output
(:func:`exit_now`), not through the interpreter's finalization: an Arrow scan of a Delta
table (the credentials, the catalog) hands the last references to its files to Arrow's
worker threads, which drop them a moment after the read returned; a file opened through
delta-rs's Python filesystem needs the GIL to be dropped, and once finalization began,
CPython ends a thread that asks for the GIL with ``pthread_exit``, whose unwinding through
Arrow's ``noexcept`` destructor is ``std::terminate``: "terminate called without an
active exception", SIGABRT, exit 134 (``laketail users list`` in about one run of three).
``laketail serve`` is the exception: it stops its broker and request processes itself and
then exits the ordinary way, so ``atexit`` handlers (multiprocessing's) still run.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence

import click

from laketail import __version__
from laketail.cli.acls import acls
from laketail.cli.check import check
from laketail.cli.consume import consume
from laketail.cli.groups import groups
from laketail.cli.jobs import jobs
from laketail.cli.options import exit_policy, group_command_config_option, group_server_option
from laketail.cli.produce import produce
from laketail.cli.serve import serve
from laketail.cli.sql import sql
from laketail.cli.topics import topics
from laketail.cli.users import users

__all__ = ["cli", "exit_now", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="laketail")
@group_server_option
@group_command_config_option
def cli() -> None:
    """laketail: Kafka's semantics, topics stored as Delta Lake tables."""


for _command in (serve, topics, produce, consume, groups, jobs, sql, check, acls, users):
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``laketail = laketail.cli:main``)."""
    args = list(argv) if argv is not None else sys.argv[1:]
    try:
        cli.main(args=args, prog_name="laketail")  # standalone mode: always ends in SystemExit
    except SystemExit as exc:
        if exit_policy.finalize:  # serve: see the module docstring
            raise
        exit_now(exc.code)
    except Exception:  # a bug: its traceback, then the same quiet exit
        if exit_policy.finalize:
            raise
        traceback.print_exc()
        exit_now(1)
    exit_now(0)


def exit_now(code: int | str | None) -> None:
    """End the process with ``code`` (``sys.exit``'s meaning) once output is flushed,
    skipping the interpreter's finalization (see the module docstring)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader went away, or the stream is closed
            status = status or 0
    os._exit(status)
