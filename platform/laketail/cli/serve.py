"""``laketail serve``: run one broker (its gateway) in the foreground.

Settings come from ``conf/laketail.toml`` (when present, or ``--config``), then
``LAKETAIL_*`` variables, then these flags (``laketail.config.load_settings``); the
app is ``laketail.api.app.create_app(settings)`` under uvicorn. Ctrl-C (SIGINT) or
SIGTERM stops it cleanly: the app's shutdown closes the broker.

Safe by default: a listener bound beyond loopback (``--host 0.0.0.0``, or a
``listeners`` entry) must authenticate its clients (``SASL_SSL`` / ``SASL_PLAINTEXT``,
or ``SSL`` with ``ssl.client.auth=required``), else ``serve`` refuses to start unless
told ``--allow-anonymous``. Several listeners are served by one process
(:mod:`laketail.api.listeners`). ``--processes N`` runs N request processes that share
the port, each leading its share of the partitions (:mod:`laketail.request_processes`);
by default one per usable core.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from laketail.cli.options import CommandError, exit_policy

if TYPE_CHECKING:
    from laketail.config import BrokerSettings

DEFAULT_CONFIG = Path("conf") / "laketail.toml"


@click.command()
@click.option("--data", metavar="DIR|URI",
              help="Data root (tables, catalog): a folder or a bucket URI such as s3://bucket/prefix "
                   "[default: ./laketail-data].")
@click.option("--host", metavar="HOST", help="Interface to listen on [default: 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), help="Port to listen on [default: 8082].")
@click.option("--broker-id", type=click.IntRange(min=0), help="This broker's id (broker.id) [default: 0].")
@click.option("--log-dir", metavar="DIR",
              help="Hot segments directory (log.dirs) [default: DATA/logs/broker-ID; "
                   "./laketail-logs/broker-ID when DATA is a bucket URI].")
@click.option("--advertised-url", metavar="URL", help="URL other brokers and clients use for this one.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAKETAIL_CONFIG",
    help=f"Settings file [default: {DEFAULT_CONFIG} when it exists].",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.option("--access-log/--no-access-log", default=False, show_default=True, envvar="LAKETAIL_ACCESS_LOG",
              help="Log every request: method, path, status, duration, principal (logger laketail.access).")
@click.option("--allow-anonymous", is_flag=True, envvar="LAKETAIL_ALLOW_ANONYMOUS",
              help="Listen beyond loopback even where no client is authenticated (everyone is User:ANONYMOUS).")
@click.option("--processes", type=click.IntRange(1, 64),
              help="Request processes, each leading its share of the partitions on the same port "
                   "(laketail.request.processes) [default: one per usable core: CPU affinity and "
                   "cgroup quota; 1 with port 0, or an advertised URL or inter-broker listener "
                   "for brokers on other hosts].")
@click.option("--request-process", type=click.IntRange(min=0), default=0, hidden=True)
@click.option(
    "--no-maintenance",
    is_flag=True,
    help="Do not run retention and compaction of user topics (laketail.maintenance.enable=false).",
)
def serve(
    data: str | None,
    host: str | None,
    port: int | None,
    broker_id: int | None,
    log_dir: str | None,
    advertised_url: str | None,
    config_path: Path | None,
    log_level: str,
    access_log: bool,
    allow_anonymous: bool,
    processes: int | None,
    request_process: int,
    no_maintenance: bool,
) -> None:
    """Run a laketail broker until Ctrl-C."""
    exit_policy.finalize = True  # multiprocessing's atexit handler stops request processes
    from laketail.config import load_settings
    from laketail.errors import LaketailError

    if config_path is None:
        config_path = DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None
    elif not config_path.is_file():
        raise CommandError(f"settings file {config_path} does not exist")
    try:
        settings = load_settings(
            config_path,
            data=data,
            host=host,
            port=port,
            broker_id=broker_id,
            log_dir=log_dir,
            advertised_url=advertised_url,
            maintenance_enabled=False if no_maintenance else None,
            request_processes=processes,
        )
        from laketail import request_processes
        from laketail.security.listeners import exposure_problems, listener_plan

        settings, processes_why = request_processes.decide(settings)
        request_processes.check(settings)
        group = settings
        if settings.request_processes > 1:
            settings = request_processes.process_settings(group, request_process)
        plan = listener_plan(settings)
    except LaketailError as exc:
        raise CommandError(exc.message) from exc
    problems = exposure_problems(plan, settings.ssl_client_auth)
    if problems and not allow_anonymous:
        raise CommandError(
            "refusing to listen beyond loopback without authentication: " + "; ".join(problems)
            + ". Use a SASL_SSL listener with SCRAM users (laketail users add) or OAuth, SSL with "
            "ssl.client.auth=required, bind 127.0.0.1, or pass --allow-anonymous to accept anyone"
        )

    from laketail.security.listeners import is_loopback

    for lst in plan.listeners:
        if lst.protocol == "SASL_PLAINTEXT" and not is_loopback(lst.host):
            click.echo(f"warning: listener {lst.name} is SASL_PLAINTEXT beyond loopback: HTTP Basic passwords "
                       "and bearer tokens cross the network unencrypted; use SASL_SSL", err=True)

    import asyncio
    import logging

    from laketail.api.app import create_app
    from laketail.api.listeners import listener_servers, run_servers
    from laketail.log_format import EscapingFormatter, escape_handlers

    # laketail's own loggers at the same level as uvicorn's (elections, ISR changes,
    # tiering), with the time: a cluster's story is read across three brokers' logs.
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    laketail_log = logging.getLogger("laketail")
    laketail_log.addHandler(handler)
    laketail_log.setLevel(log_level.upper())
    laketail_log.propagate = False

    app = create_app(settings, access_log=access_log)
    try:
        servers = listener_servers(app, settings, log_level=log_level)
    except LaketailError as exc:
        raise CommandError(exc.message) from exc
    except OSError as exc:  # the shared client port of request processes, bound here
        raise CommandError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}") from exc
    shown = ", ".join([f"{s.listener.name} {s.listener.protocol} {s.listener.host}:{s.listener.port}"
                       + (" (inter-broker)" if s.listener.inter_broker and len(servers) > 1 else "")
                       for s in servers] + [f"{k.name} Kafka {k.protocol} {k.host}:{k.port}" for k in plan.kafka])
    click.echo(
        f"laketail broker {settings.broker_id}: data {settings.data}, hot logs "
        f"{settings.hot_log_dir}, listening on {settings.url} [{shown}], request processes {processes_why}"
        + (f" (config {config_path})" if config_path else ""),
        err=True,
    )
    # uvicorn set up its handlers in Config(): escape what they log, as laketail's own
    escape_handlers("uvicorn", "uvicorn.error", "uvicorn.access")
    _settle_heap()
    from laketail.process_memory import keep_freed_memory

    keep_freed_memory()
    servers[0].on_exit.append(lambda: _resign_groups(app))
    supervisor = None
    if settings.request_processes > 1 and request_process == 0:
        def command(index: int) -> list[str]:
            return _process_command(group, index, config_path, log_level, access_log, allow_anonymous)

        supervisor = request_processes.Supervisor(settings.request_processes, command,
                                                  request_processes.child_env(settings))
        supervisor.start()
        servers[0].on_exit.append(supervisor.begin_stop)
        servers[0].on_stopped.append(supervisor.stop)  # before uvicorn raises SIGTERM again
    loop_factory = servers[0].config.get_loop_factory()
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            # the Kafka-protocol listeners (laketail.kafka) run beside the HTTP ones
            from laketail.kafka.server import serve_with_kafka

            started = runner.run(serve_with_kafka(run_servers(servers), servers, app, settings))
    finally:
        if supervisor is not None:
            supervisor.stop()
    if not started:
        raise SystemExit(3)  # as uvicorn.run: the socket could not be bound


def _resign_groups(app) -> None:
    """The broker was told to stop: its group coordinator answers the joins still waiting
    for a rebalance NOT_COORDINATOR, as Kafka's does when it stops (uvicorn waits for
    every request before the lifespan closes the broker, and a join may wait minutes).
    Called from the signal handler, so the answer is scheduled on the event loop."""
    import asyncio

    broker = getattr(app.state, "broker", None)
    if broker is None:
        return  # stopped before the lifespan started it
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.call_soon_threadsafe(broker.groups.resign)


def _process_command(group: BrokerSettings, index: int, config_path: Path | None, log_level: str,
                     access_log: bool, allow_anonymous: bool) -> list[str]:
    """``serve`` for request process ``index`` of ``group`` (the first process's settings
    before its own share was taken): the same settings, given as flags so that they win
    over the environment and the settings file as they did here."""
    import sys

    argv = [sys.executable, "-m", "laketail.cli", "serve", "--request-process", str(index),
            "--processes", str(group.request_processes), "--data", group.data, "--host", group.host,
            "--port", str(group.port), "--broker-id", str(group.broker_id), "--log-level", log_level]
    if group.log_dir:
        argv += ["--log-dir", group.log_dir]
    if group.advertised_url:
        argv += ["--advertised-url", group.advertised_url]
    if config_path is not None:
        argv += ["--config", str(config_path.resolve())]
    if access_log:
        argv.append("--access-log")
    if allow_anonymous:
        argv.append("--allow-anonymous")
    if not group.maintenance_enabled:
        argv.append("--no-maintenance")
    return argv


#: The collector's first threshold for the broker process: allocations of container
#: objects between two young collections (CPython's default is 700).
GC_YOUNG_THRESHOLD = 10_000


def _settle_heap() -> None:
    """Take the startup heap out of the collector's way before serving.

    Everything imported and built so far (FastAPI, pydantic, pyarrow, deltalake: about
    90,000 tracked objects) lives as long as the process. A produce request parses
    its body into one dict per record, and while eight requests are in flight their
    dicts are promoted to the oldest generation, so CPython ran a full collection over
    the whole startup heap every few hundred requests: 0.10 ms per request at 1,000
    records per request, measured with ``gc.callbacks`` (bench/README.md, issue 18).
    ``gc.freeze()`` moves the startup heap to the permanent generation, which no
    collection visits; a young threshold of :data:`GC_YOUNG_THRESHOLD` collects ten
    times less often, and since a request's dicts are freed by reference counting when
    it ends, each collection finds about as much alive as before. Reference cycles are
    still collected, only later."""
    import gc

    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)

