"""One uvicorn server per listener, all sharing one gateway app and its broker.

:func:`listener_servers` turns the broker's listener plan
(:mod:`laketail.security.listeners`) into uvicorn servers: each serves the same FastAPI
app wrapped in that listener's :class:`~laketail.api.authentication.Authenticate`, with
TLS from ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key`` (PEM), client
certificates verified against ``ssl.truststore.location`` as ``ssl.client.auth`` says
(``none``, ``requested``, ``required``). The first server runs the app's lifespan
(starting and closing the broker); the others only serve, and stop with it.
:func:`run_servers` runs them on one event loop; SIGINT or SIGTERM stops them all.

A broker with the one default listener (PLAINTEXT on host:port, no cluster secret)
serves the app unwrapped, as before: every request is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from typing import Any, Callable, Iterator

import uvicorn
from starlette.types import ASGIApp

from laketail.api.authentication import Authenticate
from laketail.api.connections import ConnectionQuota, guarded_protocol
from laketail.config import BrokerSettings
from laketail.errors import InvalidConfig
from laketail.request_processes import ConnectionBoard, shared_socket
from laketail.security.authenticator import Authenticator
from laketail.security.listeners import Listener, ListenerPlan, listener_plan

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class ListenerServer(uvicorn.Server):
    """A uvicorn server that, when it is the primary one, stops its companions with it."""

    def __init__(self, config: uvicorn.Config, listener: Listener, primary: bool) -> None:
        super().__init__(config)
        self.listener = listener
        self.primary = primary
        self.companions: list[ListenerServer] = []
        #: A socket bound before serving (the shared client port of request processes).
        self.prebound: socket.socket | None = None
        #: Called when the primary server is told to stop (before the broker closes).
        self.on_exit: list[Callable[[], None]] = []
        #: Called when the primary server has stopped serving (the broker closed), before
        #: uvicorn raises the signal that stopped it again.
        self.on_stopped: list[Callable[[], None]] = []

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None and self.prebound is not None:
            sockets = [self.prebound]
        await super().serve(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if not self.primary:
            yield  # the primary server owns the process's signal handlers
            return
        with super().capture_signals():
            try:
                yield
            finally:
                for callback in self.on_stopped:
                    callback()

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        for other in self.companions:
            other.should_exit = True
        for callback in self.on_exit:
            callback()


def wrap(app: ASGIApp, settings: BrokerSettings, plan: ListenerPlan) -> list[tuple[Listener, ASGIApp]]:
    """Each listener with the app it serves."""
    if plan.shared and plan.listeners[0].protocol == "PLAINTEXT" and not settings.inter_broker_secret:
        return [(plan.listeners[0], app)]
    if settings.ssl_client_auth not in CLIENT_AUTH:
        raise InvalidConfig(f"ssl.client.auth={settings.ssl_client_auth!r}: none, requested or required")
    authenticator = Authenticator(settings)
    delay_s = settings.connection_failed_authentication_delay_ms / 1000.0
    return [(lst, Authenticate(app, lst, authenticator, settings.inter_broker_secret, failed_delay_s=delay_s))
            for lst in plan.listeners]


def listener_servers(app: ASGIApp, settings: BrokerSettings, *, log_level: str = "info") -> list[ListenerServer]:
    plan = listener_plan(settings)
    board = ConnectionBoard.of(settings)  # request processes: one per process, for its client listeners
    quota = ConnectionQuota.from_settings(settings)  # max.connections.per.ip over all the listeners
    servers = []
    for i, (lst, served) in enumerate(wrap(app, settings, plan)):
        tls: dict[str, Any] = {}
        if lst.tls:
            tls = {"ssl_certfile": settings.ssl_keystore_certificate_chain, "ssl_keyfile": settings.ssl_keystore_key,
                   "ssl_cert_reqs": CLIENT_AUTH[settings.ssl_client_auth]}
            if settings.ssl_truststore_location:
                tls["ssl_ca_certs"] = settings.ssl_truststore_location
            elif settings.ssl_client_auth != "none":
                raise InvalidConfig("ssl.client.auth needs ssl.truststore.location (the CA of client certificates)")
        config = uvicorn.Config(
            served,
            host=lst.host,
            port=lst.port,
            log_level=log_level,
            access_log=False,  # laketail's own (create_app's access_log) has duration and principal
            proxy_headers=False,  # uvicorn would take X-Forwarded-For/-Proto from 127.0.0.1: a local
            # process could name another host and escape a host ACL (peers speak for clients with the secret)
            lifespan="on" if i == 0 else "off",
            http=guarded_protocol(settings, None if lst.inter_broker else board, quota),  # read deadlines,
            # max.connections, client certificates, connections spread evenly over request processes
            # uvicorn annotates an int but hands it to loop.call_later: fractions of a second hold
            timeout_keep_alive=settings.connections_max_idle_ms / 1000,  # type: ignore[arg-type]
            **tls,
        )
        server = ListenerServer(config, lst, primary=i == 0)
        if settings.request_processes > 1 and not lst.inter_broker:
            server.prebound = shared_socket(lst.host, lst.port)  # SO_REUSEPORT: every process binds it
        servers.append(server)
    servers[0].companions = servers[1:]
    return servers


async def run_servers(servers: list[ListenerServer]) -> bool:
    """Serve until the primary server stops; whether it started at all."""
    primary = asyncio.ensure_future(servers[0].serve())
    while not servers[0].started and not primary.done():
        await asyncio.sleep(0.02)  # the lifespan (broker start) runs before any socket is bound
    others = [asyncio.ensure_future(s.serve()) for s in servers[1:]] if servers[0].started else []
    try:
        await primary
    except SystemExit:
        pass  # uvicorn could not bind a socket (it logged why); the caller exits
    finally:
        for s in servers[1:]:
            s.should_exit = True
        if others:
            await asyncio.gather(*others, return_exceptions=True)
    return servers[0].started
