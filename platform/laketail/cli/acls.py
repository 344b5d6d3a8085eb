"""``laketail acls``: Kafka's ``kafka-acls.sh``, over the gateway's Confluent v3 ACL API.

The same flags, the same meaning::

    laketail acls --add --allow-principal User:alice --operation Read --topic orders \\
        --resource-pattern-type prefixed
    laketail acls --list [--topic orders] [--principal User:alice]
    laketail acls --remove --allow-principal User:alice --operation Read --topic orders

* resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable, ``*`` for
  all) and ``--cluster``; ``--resource-pattern-type`` is ``literal`` (default) or
  ``prefixed`` to add, and also ``any`` or ``match`` to list and remove;
* entries: ``--allow-principal`` / ``--deny-principal`` (repeatable), ``--allow-host`` /
  ``--deny-host`` (default ``*``), ``--operation`` (repeatable, default ``All``);
  ``--add`` makes every combination of them; ``--remove`` without principals removes
  every ACL of the resources (as kafka-acls does, after ``--force``, which this
  non-interactive command takes as given);
* ``--bootstrap-server URL`` is the gateway (``--server`` too, or ``$LAKETAIL_SERVER``).

``--add`` posts all the ACLs in one ``acls:batch`` (all or nothing); ``--remove`` and
``--list`` send one filter per resource (``DELETE``/``GET .../acls``). Output lists the
ACLs per resource pattern, as kafka-acls prints them.
"""

from __future__ import annotations

from itertools import product

import click

from laketail.cli.gateway import Gateway
from laketail.cli.options import CommandError, server_option

_PATTERNS = ("literal", "prefixed", "any", "match")


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...],
               cluster: bool) -> list[tuple[str, str]]:
    found = [("TOPIC", t) for t in topics] + [("GROUP", g) for g in groups]
    found += [("TRANSACTIONAL_ID", t) for t in txn_ids]
    if cluster:
        found.append(("CLUSTER", "kafka-cluster"))
    return found


def _print(acls: list[dict]) -> None:
    by_pattern: dict[tuple[str, str, str], list[dict]] = {}
    for acl in acls:
        key = (acl["resource_type"], acl["resource_name"], acl["pattern_type"])
        by_pattern.setdefault(key, []).append(acl)
    for (rtype, name, ptype), entries in sorted(by_pattern.items()):
        click.echo(f"Current ACLs for resource `ResourcePattern(resourceType={rtype}, name={name}, "
                   f"patternType={ptype})`:")
        for e in entries:
            click.echo(f" \t(principal={e['principal']}, host={e['host']}, operation={e['operation']}, "
                       f"permissionType={e['permission']})")
        click.echo("")


@click.command("acls")
@click.option("--add", "action", flag_value="add", help="Add ACLs.")
@click.option("--remove", "action", flag_value="remove", help="Remove ACLs.")
@click.option("--list", "action", flag_value="list", help="List ACLs.")
@click.option("--allow-principal", multiple=True, metavar="PRINCIPAL", help="User:NAME to allow (repeatable).")
@click.option("--deny-principal", multiple=True, metavar="PRINCIPAL", help="User:NAME to deny (repeatable).")
@click.option("--allow-host", multiple=True, metavar="HOST", help="Hosts the allow applies to [default: *].")
@click.option("--deny-host", multiple=True, metavar="HOST", help="Hosts the deny applies to [default: *].")
@click.option("--operation", multiple=True, metavar="OP",
              help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                   "IdempotentWrite, All (repeatable) [default: All].")
@click.option("--topic", multiple=True, help="A topic (repeatable; * for every topic).")
@click.option("--group", multiple=True, help="A consumer group (repeatable; * for every group).")
@click.option("--transactional-id", multiple=True, help="A transactional id (repeatable).")
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option("--resource-pattern-type", type=click.Choice(_PATTERNS, case_sensitive=False), default=None,
              help="literal (default) or prefixed; list and remove also take any and match.")
@click.option("--principal", "list_principal", default=None, help="--list: only this principal's ACLs.")
@click.option("--force", is_flag=True, help="Accepted for kafka-acls compatibility (never prompts).")
@click.option("--bootstrap-server", default=None, metavar="URL", help="The gateway URL (same as --server).")
@server_option
def acls(action: str | None, allow_principal: tuple[str, ...], deny_principal: tuple[str, ...],
         allow_host: tuple[str, ...], deny_host: tuple[str, ...], operation: tuple[str, ...],
         topic: tuple[str, ...], group: tuple[str, ...], transactional_id: tuple[str, ...], cluster: bool,
         resource_pattern_type: str | None, list_principal: str | None, force: bool,
         bootstrap_server: str | None, server: str) -> None:
    """Add, remove or list ACLs, with kafka-acls.sh's flags."""
    if action is None:
        raise click.UsageError("one of --add, --remove or --list is required")
    resources = _resources(topic, group, transactional_id, cluster)
    pattern = (resource_pattern_type or "literal").upper()
    with Gateway(bootstrap_server or server) as gw:
        if action == "add":
            _add(gw, resources, pattern, allow_principal, deny_principal, allow_host, deny_host, operation)
        elif action == "remove":
            _remove(gw, resources, pattern, allow_principal, deny_principal, allow_host, deny_host, operation)
        else:
            found = []
            selectors: list[tuple[str, str | None]] = list(resources) or [("ANY", None)]
            for rtype, name in selectors:
                params = {"resource_type": rtype}
                if name is not None:
                    params |= {"resource_name": name,
                               "pattern_type": (resource_pattern_type or "literal").upper()}
                elif resource_pattern_type:
                    params["pattern_type"] = resource_pattern_type.upper()
                if list_principal:
                    params["principal"] = list_principal
                found.extend((gw.get(gw.v3("/acls"), params=params) or {}).get("data", []))
            _print(found)


def _entries(allow_principal, deny_principal, allow_host, deny_host, operation) -> list[dict]:
    ops = [op.upper() for op in operation] or ["ALL"]
    out = []
    for perm, principals, hosts in (("ALLOW", allow_principal, allow_host), ("DENY", deny_principal, deny_host)):
        for principal, host, op in product(principals, hosts or ("*",), ops):
            out.append({"principal": principal, "host": host, "operation": op, "permission": perm})
    return out


def _add(gw: Gateway, resources, pattern, allow_principal, deny_principal, allow_host, deny_host, operation) -> None:
    if not resources:
        raise click.UsageError("--add needs a resource: --topic, --group, --transactional-id or --cluster")
    if pattern not in ("LITERAL", "PREFIXED"):
        raise click.UsageError("--add takes --resource-pattern-type literal or prefixed")
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host, operation)
    if not entries:
        raise click.UsageError("--add needs --allow-principal or --deny-principal")
    data = [{"resource_type": rtype, "resource_name": name, "pattern_type": pattern, **entry}
            for (rtype, name), entry in product(resources, entries)]
    gw.request("POST", gw.v3("/acls:batch"), json={"data": data})
    click.echo(f"Adding ACLs for {len(resources)} resource(s):")
    _print([{**d} for d in data])


def _remove(gw: Gateway, resources, pattern, allow_principal, deny_principal, allow_host, deny_host,
            operation) -> None:
    if not resources:
        raise click.UsageError("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host, operation)
    if not entries:  # no principal: every ACL of the resources
        entries = [{}]
    removed = []
    for (rtype, name), entry in product(resources, entries):
        params = {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, **entry}
        if params.get("host") == "*" and not (allow_host or deny_host):
            params.pop("host")  # no --*-host given: any host
        if params.get("operation") == "ALL" and not operation:
            params.pop("operation")  # no --operation given: any operation
        removed.extend((gw.request("DELETE", gw.v3("/acls"), params=params) or {}).get("data", []))
    if not removed:
        raise CommandError("no ACL matched")
    click.echo("Removed ACLs:")
    _print(removed)
