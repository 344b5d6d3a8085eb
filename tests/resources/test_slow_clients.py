"""Slow and idle clients: read deadlines and max.connections (issue 14, section 3).

The protocol is checked on a real uvicorn server on 127.0.0.1 with a trivial app (so
each rule gets its own small timeouts without a broker start each); one test proves
``laketail serve`` runs it with the broker's settings.
"""

from __future__ import annotations

import socket
import time

from guarded_server import CLOSE_DEADLINE_S, closed_by_server, guarded_server
from integration.support import wait_until


def server(header_s: float = 60.0, body_s: float = 60.0, max_connections: int = 1000):
    return guarded_server(header_timeout_s=header_s, body_timeout_s=body_s, max_connections=max_connections)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=CLOSE_DEADLINE_S)
    return sock


def request(sock: socket.socket, raw: bytes) -> bytes:
    sock.sendall(raw)
    sock.settimeout(CLOSE_DEADLINE_S)
    return sock.recv(4096)


def test_half_a_request_line_is_closed_after_the_header_timeout():
    with server(header_s=0.5) as port:
        stalled = connect(port)
        stalled.sendall(b"GET /topi")
        wait_until(lambda: closed_by_server(stalled), "the stalled connection closed", CLOSE_DEADLINE_S)
        silent = connect(port)  # says nothing at all
        wait_until(lambda: closed_by_server(silent), "the silent connection closed", CLOSE_DEADLINE_S)


def test_a_stalled_body_is_closed_after_the_body_timeout_and_a_steady_one_is_not():
    with server(body_s=2.0) as port:
        stalled = connect(port)
        stalled.sendall(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
        wait_until(lambda: closed_by_server(stalled), "the stalled body's connection closed", CLOSE_DEADLINE_S)

        steady = connect(port)
        steady.sendall(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\n")
        for chunk in (b"ab", b"cd", b"ef"):
            time.sleep(0.3)  # pacing the client, never asserted on: each gap is under the timeout
            steady.sendall(chunk)
        steady.settimeout(CLOSE_DEADLINE_S)
        assert b"got 6" in steady.recv(4096)


def test_connections_past_max_connections_are_closed_at_once():
    with server(max_connections=4) as port:
        held = [connect(port) for _ in range(4)]
        extra = connect(port)
        wait_until(lambda: closed_by_server(extra), "the fifth connection closed", CLOSE_DEADLINE_S)
        # the four within the limit are still served
        for sock in held:
            assert request(sock, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").startswith(b"HTTP/1.1 200")
        for sock in held:
            sock.close()
        again = connect(port)  # room again once they are gone
        wait_until(lambda: request(again, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").startswith(b"HTTP/1.1 200"),
                   "a new connection served", CLOSE_DEADLINE_S)


def test_the_broker_closes_a_stalled_request(limited_broker):
    sock = connect(limited_broker.port)
    sock.sendall(b"GET /v3/clus")
    wait_until(lambda: closed_by_server(sock), "the broker closed the stalled connection", CLOSE_DEADLINE_S)


def test_a_kept_alive_connection_outlives_the_usual_client_keep_alive(broker):
    """connections.max.idle.ms (30 s) is longer than httpx's 5 s keep-alive expiry: the
    broker used uvicorn's 5 s, so a client reusing a connection at ~5 s raced the
    broker's close and got "Server disconnected without sending a response" (seen
    under load in tests/integration/test_concurrency.py)."""
    sock = connect(broker.port)
    ask = b"GET /v3/clusters HTTP/1.1\r\nHost: a\r\n\r\n"
    assert request(sock, ask).startswith(b"HTTP/1.1 200")
    time.sleep(6.0)  # past the 5 s at which uvicorn's default closes an idle connection
    assert not closed_by_server(sock)
    assert request(sock, ask).startswith(b"HTTP/1.1 200")
    sock.close()
