"""Authentication end to end: one real broker with three listeners.

* ``CLIENT`` -- SASL_SSL: HTTP Basic against SCRAM users made with ``laketail users``,
  or an OAuth bearer JWT signed by the key in ``sasl.oauthbearer.jwks.endpoint.url``;
* ``MTLS``   -- SSL with ``ssl.client.auth=requested``: a client certificate's subject
  names the principal through ``ssl.principal.mapping.rules``;
* ``BROKER`` -- the inter-broker listener (SSL + the cluster secret).

The principal each request had is read from the broker's access log.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import uuid
from typing import Iterator

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from integration.support import wait_until

from laketail.client import Consumer, Producer

from .support import PASSWORD, SECRET, Pki, SecureBroker, add_user, ports

pytestmark = pytest.mark.integration


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Setup:
    def __init__(self, broker: SecureBroker, pki: Pki, signing_key: rsa.RSAPrivateKey, audit: str) -> None:
        self.broker = broker
        self.pki = pki
        self.signing_key = signing_key
        self.audit = audit

    @property
    def client_url(self) -> str:
        return self.broker.listener_url("CLIENT", "https")

    def token(self, sub: str = "carol", *, exp_s: float = 300, key: rsa.RSAPrivateKey | None = None) -> str:
        claims = {"sub": sub, "exp": int(time.time() + exp_s), "aud": "laketail"}
        return jwt.encode(claims, key or self.signing_key, algorithm="RS256")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("secure-broker")
    pki = Pki(base / "pki")
    data = base / "data"
    audit = add_user(data, "alice", PASSWORD)
    signing_key = _rsa_key()
    public_pem = base / "oauth-public.pem"
    public_pem.write_bytes(signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    client_port, mtls_port, broker_port = ports(3)
    broker = SecureBroker(
        data,
        {"CLIENT": ("SASL_SSL", client_port), "MTLS": ("SSL", mtls_port), "BROKER": ("SSL", broker_port)},
        {
            **pki.broker_env(),
            "LAKETAIL_INTER_BROKER_SECRET": SECRET,
            "LAKETAIL_SSL_CLIENT_AUTH": "requested",
            "LAKETAIL_SSL_PRINCIPAL_MAPPING_RULES": r"RULE:^CN=([^,]+),OU=Eng,.*$/$1/L,DEFAULT",
            "LAKETAIL_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": str(public_pem),
            "LAKETAIL_SASL_OAUTHBEARER_EXPECTED_AUDIENCE": "laketail",
        },
        ready_auth=httpx.BasicAuth("alice", PASSWORD),
        ca=pki.ca_pem,
    )
    try:
        broker.start()
        yield Setup(broker, pki, signing_key, audit)
    finally:
        broker.stop()


def _assert_401(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    body = resp.json()
    assert body["error_code"] == 40101 and body["message"].startswith("SASL_AUTHENTICATION_FAILED"), body
    assert "Basic" in resp.headers["www-authenticate"]


def _principal_of(secure: Setup, marker: str) -> str:
    """The principal the access log gives the request whose path holds ``marker``."""
    lines = wait_until(lambda: secure.broker.access_lines(marker), f"an access log line for {marker}", 30)
    return lines[-1].rsplit("principal=", 1)[1].strip()


# -- SCRAM over HTTP Basic ----------------------------------------------------------------------


def test_missing_or_wrong_credentials_are_401_and_nothing_is_written(secure):
    with secure.broker.client() as http:
        _assert_401(http.get(f"{secure.client_url}/v3/clusters"))
        _assert_401(http.get(f"{secure.client_url}/v3/clusters", auth=("alice", "Wr0ng-Passw0rd")))
        _assert_401(http.get(f"{secure.client_url}/v3/clusters", auth=("mallory", PASSWORD)))
        _assert_401(http.get(f"{secure.client_url}/v3/clusters", headers={"Authorization": "Basic !!"}))
        topic = f"unauth-{uuid.uuid4().hex[:8]}"
        _assert_401(http.post(f"{secure.client_url}/topics/{topic}", auth=("alice", "wrong"),
                              json={"records": [{"value": "eA=="}]},
                              headers={"Content-Type": "application/vnd.kafka.binary.v2+json"}))
        ok = http.get(f"{secure.client_url}/topics", auth=("alice", PASSWORD))
        assert ok.status_code == 200 and topic not in ok.json()  # the refused produce created nothing
    refusals = wait_until(lambda: [line for line in secure.broker.stderr_path.read_text().splitlines()
                                   if "laketail.audit" in line and "mallory" in line], "an audit line", 30)
    assert "host=127.0.0.1 operation=Authenticate resource=Listener:CLIENT result=denied" in refusals[0]
    text = secure.broker.stderr_path.read_text()
    assert "Wr0ng-Passw0rd" not in text and PASSWORD not in text  # no password is ever logged


def test_scram_user_is_the_principal_and_a_client_cannot_claim_another(secure):
    marker = f"whoami-{uuid.uuid4().hex[:8]}"
    with secure.broker.client(auth=("alice", PASSWORD)) as http:
        # a client sending the peers' principal header is not believed: authentication drops it
        resp = http.get(f"{secure.client_url}/topics/{marker}", headers={"x-laketail-principal": "User:admin"})
        assert resp.status_code == 404
    assert _principal_of(secure, marker) == "User:alice"


def test_users_add_stores_salted_keys_and_logs_an_audit_line(secure):
    assert "operation=AlterUserScramCredentials:upsert resource=User:alice" in secure.audit
    from deltalake import DeltaTable

    rows = DeltaTable(str(secure.broker.data_dir / "_system" / "credentials")).to_pyarrow_table().to_pylist()
    (row,) = [r for r in rows if r["user"] == "alice"]
    assert row["mechanism"] == "SCRAM-SHA-256" and row["iterations"] == 4096
    assert PASSWORD not in str(row) and base64.b64encode(PASSWORD.encode()).decode() not in str(row)


def test_a_removed_user_is_refused_from_the_next_reload(secure):
    data = secure.broker.data_dir
    add_user(data, "dave", "dave-pw", "SCRAM-SHA-512")
    with secure.broker.client(auth=("dave", "dave-pw")) as http:
        wait_until(lambda: http.get(f"{secure.client_url}/v3/clusters").status_code == 200, "dave admitted", 30)
        done = subprocess.run([sys.executable, "-m", "laketail.cli", "users", "remove", "dave", "--data", str(data)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "AlterUserScramCredentials:delete resource=User:dave" in done.stderr
        # cached as verified a moment ago, yet refused once the broker re-reads the table
        wait_until(lambda: http.get(f"{secure.client_url}/v3/clusters").status_code == 401, "dave refused", 30)


# -- OAuth bearer ------------------------------------------------------------------------------


def test_a_valid_bearer_token_names_its_subject(secure):
    marker = f"bearer-{uuid.uuid4().hex[:8]}"
    with secure.broker.client() as http:
        resp = http.get(f"{secure.client_url}/topics/{marker}",
                        headers={"Authorization": f"Bearer {secure.token('carol')}"})
        assert resp.status_code == 404
    assert _principal_of(secure, marker) == "User:carol"


def test_expired_foreign_or_unsigned_tokens_are_401(secure):
    unsigned = jwt.encode({"sub": "eve", "exp": int(time.time()) + 300, "aud": "laketail"}, None, algorithm="none")
    hmac_forged = jwt.encode({"sub": "eve", "exp": int(time.time()) + 300, "aud": "laketail"}, "x" * 32,
                             algorithm="HS256")
    wrong_audience = jwt.encode({"sub": "eve", "exp": int(time.time()) + 300, "aud": "other"},
                                secure.signing_key, algorithm="RS256")
    with secure.broker.client() as http:
        for token in (secure.token(exp_s=-60), secure.token(key=_rsa_key()), unsigned, hmac_forged, wrong_audience):
            _assert_401(http.get(f"{secure.client_url}/v3/clusters", headers={"Authorization": f"Bearer {token}"}))


# -- mutual TLS --------------------------------------------------------------------------------


def test_a_client_certificate_maps_to_a_principal(secure):
    url = secure.broker.listener_url("MTLS", "https")
    marker = f"mtls-{uuid.uuid4().hex[:8]}"
    with secure.broker.client(cert=(str(secure.pki.alice_cert), str(secure.pki.alice_key))) as http:
        assert http.get(f"{url}/topics/{marker}").status_code == 404
    assert _principal_of(secure, marker) == "User:alice"  # RULE: CN, lower-cased
    marker2 = f"nocert-{uuid.uuid4().hex[:8]}"
    with secure.broker.client() as http:
        assert http.get(f"{url}/topics/{marker2}").status_code == 404
    assert _principal_of(secure, marker2) == "User:ANONYMOUS"


def test_tls_listeners_refuse_clients_that_do_not_trust_the_ca(secure):
    with httpx.Client(timeout=10) as http:  # the system's CAs: the test CA is not among them
        with pytest.raises(httpx.ConnectError):
            http.get(f"{secure.client_url}/v3/clusters", auth=("alice", PASSWORD))


# -- listeners -------------------------------------------------------------------------------


def test_internal_routes_are_not_served_on_client_listeners(secure):
    with secure.broker.client(auth=("alice", PASSWORD)) as http:
        for url in (secure.client_url, secure.broker.listener_url("MTLS", "https")):
            resp = http.post(f"{url}/internal/v1/metadata", json={})
            assert resp.status_code == 404 and resp.json()["error_code"] == 404


def test_the_inter_broker_listener_wants_the_cluster_secret(secure):
    url = secure.broker.listener_url("BROKER", "https")
    with secure.broker.client() as http:
        _assert_401(http.get(f"{url}/v3/clusters"))
        _assert_401(http.get(f"{url}/v3/clusters", headers={"x-laketail-inter-broker-secret": "guess"}))
        _assert_401(http.get(f"{url}/v3/clusters", auth=("alice", PASSWORD)))  # a user is not a broker
        ok = http.get(f"{url}/v3/clusters", headers={"x-laketail-inter-broker-secret": SECRET})
        assert ok.status_code == 200


# -- clients -----------------------------------------------------------------------------------


def test_python_client_produces_and_consumes_over_sasl_ssl(secure):
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": f"127.0.0.1:{secure.broker.listener_ports['CLIENT']}",
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
            "sasl.password": PASSWORD, "ssl.ca.location": str(secure.pki.ca_pem)}
    delivered = []
    with Producer({**conf, "linger.ms": 0}) as producer:
        for i in range(5):
            producer.produce(topic, value=f"v{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0
    assert delivered == [None] * 5
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [f"v{i}".encode() for i in range(5)]
    finally:
        consumer.close()


def test_python_client_with_a_wrong_password_gets_an_authentication_error(secure):
    from laketail.client import AdminClient

    admin = AdminClient({"bootstrap.servers": secure.client_url, "security.protocol": "SASL_SSL",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "nope",
                         "ssl.ca.location": str(secure.pki.ca_pem)})
    with admin, pytest.raises(Exception) as caught:
        admin.list_topics(timeout=60)  # a failure bound for a loaded machine, not a speed claim
    assert "SASL_AUTHENTICATION_FAILED" in str(caught.value)


def test_cli_takes_command_config_and_environment(secure, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=alice\n"
                     f"sasl.password={PASSWORD}\nssl.ca.location={secure.pki.ca_pem}\n")
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    base = [sys.executable, "-m", "laketail.cli", "--server", secure.client_url]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("LAKETAIL_")}
    made = subprocess.run(base + ["--command-config", str(props), "topics", "create", topic, "--partitions", "1"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert made.returncode == 0, made.stderr
    listed = subprocess.run(base + ["topics", "list"], capture_output=True, text=True, timeout=120,
                            env={**env, "LAKETAIL_COMMAND_CONFIG": str(props)})
    assert listed.returncode == 0 and topic in listed.stdout, listed.stderr
    refused = subprocess.run(base + ["topics", "list"], capture_output=True, text=True, timeout=120,
                             env={**env, "LAKETAIL_SSL_CA_LOCATION": str(secure.pki.ca_pem),
                                  "LAKETAIL_SECURITY_PROTOCOL": "SASL_SSL", "LAKETAIL_SASL_USERNAME": "alice",
                                  "LAKETAIL_SASL_PASSWORD": "wrong"})
    assert refused.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in refused.stderr


def test_spark_planning_takes_the_laketail_prefixed_settings(secure):
    from laketail.errors import SaslAuthenticationFailed
    from laketail.spark.gateway import SparkGateway
    from laketail.spark.options import SourceOptions

    topic = f"spark-{uuid.uuid4().hex[:8]}"
    with secure.broker.client(auth=("alice", PASSWORD)) as http:
        assert http.post(f"{secure.client_url}/topics/{topic}", json={"records": [{"value": "eA=="}]},
                         headers={"Content-Type": "application/vnd.kafka.binary.v2+json"}).status_code == 200
    options = SourceOptions.parse({
        "laketail.servers": secure.client_url, "subscribe": topic,
        "laketail.security.protocol": "SASL_SSL", "laketail.sasl.mechanism": "SCRAM-SHA-256",
        "laketail.sasl.username": "alice", "laketail.sasl.password": PASSWORD,
        "laketail.ssl.ca.location": str(secure.pki.ca_pem)}, streaming=False)
    with SparkGateway(options.servers, security=options.security) as gateway:
        assert topic in gateway.topics()
        assert gateway.table(topic).partitions.keys() == {0}
    wrong = dict(options.security, **{"sasl.password": "nope"})
    with SparkGateway(options.servers, security=tuple(wrong.items())) as gateway:
        with pytest.raises(SaslAuthenticationFailed):  # the driver's planning fails with Kafka's error
            gateway.topics()


def test_the_brokers_own_maintenance_jobs_call_it_as_a_peer(secure, monkeypatch):
    from laketail.config import load_settings
    from laketail.maintenance.scheduler import MaintenanceScheduler
    from laketail.maintenance.topics import Gateway

    settings = load_settings(None, env=secure.broker.extra_env, data=str(secure.broker.data_dir))
    scheduler = MaintenanceScheduler(settings)
    peer_url = secure.broker.listener_url("BROKER", "https")
    assert scheduler.argv("retention")[-2:] == ["--servers", peer_url]
    assert scheduler.peer_env == {"LAKETAIL_INTER_BROKER_SECRET": SECRET,
                                  "LAKETAIL_SSL_TRUSTSTORE_LOCATION": str(secure.pki.ca_pem)}
    for key, value in scheduler.peer_env.items():  # what the job's process is given
        monkeypatch.setenv(key, value)
    gateway = Gateway(peer_url)
    try:
        assert gateway.cluster  # GET /v3/clusters through the BROKER listener
    finally:
        gateway.close()


# -- the web console on a SASL listener -----------------------------------------------------------


def test_the_console_page_loads_unauthenticated_and_its_data_needs_credentials(secure):
    with secure.broker.client() as http:
        page = http.get(f"{secure.client_url}/console")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        asset = http.get(f"{secure.client_url}/console/assets/api.js")
        assert asset.status_code == 200 and "X-Requested-With" in asset.text
        _assert_401(http.get(f"{secure.client_url}/v1/console/topics"))  # the data is not static
        _assert_401(http.post(f"{secure.client_url}/console"))  # only reading the page is open
        marked = http.get(f"{secure.client_url}/v1/console/topics", headers={"X-Requested-With": "laketail-console"})
        assert marked.status_code == 401 and "www-authenticate" not in marked.headers  # no browser dialog
        signed_in = http.get(f"{secure.client_url}/v1/console/topics", auth=("alice", PASSWORD),
                             headers={"X-Requested-With": "laketail-console"})
        assert signed_in.status_code == 200, signed_in.text
        wrong = http.get(f"{secure.client_url}/console", auth=("alice", "wrong"))
        _assert_401(wrong)  # credentials shown are checked, even for the page


# -- the TLS record layer -----------------------------------------------------------------------


def test_an_answer_is_one_tls_record(secure):
    """The head and body of a small answer come in one TLS record: OpenSSL's SSL_read
    gives one record's data per call, so a single read returns the whole answer (uvicorn
    writes head and body in two calls; the broker joins them)."""
    import socket
    import ssl
    from urllib.parse import urlsplit

    url = urlsplit(secure.client_url)
    context = ssl.create_default_context(cafile=str(secure.pki.ca_pem))
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    request = (f"GET /v3/clusters HTTP/1.1\r\nHost: {url.hostname}\r\nAuthorization: Basic {basic}\r\n"
               "Connection: close\r\n\r\n").encode()
    with socket.create_connection((url.hostname, url.port), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname=url.hostname) as tls:
            tls.sendall(request)
            first = tls.recv(1 << 20)
            rest = b""
            while chunk := tls.recv(1 << 20):
                rest += chunk
    head, _, body = first.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), first[:200]
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    assert len(body) == length > 0 and rest == b"", (len(body), length, rest[:100])
