"""What every job shares: its command-line options, its SparkSession, its report lines.

Jobs take the data root (``--data``) and/or gateways (``--servers``, Spark's
``laketail.servers``; client credentials for them from ``--command-config FILE`` and
``LAKETAIL_SASL_*`` / ``LAKETAIL_SSL_*`` variables, as the ``laketail`` command takes
them: :func:`client_conf`), topics to work on (``--topic``, repeatable; default every user
topic), and ``--now-ms`` to plan as of another time (replays and tests; default the
wall clock). Each finished step prints one JSON line on stdout starting with
:data:`REPORT_PREFIX`; ``laketail jobs run`` shows them as they come.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from laketail.clock import SystemClock

REPORT_PREFIX = "laketail-job "

#: Settings a job's SparkSession needs whatever spark-defaults.conf says: Arrow's
#: timestamps in UTC (records' timestamps are UTC microseconds), and Parquet
#: timestamps as microseconds, never INT96.
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--data", metavar="ROOT", default=os.environ.get("LAKETAIL_DATA"),
                        help="the laketail data root (topic tables, _system) [$LAKETAIL_DATA]")
    parser.add_argument("--servers", "--laketail.servers", dest="servers", metavar="URLS",
                        default=os.environ.get("LAKETAIL_SERVERS"),
                        help="gateway URLs, comma-separated [$LAKETAIL_SERVERS]")
    parser.add_argument("--command-config", metavar="FILE", default=None,
                        help="client properties for the gateways: security.protocol, sasl.*, ssl.* "
                             "(confluent-kafka's names) [$LAKETAIL_COMMAND_CONFIG; LAKETAIL_SASL_USERNAME, ... "
                             "over it]")
    parser.add_argument("--topic", action="append", dest="topics", metavar="TOPIC",
                        help="a topic to work on (repeatable; default: every user topic)")
    parser.add_argument("--now-ms", type=int, default=None,
                        help="plan as of this time, in ms since the epoch [default: now]")
    return parser


class ClientConfigError(Exception):
    """The job's client properties cannot be used (unreadable file, bad value)."""


def client_conf(args: argparse.Namespace) -> dict[str, str]:
    """The job's client properties for its gateways (``--servers``): ``--command-config``
    (or ``$LAKETAIL_COMMAND_CONFIG``), then ``LAKETAIL_SECURITY_PROTOCOL``,
    ``LAKETAIL_SASL_USERNAME``, ... over it, as the ``laketail`` command reads them;
    checked here, so a bad value is one clear line before any work."""
    from laketail.client.security import client_properties, client_security

    try:
        props = client_properties(args.command_config, os.environ)
        client_security(props)
    except (OSError, ValueError) as exc:
        raise ClientConfigError(f"client properties: {exc}") from None
    return props


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The job's arguments, with ``security``: its client properties (:func:`client_conf`).
    Unusable ones end the job here with one ``error:`` line and exit code 1."""
    args = parser.parse_args(argv)
    try:
        args.security = client_conf(args)
    except ClientConfigError as exc:
        parser.exit(1, f"error: {exc}\n")
    return args


def spark_security_options(props: dict[str, str]) -> dict[str, str]:
    """The client properties as the laketail Spark source and sink take them
    (``laketail.``-prefixed, as Spark's Kafka source takes ``kafka.``-prefixed ones)."""
    return {f"laketail.{key}": value for key, value in props.items()}


def plan_time_ms(args: argparse.Namespace) -> int:
    return args.now_ms if args.now_ms is not None else SystemClock().now_ms()


def report(doc: dict[str, Any]) -> None:
    """One progress line for ``laketail jobs run`` (and anyone reading stdout)."""
    print(REPORT_PREFIX + json.dumps(doc, sort_keys=True), flush=True)


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return 1


def spark_session(app_name: str):
    """The job's SparkSession and whether the job owns it (and so stops it at the end):
    spark-submit's master and spark-defaults.conf apply; run as a plain script, a local
    one; called where a session is already active (a test, a notebook), that one."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Started by spark-submit's JVM: end with it. A driver that only waits (for a
        # topic, between HTTP calls) would not notice a JVM killed with kill -9.
        from laketail.parent_death import die_with_parent

        die_with_parent(os.getppid())
    builder = SparkSession.builder.appName(app_name)
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    if "PYSPARK_GATEWAY_PORT" not in os.environ and "PYSPARK_PYTHON" not in os.environ:
        # Run as a plain script: Python workers (data source ones too) use this
        # interpreter, and so find laketail; the JVM started below inherits it.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = builder.config("spark.pyspark.python", sys.executable)
    return builder.getOrCreate(), True


def run_query(writer: Any, name: str, interval_s: float, done: dict[str, int], max_rounds: int) -> str | None:
    """Start ``writer`` (a ``DataStreamWriter``) as the query ``name``, triggered every
    ``interval_s`` (100 ms at least), and wait until it ends, until ``max_rounds``
    micro-batches ran (``done["batches"]``, counted by its foreachBatch; 0: no bound) or
    until Ctrl-C. The first line of the query's failure, or None."""
    query = (writer.trigger(processingTime=f"{max(int(interval_s * 1000), 100)} milliseconds")
             .queryName(name).start())
    try:
        while query.isActive:
            query.awaitTermination(0.5)
            if max_rounds and done["batches"] >= max_rounds:
                query.stop()
    except KeyboardInterrupt:
        query.stop()
    error = query.exception()
    return None if error is None else str(error).splitlines()[0]
