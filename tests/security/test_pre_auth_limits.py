"""What a client can make the broker spend before it has authenticated (issue 36,
findings 3, 5 and 7): the size of a request head, connections per address, and the
pace of failed logins.

The protocol's rules run on a real uvicorn server with a trivial app (each with its own
small limits); one real broker with a SASL listener shows the keys reach ``laketail
serve`` and the failed-login delay.
"""

from __future__ import annotations

import socket
import time
from typing import Iterator

import httpx
import pytest
from guarded_server import CLOSE_DEADLINE_S, closed_by_server, guarded_server
from integration.support import wait_until

from laketail.api.connections import ConnectionQuota, parse_overrides
from laketail.config import load_settings
from laketail.errors import InvalidConfig

from .support import PASSWORD, SECRET, SecureBroker, add_user, ports


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=CLOSE_DEADLINE_S, source_address=(source, 0))


def send_all_until_closed(sock: socket.socket, chunks: Iterator[bytes]) -> int:
    """Send ``chunks`` until the peer stops reading; how many bytes went out."""
    sent = 0
    try:
        for chunk in chunks:
            sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def answer(sock: socket.socket) -> bytes:
    sock.settimeout(CLOSE_DEADLINE_S)
    out = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                return out
            out += part
            if out.endswith(b"0\r\n\r\n") or out.endswith(b"}"):  # a chunked body's end, a JSON one's
                return out
    except (ConnectionResetError, socket.timeout):
        return out


def test_a_huge_header_is_431_before_it_is_read_whole():
    with guarded_server(request_header_max_bytes=8192) as port:
        sock = connect(port)
        chunks = iter([b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: "] + [b"a" * 65536] * 256)  # 16 MiB
        sent = send_all_until_closed(sock, chunks)
        got = answer(sock)
        assert got.startswith(b"HTTP/1.1 431"), got[:200]
        assert b'"error_code": 431' in got
        assert sent < 16 * 65536 * 16  # it stopped reading long before the end


def test_a_long_request_line_is_414_and_heads_within_the_limit_are_served():
    with guarded_server(request_line_max_bytes=4096, request_header_max_bytes=8192) as port:
        sock = connect(port)
        sock.sendall(b"GET /" + b"x" * 5000 + b" HTTP/1.1\r\nHost: a\r\n\r\n")
        assert answer(sock).startswith(b"HTTP/1.1 414")
        ok = connect(port)
        head = b"POST /x HTTP/1.1\r\nHost: a\r\nX-Fill: " + b"f" * 7000 + b"\r\nContent-Length: 200000\r\n\r\n"
        ok.sendall(head + b"b" * 200000)  # one send: the head and a large body arrive together
        got = answer(ok)
        assert got.startswith(b"HTTP/1.1 200") and b"got 200000" in got, got[:200]
        ok.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")  # the count starts again per request
        assert answer(ok).startswith(b"HTTP/1.1 200")


def test_connections_per_address_and_its_overrides():
    quota = ConnectionQuota(3, {"127.0.0.3": 1})
    with guarded_server(quota=quota) as port:
        held = [connect(port, "127.0.0.2") for _ in range(3)]
        extra = connect(port, "127.0.0.2")
        wait_until(lambda: closed_by_server(extra), "the fourth connection from one address closed", CLOSE_DEADLINE_S)
        other = connect(port, "127.0.0.1")  # another client is still served
        other.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert answer(other).startswith(b"HTTP/1.1 200")
        only = connect(port, "127.0.0.3")
        second = connect(port, "127.0.0.3")
        wait_until(lambda: closed_by_server(second), "past the override closed", CLOSE_DEADLINE_S)
        only.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert answer(only).startswith(b"HTTP/1.1 200")
        held[0].close()
        wait_until(lambda: quota.open.get("127.0.0.2") == 2, "a closed connection given back")


def test_the_settings_keys():
    settings = load_settings(env={"LAKETAIL_MAX_CONNECTIONS_PER_IP": "7",
                                  "LAKETAIL_MAX_CONNECTIONS_PER_IP_OVERRIDES": "10.0.0.1:2, [::1]:50",
                                  "LAKETAIL_REQUEST_HEADER_MAX_BYTES": "4096"})
    assert settings.max_connections_per_ip == 7 and settings.request_header_max_bytes == 4096
    assert settings.connection_failed_authentication_delay_ms == 100  # Kafka's default
    assert ConnectionQuota.from_settings(settings).overrides == {"10.0.0.1": 2, "::1": 50}
    with pytest.raises(InvalidConfig):
        parse_overrides("10.0.0.1")


# -- a real broker with a SASL listener ---------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    data = tmp_path_factory.mktemp("pre-auth") / "data"
    add_user(data, "alice", PASSWORD)
    client_port, broker_port = ports(2)
    broker = SecureBroker(
        data, {"CLIENT": ("SASL_PLAINTEXT", client_port), "BROKER": ("PLAINTEXT", broker_port)},
        {"LAKETAIL_INTER_BROKER_SECRET": SECRET,
         "LAKETAIL_MAX_CONNECTIONS_PER_IP_OVERRIDES": "127.0.0.2:2",
         "LAKETAIL_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS": "400"},
        ready_auth=httpx.BasicAuth("alice", PASSWORD),
    )
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


def test_the_broker_refuses_a_huge_unauthenticated_header_with_431(sasl_broker):
    sock = connect(sasl_broker.port)
    chunks = iter([b"GET /v3/clusters HTTP/1.1\r\nHost: a\r\nX-Big: "] + [b"a" * 65536] * 256)
    send_all_until_closed(sock, chunks)
    got = answer(sock)
    assert got.startswith(b"HTTP/1.1 431"), got[:200]


def test_one_address_cannot_take_every_connection_of_the_broker(sasl_broker):
    held = [connect(sasl_broker.port, "127.0.0.2") for _ in range(2)]
    extra = connect(sasl_broker.port, "127.0.0.2")
    wait_until(lambda: closed_by_server(extra), "the third connection from 127.0.0.2 closed", CLOSE_DEADLINE_S)
    resp = httpx.get(f"{sasl_broker.url}/v3/clusters", auth=httpx.BasicAuth("alice", PASSWORD), timeout=30)
    assert resp.status_code == 200, resp.text  # the legitimate client from another address
    for sock in held:
        sock.close()


def test_a_failed_login_is_answered_after_the_delay(sasl_broker):
    with httpx.Client(timeout=30) as http:
        for _ in range(3):
            started = time.monotonic()
            resp = http.get(f"{sasl_broker.url}/v3/clusters", auth=httpx.BasicAuth("alice", "wrong"))
            assert resp.status_code == 401, resp.text
            assert time.monotonic() - started >= 0.4  # a lower bound: a slow machine only adds to it
        ok = http.get(f"{sasl_broker.url}/v3/clusters", auth=httpx.BasicAuth("alice", PASSWORD))
        assert ok.status_code == 200
