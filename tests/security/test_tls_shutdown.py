"""A broker with TLS listeners stops promptly while clients hold idle connections.

A TLS close waits for the client's ``close_notify``; a client that keeps a kept-alive
connection open without reading never sends it, and uvloop waits 30 s before giving up,
so such a client held a stopping broker for 30 s (past Kubernetes' default grace period,
after which the broker would be killed). The broker now cuts such a connection after
``TLS_CLOSE_GRACE_S`` (1 s). The stop below allows 15 s, half of what the old wait took.
"""

from __future__ import annotations

import socket
import ssl

import pytest

from tests.security.support import Pki, SecureBroker, ports

pytestmark = pytest.mark.integration


def _idle_tls_connection(broker: SecureBroker, ca) -> ssl.SSLSocket:
    """A TLS connection that made one kept-alive request, read its answer, and then sits."""
    context = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    tls.sendall(b"GET /v3/clusters HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += tls.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += tls.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head
    return tls


def test_idle_tls_clients_do_not_hold_a_stopping_broker(tmp_path):
    pki = Pki(tmp_path / "pki")
    (client_port,) = ports(1)
    broker = SecureBroker(tmp_path / "data", {"CLIENT": ("SSL", client_port)}, pki.broker_env(),
                          inter_broker="CLIENT", ca=pki.ca_pem).start()
    idle = [_idle_tls_connection(broker, pki.ca_pem) for _ in range(3)]
    try:
        code = broker.stop(timeout_s=15)
        assert code is not None, "the broker had to be killed: idle TLS connections held its shutdown"
        for conn in idle:  # each was closed by the broker: the end of the stream, or a reset
            try:
                assert conn.recv(65536) == b""
            except (ssl.SSLError, ConnectionError):
                pass
        broker.start()  # and it starts again
        with broker.client() as http:
            assert http.get(f"{broker.url}/v3/clusters").status_code == 200
    finally:
        for conn in idle:
            conn.close()
        broker.stop()
