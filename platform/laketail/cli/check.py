"""``laketail check TOPIC``: verify a topic's table and hot logs; say exactly what is wrong.

The broker does the work (``GET /v1/topics/{t}/check``): it holds the hot logs, which
live on its local disk, and its view of the tiered offsets and transactions, which the
data root alone does not show; reading the table there costs a network hop less for the
answer than for the rows. The check reads every file's offset, control, transactional
and producer id columns and every hot record, so it can take a while on a big topic: a
spinner runs meanwhile. Prints one block per partition, problems first; exits 1 when any
partition has a problem (problems are what reads refuse or get wrong; notes are
harmless, such as rows an outside ``OPTIMIZE`` left out of offset order).
"""

from __future__ import annotations

import sys

import click

from laketail.cli.gateway import Gateway, segment
from laketail.cli.options import server_option, stdout_console


@click.command()
@click.argument("topic")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the broker's answer.")
@server_option
def check(topic: str, timeout_s: float, server: str) -> None:
    """Verify TOPIC's Delta table and hot logs: dense, unique, ordered offsets; markers
    consistent with transactions; tiered offset vs hot log. Exit 1 on problems."""
    console = stdout_console()
    with Gateway(server) as gw, console.status(f"checking {topic} (reads its whole table)..."):
        report = gw.get(f"/v1/topics/{segment(topic)}/check", read_timeout_s=timeout_s)
    problems = 0
    for part in report.get("partitions", []):
        head = (f"partition {part['partition']}: {part['files']} file(s), {part['table_records']} table record(s), "
                f"{part['hot_records']} hot record(s), tiered to {part['tiered_offset']}")
        console.print(head, markup=False, highlight=False)
        for line in part.get("problems", []):
            problems += 1
            console.print(f"  PROBLEM {line}", markup=False, highlight=False)
        for line in part.get("notes", []):
            console.print(f"  note    {line}", markup=False, highlight=False)
    if problems:
        console.print(f"{topic}: {problems} problem(s)", markup=False, highlight=False)
        sys.exit(1)
    console.print(f"{topic}: ok", markup=False, highlight=False)
