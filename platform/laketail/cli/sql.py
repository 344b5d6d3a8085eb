"""``laketail sql``: SQL over topics from the shell, on a local SparkSession.

Every topic is a view (:func:`laketail.spark.register_topics`): ``<topic>`` holds its
committed records, ``<topic>_all`` every row of its Delta table, control rows
included; quote names with ``-`` or ``.`` in backticks. The result prints as a table
(at most ``--max-rows`` rows); binary values print as text when they are UTF-8, else
as ``0x`` and hex.

    laketail sql "SELECT partition, count(*) AS n FROM orders GROUP BY partition"
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from laketail.cli.options import CommandError, plain_table, server_option, stdout_console


def cell(value: Any) -> str:
    """One value as table text."""
    if value is None:
        return "NULL"
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + bytes(value).hex()
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cell(v) for v in value) + "]"
    if hasattr(value, "asDict"):
        return "{" + ", ".join(f"{k}: {cell(v)}" for k, v in value.asDict().items()) + "}"
    return str(value)


@click.command()
@click.argument("query")
@click.option("--topic", "-t", "topics", multiple=True, metavar="NAME",
              help="Register only these topics (repeatable) [default: every topic].")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--max-rows", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Print at most this many rows.")
@server_option
def sql(query: str, topics: tuple[str, ...], master: str, max_rows: int, server: str) -> None:
    """Run the SQL QUERY over topics and print the result."""
    from pyspark.sql import SparkSession

    from laketail.errors import LaketailError
    from laketail.spark import local_session, register_topics

    borrowed = SparkSession.getActiveSession() is not None  # a caller's session: leave it running
    spark = local_session("laketail sql", master)
    try:
        try:
            register_topics(spark, server, list(topics) or None, follow=False)  # one query
            frame = spark.sql(query)
            rows = frame.limit(max_rows + 1).collect()
        except LaketailError as exc:
            raise CommandError(exc.message) from None
        except Exception as exc:  # Spark's analysis and parse errors: their first line says it
            if type(exc).__module__.startswith("pyspark"):
                raise CommandError(str(exc).strip().splitlines()[0]) from None
            raise
        table = plain_table(*frame.columns)
        for row in rows[:max_rows]:
            table.add_row(*(cell(v) for v in row))
        stdout_console().print(table)
        shown = min(len(rows), max_rows)
        more = " (more not shown)" if len(rows) > max_rows else ""
        click.echo(f"{shown} row{'s' if shown != 1 else ''}{more}", err=True)
    finally:
        if not borrowed:
            spark.stop()
