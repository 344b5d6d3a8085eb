"""SASL and TLS on Kafka listeners, end to end with real clients (confluent-kafka's
librdkafka and kafka-python) against one real broker with three Kafka listeners:

* ``SASLPLAIN`` -- SASL_PLAINTEXT: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN;
* ``SASLTLS``   -- SASL_SSL, the broker's certificate from a throw-away trustme CA;
* ``MTLS``      -- SSL with ``ssl.client.auth=requested``: a client certificate's subject
  names the principal through ``ssl.principal.mapping.rules``.

Users are made with ``laketail users add`` as an operator does; ACLs are created over
REST v3 on the HTTP listener, and apply to the SASL and certificate principals as they
do to HTTP requests.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any, Iterator

import httpx
import jwt
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka import KafkaConsumer, KafkaProducer

from tests.conftest import free_port
from tests.kafka_listener.conftest import KafkaBroker
from tests.kafka_listener.test_listener import _call, _closed, _read_frame
from tests.kafka_listener.test_sasl_exchange import _client_final
from tests.security.support import Pki, add_user

pytestmark = pytest.mark.integration
OAUTH_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
QUIET = {"log_level": 0}
ALICE, BOB, ERIN = "alice-pw-1", "bob-pw-2", "erin-pw-3"


class SaslBroker(KafkaBroker):
    def __init__(self, data_dir, pki: Pki, oauth_public_pem) -> None:
        self.ports = {"SASLPLAIN": free_port(), "SASLTLS": free_port(), "MTLS": free_port()}
        self.pki = pki
        super().__init__(data_dir, env={
            "LAKETAIL_LISTENERS": ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items()),
            "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "SASLPLAIN:SASL_PLAINTEXT,SASLTLS:SASL_SSL,MTLS:SSL",
            "LAKETAIL_KAFKA_LISTENER_NAMES": "SASLPLAIN,SASLTLS,MTLS",
            "LAKETAIL_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN,OAUTHBEARER",
            "LAKETAIL_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": str(oauth_public_pem),
            "LAKETAIL_SASL_OAUTHBEARER_EXPECTED_AUDIENCE": "laketail",
            "LAKETAIL_SSL_CLIENT_AUTH": "requested",
            "LAKETAIL_SSL_PRINCIPAL_MAPPING_RULES": r"RULE:^CN=([^,]+),OU=Eng,.*$/$1/L,DEFAULT",
            "LAKETAIL_AUTHORIZER_CLASS_NAME": "laketail.security.authorizer.AclAuthorizer",
            "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true",
            "LAKETAIL_ACL_REFRESH_MS": "200",
            **pki.broker_env(),
        })
        self.kafka_port = self.ports["SASLPLAIN"]  # the port wait_ready waits for

    def bootstrap_of(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def scram(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256", listener: str = "SASLPLAIN",
              **extra: Any) -> dict[str, Any]:
        tls = listener == "SASLTLS"
        return {"bootstrap.servers": self.bootstrap_of(listener),
                "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
                "sasl.username": user, "sasl.password": password,
                **({"ssl.ca.location": str(self.pki.ca_pem)} if tls else {}), **QUIET, **extra}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    base = tmp_path_factory.mktemp("kafka-sasl")
    pki = Pki(base / "pki")
    data = base / "data"
    add_user(data, "alice", ALICE)
    add_user(data, "bob", BOB)
    add_user(data, "erin", ERIN, mechanism="SCRAM-SHA-512")
    public_pem = base / "oauth-public.pem"
    public_pem.write_bytes(OAUTH_KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    proc = SaslBroker(data, pki, public_pem)
    try:
        proc.start()
        _wait_listening(proc)
        yield proc
    finally:
        proc.stop()


def _wait_listening(broker: KafkaBroker, ports: list[int] | None = None) -> None:
    """The Kafka listeners bind just after the HTTP one answers."""
    deadline = time.monotonic() + 60
    for port in ports if ports is not None else list(broker.ports.values()):  # type: ignore[attr-defined]
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"no Kafka listener on {port}\n{broker.output()}"
                time.sleep(0.05)


def _topic(broker: KafkaBroker, partitions: int = 1) -> str:
    name = f"sasl-{uuid.uuid4().hex[:10]}"
    assert broker.rest.create_topic(name, partitions).status_code in (200, 201)
    return name


def _produce(config: dict[str, Any], topic: str, n: int = 3) -> list:
    producer = Producer({"message.timeout.ms": 30_000, "acks": "all", **config})  # a caller's timeout wins
    reports: list = []
    for i in range(n):
        producer.produce(topic, key=b"k", value=b"v%d" % i, on_delivery=lambda err, msg: reports.append((err, msg)))
    producer.flush(60)
    return reports


def _consume(config: dict[str, Any], topic: str, n: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("user,password,mechanism", [
    ("alice", ALICE, "SCRAM-SHA-256"),
    ("erin", ERIN, "SCRAM-SHA-512"),
    ("alice", ALICE, "PLAIN"),
])
def test_confluent_kafka_authenticates_on_sasl_plaintext(sasl_broker, user, password, mechanism):
    topic = _topic(sasl_broker)
    config = sasl_broker.scram(user, password, mechanism)
    reports = _produce(config, topic)
    assert [err for err, _ in reports] == [None] * 3
    assert [m.offset() for _, m in reports] == [0, 1, 2]
    assert _consume(config, topic, 3) == [b"v0", b"v1", b"v2"]
    assert sasl_broker.rest.offsets(topic, 0) == (0, 3)  # the same log REST reads


def test_confluent_kafka_scram_over_tls_with_a_trustme_ca(sasl_broker):
    topic = _topic(sasl_broker)
    config = sasl_broker.scram("erin", ERIN, "SCRAM-SHA-512", listener="SASLTLS")
    assert [err for err, _ in _produce(config, topic)] == [None] * 3
    assert _consume(config, topic, 3) == [b"v0", b"v1", b"v2"]


def _oauth(broker: SaslBroker, key: rsa.RSAPrivateKey, **extra: Any) -> dict[str, Any]:
    def token(_config: str) -> tuple[str, float]:
        expiry = time.time() + 300
        return jwt.encode({"sub": "carol", "exp": int(expiry), "aud": "laketail"}, key, algorithm="RS256"), expiry

    return {"bootstrap.servers": broker.bootstrap_of("SASLTLS"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(broker.pki.ca_pem), "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": token,
            **QUIET, **extra}


def test_oauthbearer_with_a_jwt_the_configured_key_signed(sasl_broker):
    topic = _topic(sasl_broker)
    # only User:carol (the token's sub) may write: the principal is the token's
    for principal, op in [("User:carol", "WRITE"), ("User:ANONYMOUS", "DESCRIBE")]:  # REST reads as ANONYMOUS
        resp = httpx.post(f"{sasl_broker.url}/v3/clusters/{sasl_broker.rest.cluster_id}/acls", json={
            "resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL", "principal": principal,
            "host": "*", "operation": op, "permission": "ALLOW"})
        assert resp.status_code == 201, resp.text
    time.sleep(0.6)
    reports = _produce(_oauth(sasl_broker, OAUTH_KEY), topic)
    assert [err for err, _ in reports] == [None] * 3
    assert sasl_broker.rest.offsets(topic, 0) == (0, 3)
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    errors = _auth_errors(_oauth(sasl_broker, other_key))
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors


def _auth_errors(config: dict[str, Any]) -> list[KafkaError]:
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + 60
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_a_wrong_password_fails_authentication_and_writes_nothing(sasl_broker, mechanism):
    topic = _topic(sasl_broker)
    config = sasl_broker.scram("alice", "not-" + ALICE, mechanism, **{"message.timeout.ms": 5_000})
    errors = _auth_errors(config)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "SASL_AUTHENTICATION_FAILED" in errors[0].str() or "Authentication failed" in errors[0].str(), errors
    reports = _produce({**config, "message.timeout.ms": 3_000}, topic, 1)
    assert reports[0][0] is not None
    assert sasl_broker.rest.offsets(topic, 0) == (0, 0)
    assert "operation=Authenticate resource=Listener:SASLPLAIN result=denied" in sasl_broker.stderr_path.read_text()


def test_an_acl_denying_a_scram_user_is_topic_authorization_failed(sasl_broker):
    topic = _topic(sasl_broker)
    for principal, op, permission in [("User:bob", "WRITE", "DENY"), ("User:*", "ALL", "ALLOW")]:
        resp = httpx.post(f"{sasl_broker.url}/v3/clusters/{sasl_broker.rest.cluster_id}/acls", json={
            "resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL", "principal": principal,
            "host": "*", "operation": op, "permission": permission})
        assert resp.status_code == 201, resp.text
    time.sleep(0.6)  # acl.refresh.ms
    denied = _produce(sasl_broker.scram("bob", BOB, **{"message.timeout.ms": 10_000}), topic, 1)
    assert denied[0][0] is not None and denied[0][0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allowed = _produce(sasl_broker.scram("alice", ALICE), topic, 1)
    assert allowed[0][0] is None
    assert sasl_broker.rest.offsets(topic, 0) == (0, 1)


def test_ssl_with_a_client_certificate_is_the_mapped_principal(sasl_broker):
    topic = _topic(sasl_broker)
    # User:alice (CN=alice,OU=Eng,... mapped to "alice") may not write; anyone else may
    for principal, op, permission in [("User:alice", "WRITE", "DENY"), ("User:*", "ALL", "ALLOW")]:
        resp = httpx.post(f"{sasl_broker.url}/v3/clusters/{sasl_broker.rest.cluster_id}/acls", json={
            "resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL", "principal": principal,
            "host": "*", "operation": op, "permission": permission})
        assert resp.status_code == 201, resp.text
    time.sleep(0.6)
    pki = sasl_broker.pki
    tls = {"bootstrap.servers": sasl_broker.bootstrap_of("MTLS"), "security.protocol": "SSL",
           "ssl.ca.location": str(pki.ca_pem), "message.timeout.ms": 10_000, **QUIET}
    with_cert = {**tls, "ssl.certificate.location": str(pki.alice_cert), "ssl.key.location": str(pki.alice_key)}
    denied = _produce(with_cert, topic, 1)
    assert denied[0][0] is not None and denied[0][0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    anonymous = _produce(tls, topic, 1)  # no certificate: User:ANONYMOUS
    assert anonymous[0][0] is None
    assert sasl_broker.rest.offsets(topic, 0) == (0, 1)


def test_kafka_python_scram_over_tls(sasl_broker):
    import ssl

    topic = _topic(sasl_broker)
    context = ssl.create_default_context(cafile=str(sasl_broker.pki.ca_pem))
    common: dict[str, Any] = {"bootstrap_servers": sasl_broker.bootstrap_of("SASLTLS"),
                              "security_protocol": "SASL_SSL", "ssl_context": context,
                              "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
                              "sasl_plain_password": ALICE}
    producer = KafkaProducer(acks="all", **common)
    metas = [producer.send(topic, value=b"p%d" % i).get(timeout=60) for i in range(3)]
    producer.close()
    assert [m.offset for m in metas] == [0, 1, 2]
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30_000, **common)
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == 3:
            break
    consumer.close()
    assert got == [b"p0", b"p1", b"p2"]


def test_kafka_python_wrong_password_is_refused(sasl_broker):
    from kafka.errors import KafkaError as KafkaPythonError

    with pytest.raises(KafkaPythonError):
        producer = KafkaProducer(bootstrap_servers=sasl_broker.bootstrap_of("SASLPLAIN"),
                                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                                 sasl_plain_username="erin", sasl_plain_password="wrong", max_block_ms=10_000)
        producer.send(_topic(sasl_broker), value=b"x").get(timeout=15)


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_metadata_before_authentication_closes_the_connection(sasl_broker):
    with socket.create_connection(("127.0.0.1", sasl_broker.ports["SASLPLAIN"]), timeout=30) as sock:
        sock.sendall(_frame(3, 1, struct.pack(">i", -1)))  # Metadata v1, all topics
        assert sock.recv(1) == b""  # closed, unanswered


def test_sasl_handshake_on_a_listener_without_sasl_is_illegal_sasl_state(sasl_broker, kafka_broker):
    mechanism = b"PLAIN"
    _wait_listening(kafka_broker, [kafka_broker.kafka_port])
    with socket.create_connection(("127.0.0.1", kafka_broker.kafka_port), timeout=30) as sock:
        sock.sendall(_frame(17, 1, struct.pack(">h", len(mechanism)) + mechanism))
        size = struct.unpack(">i", sock.recv(4))[0]
        answer = b""
        while len(answer) < size:
            answer += sock.recv(size - len(answer))
    correlation_id, error_code = struct.unpack_from(">ih", answer)
    assert (correlation_id, error_code) == (1, 34)


def _raw_token(sock: socket.socket, token: bytes) -> bytes:
    """After SaslHandshake v0: a size-prefixed raw token out, the server's raw token back."""
    sock.sendall(struct.pack(">i", len(token)) + token)
    return _read_frame(sock)


def _handshake_v0(sasl_broker, mechanism: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", sasl_broker.ports["SASLPLAIN"]), timeout=30)
    answer = _call(sock, 17, 0, {"mechanism": mechanism})
    assert int(answer.error_code) == 0 and mechanism in answer.mechanisms
    return sock


def test_sasl_handshake_v0_then_raw_plain_and_scram_tokens(sasl_broker):
    """Clients before Kafka 1.0: raw SASL tokens after SaslHandshake v0, then requests."""
    with _handshake_v0(sasl_broker, "PLAIN") as sock:
        assert _raw_token(sock, b"\0alice\0" + ALICE.encode()) == b""
        answer = _call(sock, 3, 1, {"topics": None}, correlation_id=9)  # Metadata, as alice
        assert [b.node_id for b in answer.brokers] == [0]
    with _handshake_v0(sasl_broker, "SCRAM-SHA-512") as sock:
        server_first = _raw_token(sock, b"n,,n=erin,r=nonce-v0")
        final = _client_final("n=erin,r=nonce-v0", server_first, ERIN)
        assert _raw_token(sock, final).startswith(b"v=")
        assert int(_call(sock, 18, 0, {}, correlation_id=10).error_code) == 0


def test_sasl_handshake_v0_with_a_wrong_password_closes_unanswered(sasl_broker):
    with _handshake_v0(sasl_broker, "PLAIN") as sock:
        wrong = b"\0alice\0not-the-password"
        sock.sendall(struct.pack(">i", len(wrong)) + wrong)
        assert _closed(sock)  # v0 has no error frame: the connection just closes
