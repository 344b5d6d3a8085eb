"""``laketail users``: SCRAM credentials in the catalog (Kafka's ``kafka-configs --entity-type users``).

::

    laketail users add alice --mechanism SCRAM-SHA-512 --iterations 8192   # password from a prompt
    LAKETAIL_USER_PASSWORD=... laketail users add alice                    # or from the environment
    laketail users list
    laketail users remove alice [--mechanism SCRAM-SHA-256]

They write ``<data>/_system/credentials`` directly (like ``kafka-configs --zookeeper``
did), so they run where the data root is reachable, with its storage's permissions;
brokers see a change within a second. Only salted keys are stored (RFC 5802), never
the password. Every change is logged on ``laketail.audit`` (principal, host,
operation, resource, result), Kafka's authorizer-logger style.
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
import sys

import click

from laketail.cli.options import CommandError

audit = logging.getLogger("laketail.audit")


def _data_option(func):
    return click.option("--data", metavar="DIR", envvar="LAKETAIL_DATA", default="./laketail-data",
                        show_default=True, help="The cluster's data root (where _system/ lives).")(func)


def _audit(operation: str, user: str, mechanism: str) -> None:
    """One structured line per admin change, to stderr through ``laketail.audit``."""
    if not audit.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        audit.addHandler(handler)
        audit.setLevel(logging.INFO)
        audit.propagate = False
    audit.info("principal=User:%s host=%s operation=%s resource=User:%s mechanism=%s result=allowed",
               getpass.getuser(), socket.gethostname(), operation, user, mechanism)


@click.group()
def users() -> None:
    """SCRAM users (credentials in the catalog)."""


@users.command("add")
@click.argument("user")
@click.option("--mechanism", type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"]), default="SCRAM-SHA-256",
              show_default=True)
@click.option("--iterations", type=click.IntRange(4096, 1_000_000), default=4096, show_default=True,
              help="PBKDF2 rounds (Kafka's minimum and default: 4096).")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (one line).")
@_data_option
def add(user: str, mechanism: str, iterations: int, password_stdin: bool, data: str) -> None:
    """Add USER, or replace their credential for MECHANISM."""
    from laketail.errors import LaketailError
    from laketail.security.credentials import CredentialStore, validate_user
    from laketail.security.scram import make_credential

    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")  # click.get_text_stream is deprecated (8.5)
    elif "LAKETAIL_USER_PASSWORD" in os.environ:
        password = os.environ["LAKETAIL_USER_PASSWORD"]
    else:
        password = click.prompt(f"password for {user}", hide_input=True, confirmation_prompt=True)
    try:
        validate_user(user)
        CredentialStore(data).upsert(user, make_credential(password, mechanism, iterations))
    except LaketailError as exc:
        raise CommandError(exc.message) from exc
    _audit("AlterUserScramCredentials:upsert", user, mechanism)
    click.echo(f"user {user}: {mechanism} credential stored ({iterations} iterations)")


@users.command("remove")
@click.argument("user")
@click.option("--mechanism", type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
              help="Remove only this mechanism's credential [default: all of them].")
@_data_option
def remove(user: str, mechanism: str | None, data: str) -> None:
    """Remove USER's credentials."""
    from laketail.security.credentials import CredentialStore

    dropped = CredentialStore(data).remove(user, mechanism)
    if not dropped:
        raise CommandError(f"user {user} has no {mechanism or 'SCRAM'} credential")
    _audit("AlterUserScramCredentials:delete", user, mechanism or "*")
    click.echo(f"user {user}: {dropped} credential(s) removed")


@users.command("list")
@_data_option
def list_users(data: str) -> None:
    """Every user and their mechanisms (never a key)."""
    from laketail.security.credentials import CredentialStore

    for user, creds in sorted(CredentialStore(data).load().items()):
        shown = ", ".join(f"{m} (iterations={c.iterations})" for m, c in sorted(creds.items()))
        click.echo(f"{user}\t{shown}")
