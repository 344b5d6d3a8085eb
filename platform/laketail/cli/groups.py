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

``reset-offsets`` and ``delete-offsets`` take kafka-consumer-groups' options
(``--group``, ``--topic TOPIC[:P,...]`` or ``--all-topics``, ``--to-earliest``,
``--to-latest``, ``--to-offset``, ``--to-datetime``, ``--shift-by``, ``--dry-run`` /
``--execute``) and are dry runs unless ``--execute``: a table shows what would change.
A reset commits (``/v1/groups/{g}/commit``, generation -1) only into a group without
members, as Kafka's tool; ``delete-offsets`` is Kafka's OffsetDelete
(``/v1/groups/{g}/offsets/delete``; GROUP_SUBSCRIBED_TO_TOPIC while a member is
subscribed to the topic). Kafka's tool deletes offsets without a dry run; here it is
one too, like every destructive admin command of laketail.
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


# -- reset-offsets and delete-offsets (kafka-consumer-groups' options) -------------------------


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``TOPIC`` (every partition) or ``TOPIC:0,2`` (those), kafka-consumer-groups' syntax."""
    name, sep, parts = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not sep:
        return spec, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise click.BadParameter(f"{spec!r}: partitions are integers, as in TOPIC:0,1") from None
    if not name or not partitions or partitions[0] < 0:
        raise click.BadParameter(f"{spec!r}: give TOPIC or TOPIC:P[,P...] with partitions >= 0")
    return name, partitions


def parse_datetime_ms(text: str) -> int:
    """kafka-consumer-groups' ``--to-datetime`` (``YYYY-MM-DDTHH:mm:SS.sss``, an optional
    zone such as ``Z`` or ``+02:00``; without one, local time) in ms since the epoch."""
    import datetime as dt

    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not YYYY-MM-DDTHH:mm:SS.sss[zone]", param_hint="--to-datetime") from None
    return int(moment.astimezone().timestamp() * 1000)


def _chosen_partitions(gw: Gateway, group: str, topics: tuple[str, ...], all_topics: bool) -> list[tuple[str, int]]:
    """The partitions a command acts on: those named, or with ``--all-topics`` every
    partition the group has committed (kafka-consumer-groups' ``--all-topics``)."""
    if all_topics:
        lags = (gw.get(gw.v3(f"/consumer-groups/{segment(group)}/lags")) or {}).get("data", [])
        return sorted({(lag["topic_name"], int(lag["partition_id"])) for lag in lags if lag["current_offset"] >= 0})
    chosen = []
    for spec in topics:
        name, partitions = parse_topic_spec(spec)
        if partitions is None:
            partitions = sorted(p["partition"] for p in gw.get(f"/topics/{segment(name)}/partitions"))
        chosen += [(name, p) for p in partitions]
    return sorted(set(chosen))


def _committed(gw: Gateway, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    body = {"partitions": [{"topic": t, "partition": p} for t, p in tps]}
    found = (gw.request("POST", f"/v1/groups/{segment(group)}/committed", json=body) or {}).get("offsets", [])
    return {(o["topic"], int(o["partition"])): int(o["offset"]) for o in found}


def _check_inactive(gw: Gateway, group: str) -> None:
    info = gw.get(f"/v1/groups/{segment(group)}") or {}
    if info.get("members"):
        raise CommandError(f"Assignments can only be reset if the group '{group}' is inactive, "
                           f"but the current state is {info.get('state', '?')}.")


def _mode_note(execute: bool, dry_run: bool) -> None:
    if not execute and not dry_run:
        click.echo("dry run: nothing was changed (--execute changes it, --dry-run says a dry run is meant)", err=True)


def _topic_options(func):
    func = click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets for.")(func)
    func = click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,...]",
                        help="A topic, or some of its partitions (repeatable).")(func)
    return func


@groups.command("reset-offsets")
@click.option("--group", "-g", required=True, help="The consumer group (it must have no members).")
@_topic_options
@click.option("--to-earliest", "to", flag_value="earliest", help="Each partition's log start offset.")
@click.option("--to-latest", "to", flag_value="latest", help="Each partition's end (high watermark).")
@click.option("--to-offset", type=click.IntRange(min=0), help="This offset (clamped into the partition's range).")
@click.option("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="The first record at or after this time.")
@click.option("--shift-by", type=int, help="The committed offset plus N (N < 0: back), clamped.")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@server_option
def reset_offsets(group: str, topics: tuple[str, ...], all_topics: bool, to: str | None, to_offset: int | None,
                  to_datetime: str | None, shift_by: int | None, dry_run: bool, execute: bool, server: str) -> None:
    """Move GROUP's committed offsets, as kafka-consumer-groups --reset-offsets: a dry run
    unless --execute; only while the group has no members."""
    from laketail.console.reset import reset_target

    strategies = [s for s in (to, to_offset is not None and "offset", to_datetime is not None and "datetime",
                              shift_by is not None and "shift") if s]
    if len(strategies) != 1:
        raise click.UsageError("give one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    strategy = strategies[0]
    when_ms = parse_datetime_ms(to_datetime) if to_datetime is not None else None

    plan: list[tuple[str, int, int, int]] = []  # topic, partition, current, new
    with Gateway(server) as gw:
        _check_inactive(gw, group)
        tps = _chosen_partitions(gw, group, topics, all_topics)
        if not tps:
            raise CommandError(f"group '{group}' has no committed offsets to reset (--all-topics)")
        current = _committed(gw, group, tps)
        for t, p in tps:
            offsets = gw.get(f"/topics/{segment(t)}/partitions/{p}/offsets")
            start, end = int(offsets["beginning_offset"]), int(offsets["end_offset"])
            now = current.get((t, p), -1)
            if strategy == "shift":
                if now < 0:
                    raise CommandError(f"cannot shift the offset of {t}-{p}: the group has no committed offset there")
                new = min(max(now + int(shift_by or 0), start), end)
            elif strategy == "datetime":
                hit = gw.get(f"/v1/topics/{segment(t)}/partitions/{p}/offsets", params={"timestamp": str(when_ms)})
                found = int(hit["offset"])
                new = reset_target("datetime", start, end, offset_for_time=found if found >= 0 else None)
            else:
                new = reset_target(strategy, start, end, offset=to_offset)  # type: ignore[arg-type]
            plan.append((t, p, now, new))
        if execute:
            body = {"generation_id": -1, "member_id": "",
                    "offsets": [{"topic": t, "partition": p, "offset": new} for t, p, _, new in plan]}
            gw.request("POST", f"/v1/groups/{segment(group)}/commit", json=body)

    table = plain_table("group", "topic", "partition", "current offset", "new offset")
    for t, p, now, new in plan:
        table.add_row(group, t, str(p), str(now) if now >= 0 else "-", str(new))
    stdout_console().print(table)
    _mode_note(execute, dry_run)


@groups.command("delete-offsets")
@click.option("--group", "-g", required=True, help="The consumer group.")
@_topic_options
@click.option("--dry-run", is_flag=True, help="Only show the offsets that would go (the default).")
@click.option("--execute", is_flag=True, help="Delete them.")
@server_option
def delete_offsets(group: str, topics: tuple[str, ...], all_topics: bool, dry_run: bool, execute: bool,
                   server: str) -> None:
    """Delete GROUP's committed offsets (Kafka's OffsetDelete; refused while a member is
    subscribed to the topic): a dry run unless --execute."""
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    with Gateway(server) as gw:
        tps = _chosen_partitions(gw, group, topics, all_topics)
        current = _committed(gw, group, tps) if tps else {}
        held = [(t, p) for t, p in tps if current.get((t, p), -1) >= 0]
        deleted: set[tuple[str, int]] = set()
        if execute and held:
            body = {"partitions": [{"topic": t, "partition": p} for t, p in held]}
            answer = gw.request("POST", f"/v1/groups/{segment(group)}/offsets/delete", json=body) or {}
            deleted = {(d["topic"], int(d["partition"])) for d in answer.get("deleted", [])}
    table = plain_table("topic", "partition", "committed offset", "status")
    for t, p in tps:
        now = current.get((t, p), -1)
        if now < 0:
            status = "no committed offset"
        elif execute:
            status = "deleted" if (t, p) in deleted else "not deleted"
        else:
            status = "would be deleted"
        table.add_row(t, str(p), str(now) if now >= 0 else "-", status)
    stdout_console().print(table)
    _mode_note(execute, dry_run)
