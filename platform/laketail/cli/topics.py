"""``laketail topics``: topic admin through the gateway's Confluent v3 endpoints.

``create``, ``list``, ``alter`` and ``delete`` use ``/v3/clusters/{id}/topics...``
(``alter --partitions N``: Confluent's ``PATCH /topics/{t}`` with ``partitions_count``)
(the cluster id comes from ``GET /v3/clusters``). ``describe`` adds what v3 does not
say per partition: leader, replicas and ISR from v2 ``GET /topics/{t}``, and the
offsets from ``GET /topics/{t}/partitions/{p}/offsets``.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from laketail.cli.gateway import Gateway, segment
from laketail.cli.options import parse_pairs, plain_table, server_option, stdout_console


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


@topics.command()
@click.argument("name")
@click.option("--partitions", "-p", type=click.IntRange(min=1), required=True, help="Number of partitions.")
@click.option(
    "--replication-factor", "-r", type=click.IntRange(min=1),
    help="Replicas per partition [default: the broker's default.replication.factor].",
)
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE", help="A topic config (repeatable).")
@server_option
def create(name: str, partitions: int, replication_factor: int | None, configs: tuple[str, ...], server: str) -> None:
    """Create topic NAME."""
    body: dict[str, Any] = {
        "topic_name": name,
        "partitions_count": partitions,
        "configs": [{"name": k, "value": v} for k, v in parse_pairs(configs).items()],
    }
    if replication_factor is not None:
        body["replication_factor"] = replication_factor
    with Gateway(server) as gw:
        created = gw.request("POST", gw.v3("/topics"), json=body) or {}
    rf = created.get("replication_factor", replication_factor)
    click.echo(
        f"created topic {name} with {created.get('partitions_count', partitions)} partition(s)"
        + (f", replication factor {rf}" if rf else "")
    )


@topics.command("list")
@server_option
def list_topics(server: str) -> None:
    """List topics with their partition counts."""
    with Gateway(server) as gw:
        body = gw.get(gw.v3("/topics")) or {}
    rows = sorted(body.get("data", []), key=lambda t: t["topic_name"])
    table = plain_table("topic", "partitions", "replication factor", "internal")
    for t in rows:
        table.add_row(
            t["topic_name"], str(t.get("partitions_count", "")),
            str(t.get("replication_factor", "")), "yes" if t.get("is_internal") else "",
        )
    if rows:
        stdout_console().print(table)
    else:
        click.echo("no topics", err=True)


@topics.command()
@click.argument("name")
@click.option("--all-configs", is_flag=True, help="Show every config, not only those set on the topic or broker.")
@server_option
def describe(name: str, all_configs: bool, server: str) -> None:
    """Show topic NAME: partitions with leader, replicas, ISR and offsets, and configs."""
    t = segment(name)
    with Gateway(server) as gw:
        summary = gw.get(gw.v3(f"/topics/{t}"))
        v2 = gw.get(f"/topics/{t}")
        configs = (gw.get(gw.v3(f"/topics/{t}/configs")) or {}).get("data", [])
        partitions = sorted(v2.get("partitions", []), key=lambda p: p["partition"])
        offsets = {
            p["partition"]: gw.get(f"/topics/{t}/partitions/{p['partition']}/offsets")
            for p in partitions
        }

    console = stdout_console()
    console.print(
        f"[bold]{name}[/bold]  partitions: {summary.get('partitions_count', len(partitions))}"
        f"  replication factor: {summary.get('replication_factor', '?')}"
        + ("  (internal)" if summary.get("is_internal") else "")
    )
    console.print(_partition_table(partitions, offsets))
    for p in partitions:  # laketail's own field: the table is damaged there (see `laketail check`)
        for d in p.get("damaged", []):
            console.print(
                f"DAMAGED partition {p['partition']} offsets {d['first_offset']}-{d['last_offset']}: {d['reason']}",
                markup=False, highlight=False,
            )
    shown = [c for c in configs if all_configs or not c.get("is_default", False)]
    if shown:
        table = plain_table("config", "value", "source")
        for c in sorted(shown, key=lambda c: c["name"]):
            table.add_row(c["name"], str(c.get("value")), str(c.get("source", "")))
        console.print(table)
    else:
        console.print("configs: all defaults (--all-configs lists them)")


def _partition_table(partitions: list[dict], offsets: dict[int, dict]) -> Table:
    """One row per partition. ``end_offset`` is v2's (the high watermark); laketail's
    extra fields (``log_end_offset``, ``high_watermark``, ``tiered_offset``) are used
    when the broker sends them."""
    extra_tiered = any("tiered_offset" in o for o in offsets.values())
    damaged = any(p.get("damaged") for p in partitions)
    columns = ["partition", "leader", "replicas", "ISR", "log start", "log end", "HW"]
    table = plain_table(*columns, *(["tiered"] if extra_tiered else []), *(["damaged"] if damaged else []))
    for p in partitions:
        o = offsets.get(p["partition"], {})
        replicas = p.get("replicas", [])
        end = o.get("end_offset", "")
        row = [
            str(p["partition"]),
            str(p.get("leader", "")),
            ",".join(str(r["broker"]) for r in replicas),
            ",".join(str(r["broker"]) for r in replicas if r.get("in_sync")),
            str(o.get("log_start_offset", o.get("beginning_offset", ""))),
            str(o.get("log_end_offset", end)),
            str(o.get("high_watermark", end)),
        ]
        if extra_tiered:
            row.append(str(o.get("tiered_offset", "")))
        if damaged:
            row.append(",".join(f"{d['first_offset']}-{d['last_offset']}" for d in p.get("damaged", [])))
        table.add_row(*row)
    return table


@topics.command()
@click.argument("name")
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE", help="Set a config (repeatable).")
@click.option("--delete-config", "deletes", multiple=True, metavar="KEY", help="Back to the default (repeatable).")
@click.option("--partitions", "-p", type=int,
              help="Grow the topic to this many partitions (only ever more, as kafka-topics --alter).")
@server_option
def alter(name: str, configs: tuple[str, ...], deletes: tuple[str, ...], partitions: int | None, server: str) -> None:
    """Set or delete configs of topic NAME, or add partitions to it.

    Keyed records produced without a partition go to murmur2(key) modulo the new count
    from then on, so a key's later records may land in another partition than its
    earlier ones (Kafka's rule too)."""
    sets = parse_pairs(configs)
    if not sets and not deletes and partitions is None:
        raise click.UsageError("nothing to alter: give --partitions N, --config KEY=VALUE or --delete-config KEY")
    changes = []
    with Gateway(server) as gw:
        if partitions is not None:  # Confluent's PATCH; the broker answers INVALID_PARTITIONS unless it grows
            grown = gw.request("PATCH", gw.v3(f"/topics/{segment(name)}"), json={"partitions_count": partitions})
            changes.append(f"partitions={(grown or {}).get('partitions_count', partitions)}")
        if sets or deletes:
            data = [{"name": k, "value": v} for k, v in sets.items()]
            data += [{"name": k, "operation": "DELETE"} for k in deletes]
            gw.request("POST", gw.v3(f"/topics/{segment(name)}/configs:alter"), json={"data": data})
    changes += [f"{k}={v}" for k, v in sets.items()] + [f"-{k}" for k in deletes]
    click.echo(f"altered topic {name}: {' '.join(changes)}")


@topics.command()
@click.argument("name")
@server_option
def delete(name: str, server: str) -> None:
    """Delete topic NAME with its table and hot logs."""
    with Gateway(server) as gw:
        gw.request("DELETE", gw.v3(f"/topics/{segment(name)}"))
    click.echo(f"deleted topic {name}")
