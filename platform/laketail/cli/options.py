"""What every client command shares: ``--server``, ``k=v`` parsing, the error exit,
and table output.

:class:`CommandError` is the one way a command fails on purpose: it prints
``error: <message>`` on stderr and exits 1. Usage errors stay click's own (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

DEFAULT_SERVER = "http://127.0.0.1:8082"
SERVER_ENV = "LAKETAIL_SERVER"

F = TypeVar("F", bound=Callable[..., Any])


class ExitPolicy:
    """How the process ends after the command (``laketail.cli.main``): ``os._exit`` once
    output is flushed, unless a command asked for the interpreter's ordinary finalization."""

    finalize = False


exit_policy = ExitPolicy()


class CommandError(click.ClickException):
    """A command failed (the broker said no, or nothing answered): exit 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


#: Where ``laketail --server URL <command>`` leaves the URL (``ctx.meta`` is shared by
#: the group's context and its subcommands').
_META_KEY = "laketail.server"


def _remember_server(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[_META_KEY] = value


def _resolve_server(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """The subcommand's ``--server``, else the group's, else ``$LAKETAIL_SERVER``, else
    the default."""
    if value is not None:
        return value
    return ctx.meta.get(_META_KEY) or os.environ.get(SERVER_ENV) or DEFAULT_SERVER


def group_server_option(func: F) -> F:
    """``laketail --server URL <command> ...``: the same option before the subcommand."""
    return click.option(
        "--server", metavar="URL", expose_value=False, callback=_remember_server,
        help=f"The broker's gateway URL for any command (or ${SERVER_ENV}) [default: {DEFAULT_SERVER}].",
    )(func)


def server_option(func: F) -> F:
    """``--server URL``, accepted anywhere after the subcommand's name (and before it,
    :func:`group_server_option`); a flag after the subcommand wins."""
    return click.option(
        "--server",
        default=None,
        callback=_resolve_server,
        metavar="URL",
        help=f"The broker's gateway URL (or ${SERVER_ENV}) [default: {DEFAULT_SERVER}].",
    )(func)


#: Where ``laketail --command-config FILE <command>`` leaves the file's path.
_CONFIG_KEY = "laketail.command_config"
#: laketail.client.security.COMMAND_CONFIG_ENV, copied (a test holds them equal): importing
#: ``laketail.client`` takes about 0.3 s, which every ``laketail`` command would pay.
COMMAND_CONFIG_ENV = "LAKETAIL_COMMAND_CONFIG"


def _remember_command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[_CONFIG_KEY] = value


def group_command_config_option(func: F) -> F:
    """``laketail --command-config FILE <command>``: Kafka's client properties file
    (``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
    ``ssl.ca.location``, ...), as the Kafka tools' ``--command-config``."""
    return click.option(
        "--command-config", metavar="FILE", expose_value=False, callback=_remember_command_config,
        type=click.Path(exists=True, dir_okay=False),
        help=f"Client properties (security.protocol, sasl.*, ssl.*) for every command (or ${COMMAND_CONFIG_ENV}).",
    )(func)


def command_config_path() -> str | None:
    """The file ``laketail --command-config FILE`` named, if any."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_CONFIG_KEY) if ctx is not None else None


def client_properties(env: dict[str, str] | None = None) -> dict[str, str]:
    """The CLI's client properties: ``--command-config`` (or ``$LAKETAIL_COMMAND_CONFIG``),
    then ``LAKETAIL_SECURITY_PROTOCOL``, ``LAKETAIL_SASL_MECHANISM``, ``LAKETAIL_SASL_USERNAME``,
    ``LAKETAIL_SASL_PASSWORD``, ``LAKETAIL_SSL_CA_LOCATION``, ``LAKETAIL_SSL_CERTIFICATE_LOCATION``,
    ``LAKETAIL_SSL_KEY_LOCATION`` (each key upper-cased, dots as underscores) over it."""
    from laketail.client import security

    path = command_config_path()
    try:
        return security.client_properties(path, dict(os.environ) if env is None else env)
    except OSError as exc:
        raise CommandError(f"command config {path or os.environ.get(COMMAND_CONFIG_ENV)}: {exc}") from exc
    except ValueError as exc:
        raise CommandError(f"command config {exc}") from None


def client_http_options(env: dict[str, str] | None = None) -> dict[str, Any]:
    """``verify`` / ``auth`` for the CLI's httpx clients, from :func:`client_properties`."""
    from laketail.client.security import client_security

    props = client_properties(env)
    if not props:
        return {}
    try:
        return client_security(props).httpx_options()
    except (ValueError, OSError) as exc:
        raise CommandError(f"client security settings: {exc}") from exc


def parse_pairs(values: Iterable[str], option: str = "--config") -> dict[str, str]:
    """``["retention.ms=1000", ...]`` as a dict; a malformed pair is a usage error."""
    out: dict[str, str] = {}
    for raw in values:
        name, sep, value = raw.partition("=")
        name = name.strip()
        if not sep or not name:
            raise click.BadParameter(f"expected KEY=VALUE, got {raw!r}", param_hint=option)
        out[name] = value.strip()
    return out


def stdout_console() -> Console:
    """Rich output on stdout. Piped, it is as wide as the text needs, so names are
    never cut to fit 80 columns (``laketail topics list | grep`` sees whole names)."""
    probe = Console()
    return Console(highlight=False, width=None if probe.is_terminal else 100_000)


def plain_table(*columns: str) -> Table:
    """A borderless table whose cells fold rather than being cut with an ellipsis."""
    table = Table(box=None, pad_edge=False)
    for name in columns:
        table.add_column(name, overflow="fold")
    return table
