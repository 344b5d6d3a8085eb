"""SASL re-authentication (KIP-368) on a real broker with ``connections.max.reauth.ms``:
the session lifetime is answered, a client that re-authenticates on its connection
keeps it, and a request after the lifetime closes a connection that did not. The
gate's rules (same principal, same mechanism) are pinned without a socket in
test_sasl_exchange.py."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from typing import Iterator

import jwt
import pytest
from confluent_kafka import Producer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.kafka_listener.conftest import KafkaBroker
from tests.kafka_listener.test_listener import _call, _closed
from tests.security.support import add_user

pytestmark = pytest.mark.integration
LIFETIME_MS = 5000
PASSWORD = "carol-pw-9"
OAUTH_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    base = tmp_path_factory.mktemp("kafka-reauth")
    data = base / "data"
    add_user(data, "carol", PASSWORD)
    public_pem = base / "oauth-public.pem"
    public_pem.write_bytes(OAUTH_KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    proc = KafkaBroker(data, env={"LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "KAFKA:SASL_PLAINTEXT",
                                  "LAKETAIL_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-256,PLAIN,OAUTHBEARER",
                                  "LAKETAIL_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": str(public_pem),
                                  "LAKETAIL_CONNECTIONS_MAX_REAUTH_MS": str(LIFETIME_MS)})
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()


def _plain(sock: socket.socket, user: str = "carol", password: str = PASSWORD) -> tuple[int, int]:
    shake = _call(sock, 17, 1, {"mechanism": "PLAIN"})
    assert int(shake.error_code) == 0
    done = _call(sock, 36, 2, {"auth_bytes": b"\0%s\0%s" % (user.encode(), password.encode())})
    return int(done.error_code), int(done.session_lifetime.total_seconds() * 1000)


def _metadata(sock: socket.socket) -> None:
    _call(sock, 3, 9, {"topics": [], "allow_auto_topic_creation": False,
                       "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})


def test_the_lifetime_is_answered_renewed_and_enforced(reauth_broker):
    with socket.create_connection(("127.0.0.1", reauth_broker.kafka_port), timeout=30) as sock:
        assert _plain(sock) == (0, LIFETIME_MS)
        _metadata(sock)
        assert _plain(sock) == (0, LIFETIME_MS)  # re-authentication on the same connection
        renewed = time.monotonic()
        _metadata(sock)
        time.sleep(max(0.0, renewed + LIFETIME_MS / 1000 + 0.5 - time.monotonic()))  # past the session's end
        with pytest.raises((ConnectionError, AssertionError, OSError)):
            _metadata(sock)
        assert _closed(sock)


def _oauth(sock: socket.socket, expires_in_s: int) -> tuple[int, int]:
    token = jwt.encode({"sub": "carol", "exp": int(time.time()) + expires_in_s}, OAUTH_KEY, algorithm="RS256")
    shake = _call(sock, 17, 1, {"mechanism": "OAUTHBEARER"})
    assert int(shake.error_code) == 0
    done = _call(sock, 36, 2, {"auth_bytes": b"n,,\x01auth=Bearer %s\x01\x01" % token.encode()})
    return int(done.error_code), int(done.session_lifetime.total_seconds() * 1000)


def test_an_oauthbearer_session_is_capped_at_its_tokens_expiry(reauth_broker):
    """KIP-368: the lifetime is min(connections.max.reauth.ms, exp - now); a token that
    outlives the setting gets the setting's lifetime, one that expires sooner its own,
    and a request after the token's expiry closes a connection that did not renew."""
    with socket.create_connection(("127.0.0.1", reauth_broker.kafka_port), timeout=30) as sock:
        assert _oauth(sock, 600) == (0, LIFETIME_MS)
    with socket.create_connection(("127.0.0.1", reauth_broker.kafka_port), timeout=30) as sock:
        code, lifetime = _oauth(sock, 2)
        authenticated = time.monotonic()
        assert code == 0 and 0 < lifetime <= 2000 < LIFETIME_MS  # exp is whole seconds
        _metadata(sock)
        time.sleep(max(0.0, authenticated + lifetime / 1000 + 0.5 - time.monotonic()))  # past the token's end
        with pytest.raises((ConnectionError, AssertionError, OSError)):
            _metadata(sock)
        assert _closed(sock)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_reauthenticates_and_keeps_its_connection(reauth_broker):
    """librdkafka (2.2+) re-authenticates before the lifetime it was answered ends, so
    the broker never closes its connection under it (librdkafka logs each close)."""
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    assert reauth_broker.rest.create_topic(topic, 1).status_code in (200, 201)
    lines = Lines()
    logger = logging.getLogger(f"rdkafka-{topic}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    producer = Producer({"bootstrap.servers": reauth_broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": PASSWORD,
                         "acks": "all", "debug": "security,broker", "logger": logger})
    errors: list = []
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < 2.5 * LIFETIME_MS / 1000:  # through two session ends
        producer.produce(topic, value=b"v%d" % sent, on_delivery=lambda err, _msg: errors.append(err) if err else None)
        sent += 1
        producer.poll(0.25)
    assert producer.flush(60) == 0 and errors == []
    assert [line for line in lines.lines if "Received session lifetime" in line]
    assert len([line for line in lines.lines if "Auth in state REAUTH" in line]) >= 2
    connects = [line for line in lines.lines if "/0: Broker changed state" in line and "-> CONNECT" in line]
    assert len(connects) == 1, connects  # one connection to the broker, never closed and reopened
    assert reauth_broker.rest.offsets(topic, 0)[1] == sent
