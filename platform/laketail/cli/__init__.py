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
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from laketail import __version__
from laketail.cli.acls import acls
from laketail.cli.check import check
from laketail.cli.consume import consume
from laketail.cli.groups import groups
from laketail.cli.jobs import jobs
from laketail.cli.options import group_command_config_option, group_server_option
from laketail.cli.produce import produce
from laketail.cli.serve import serve
from laketail.cli.sql import sql
from laketail.cli.topics import topics
from laketail.cli.users import users

__all__ = ["cli", "main"]


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
    cli.main(args=list(argv) if argv is not None else None, prog_name="laketail")
