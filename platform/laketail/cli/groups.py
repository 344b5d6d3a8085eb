"""``laketail groups``: consumer groups and their lag, like ``kafka-consumer-groups.sh``.

``list`` shows every group the broker knows (by its members or its committed
offsets) with its state, partition assignor and member count (``GET /v1/groups``).

``describe GROUP`` is ``kafka-consumer-groups.sh --describe`` with laketail's time
lag: one row per partition the group has committed or is assigned (v3's
``/consumer-groups/{g}/lags``) with the current (committed) offset, the log end
offset, the lag, the time lag (how long ago the first unconsumed record was
appended), the member holding it (consumer id and client id) and a status: OK below
100, caution below 1,000, warning below 10,000, critical from there
(:func:`laketail.coordinator.lag.lag_status`). Members that hold no partition get a
row of their own, as kafka-consumer-groups.sh shows them. A ``-`` current offset
means the group has committed nothing there yet.
"""

from __future__ import annotations

import click

from laketail.cli.gateway import Gateway, segment
from laketail.cli.options import CommandError, plain_table, server_option, stdout_console
from laketail.coordinator.lag import lag_status

_STATUS_STYLE = {"OK": "green", "caution": "yellow", "warning": "dark_orange", "critical": "bold red"}


@click.group()
def groups() -> None:
    """List consumer groups and describe their lag."""


@groups.command("list")
@server_option
def list_groups(server: str) -> None:
    """List consumer groups with their state and members."""
    with Gateway(server) as gw:
        body = gw.get("/v1/groups") or {}
    rows = sorted(body.get("groups", []), key=lambda g: g["group_id"])
    if not rows:
        click.echo("no consumer groups", err=True)
        return
    table = plain_table("group", "state", "assignor", "members")
    for g in rows:
        table.add_row(g["group_id"], str(g.get("state", "")), g.get("protocol") or "-", str(g.get("members", 0)))
    stdout_console().print(table)


def format_time_lag(ms: int) -> str:
    """Milliseconds as a short duration: ``0s``, ``850ms``, ``12.3s``, ``4m05s``, ``2h07m``, ``3d04h``."""
    if ms <= 0:
        return "0s"
    if ms < 1_000:
        return f"{ms}ms"
    seconds = ms / 1000.0
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


@groups.command()
@click.argument("group")
@server_option
def describe(group: str, server: str) -> None:
    """Show GROUP's lag per partition, with the member holding each partition."""
    g = segment(group)
    with Gateway(server) as gw:
        info = gw.get(f"/v1/groups/{g}") or {}
        if info.get("state") == "Dead":
            raise CommandError(f"consumer group '{group}' does not exist")
        lags = (gw.get(gw.v3(f"/consumer-groups/{g}/lags")) or {}).get("data", [])
    lags.sort(key=lambda lag: (lag["topic_name"], lag["partition_id"]))
    members = info.get("members", [])
    holding = {lag.get("consumer_id") for lag in lags}

    console = stdout_console()
    total = sum(lag["lag"] for lag in lags)
    worst_time = max((lag.get("time_lag_ms", 0) for lag in lags), default=0)
    console.print(
        f"[bold]{group}[/bold]  state: {info.get('state', '?')}  assignor: {info.get('protocol') or '-'}"
        f"  members: {len(members)}  total lag: {total}  max time lag: {format_time_lag(worst_time)}"
    )
    table = plain_table(
        "topic", "partition", "current offset", "log end offset", "lag", "time lag",
        "consumer id", "client id", "status",
    )
    for lag in lags:
        status = lag_status(lag["lag"])
        current = lag["current_offset"]
        table.add_row(
            lag["topic_name"], str(lag["partition_id"]), str(current) if current >= 0 else "-",
            str(lag["log_end_offset"]), str(lag["lag"]), format_time_lag(lag.get("time_lag_ms", 0)),
            lag.get("consumer_id") or "-", lag.get("client_id") or "-",
            f"[{_STATUS_STYLE[status]}]{status}[/]",
        )
    for member in sorted(members, key=lambda m: m["member_id"]):
        if member["member_id"] not in holding:
            table.add_row("-", "-", "-", "-", "-", "-", member["member_id"], member.get("client_id") or "-", "")
    if lags or members:
        console.print(table)
    else:
        console.print("no partitions committed or assigned")
