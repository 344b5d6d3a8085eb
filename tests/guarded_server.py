"""A real uvicorn server on 127.0.0.1 running laketail's connection protocol
(:class:`laketail.api.connections.GuardedHttpProtocol`) with limits of the test's choosing,
in front of a trivial echo app: the protocol's rules tested without a broker start each
(tests/resources/test_slow_clients.py, tests/security/test_pre_auth_limits.py)."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import uvicorn
from conftest import free_port
from integration.support import wait_until

from laketail.api.connections import GuardedHttpProtocol

#: A closed connection must be seen within this (a failure bound, not a speed claim).
CLOSE_DEADLINE_S = 30.0


async def echo_app(scope, receive, send):
    """Answers 200 ``got <n>`` with the length of the request body."""
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"got %d" % len(body)})


@contextmanager
def guarded_server(**limits: Any) -> Iterator[int]:
    """The port of a server whose protocol has ``limits`` as class attributes
    (``header_timeout_s``, ``max_connections``, ``request_header_max_bytes``, ...)."""
    protocol = type("P", (GuardedHttpProtocol,), limits)
    port = free_port()
    config = uvicorn.Config(echo_app, host="127.0.0.1", port=port, http=protocol, lifespan="off",
                            log_level="warning", timeout_keep_alive=60)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_until(lambda: srv.started, "the test server listening")
    try:
        yield port
    finally:
        srv.should_exit = True
        srv.force_exit = True  # do not wait for the test's idle sockets
        thread.join(timeout=CLOSE_DEADLINE_S)


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed ``sock`` (recv sees EOF or a reset)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(4096) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True
