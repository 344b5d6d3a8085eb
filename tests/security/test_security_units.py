"""The pure parts of authentication: SCRAM keys, principal mapping rules, listener plans,
client settings. No broker here; the end-to-end tests are beside this file."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from laketail.client.config import producer_config
from laketail.client.errors import KafkaException
from laketail.client.security import client_security, read_properties
from laketail.config import BrokerSettings, load_settings
from laketail.errors import InvalidConfig
from laketail.security.listeners import exposure_problems, listener_plan
from laketail.security.scram import make_credential, verify
from laketail.security.ssl_principal import PrincipalMapper, subject_name

# -- SCRAM -------------------------------------------------------------------------------


def test_scram_keys_follow_rfc_5802_and_never_hold_the_password():
    salt = b"0123456789abcdef"
    cred = make_credential("pencil", "SCRAM-SHA-256", 4096, salt=salt)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert cred.stored_key == hashlib.sha256(client_key).digest()
    assert cred.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    assert b"pencil" not in cred.stored_key + cred.server_key + cred.salt
    assert verify(cred, "pencil")
    assert not verify(cred, "pencil ")


def test_scram_sha_512_and_fresh_salts():
    a = make_credential("pw", "SCRAM-SHA-512", 4096)
    b = make_credential("pw", "SCRAM-SHA-512", 4096)
    assert len(a.stored_key) == 64 and a.salt != b.salt and a.stored_key != b.stored_key
    assert verify(a, "pw") and verify(b, "pw") and not verify(a, "PW")


@pytest.mark.parametrize("kwargs", [{"mechanism": "SCRAM-SHA-1"}, {"iterations": 1000}, {"password": ""}])
def test_scram_refuses_weak_or_unknown_settings(kwargs):
    args = {"password": "pw", "mechanism": "SCRAM-SHA-256", "iterations": 4096, **kwargs}
    with pytest.raises(InvalidConfig):
        make_credential(args["password"], args["mechanism"], args["iterations"])


# -- ssl.principal.mapping.rules -----------------------------------------------------------

SUBJECT = ((("countryName", "US"),), (("organizationName", "Acme, Inc"),), (("organizationalUnitName", "Eng"),),
           (("commonName", "Alice"),))


def test_subject_is_written_most_specific_first_with_escapes():
    assert subject_name(SUBJECT) == "CN=Alice,OU=Eng,O=Acme\\, Inc,C=US"


def test_default_rule_is_the_whole_distinguished_name():
    assert PrincipalMapper("DEFAULT").name_for("CN=Alice,OU=Eng") == "CN=Alice,OU=Eng"


def test_rules_apply_in_order_with_groups_and_case():
    mapper = PrincipalMapper(r"RULE:^CN=([^,]+),OU=Eng.*$/$1-eng/L, RULE:^CN=(.*?),.*$/$1/U, DEFAULT")
    assert mapper.name_for("CN=Alice,OU=Eng,C=US") == "alice-eng"
    assert mapper.name_for("CN=Bob,OU=Ops") == "BOB"
    assert mapper.name_for("O=NoCn") == "O=NoCn"  # DEFAULT last


def test_a_subject_no_rule_matches_has_no_principal():
    assert PrincipalMapper(r"RULE:^CN=(.*),OU=Eng$/$1/").name_for("CN=x,OU=Ops") is None


def test_a_malformed_rule_is_invalid_config():
    with pytest.raises(InvalidConfig):
        PrincipalMapper("RULE:^CN=(.*$/$1/")
    with pytest.raises(InvalidConfig):
        PrincipalMapper("NOT A RULE")


# -- listeners -----------------------------------------------------------------------------

TLS = {"ssl_keystore_certificate_chain": "c.pem", "ssl_keystore_key": "k.pem"}


def test_no_listeners_setting_is_one_shared_plaintext_listener():
    plan = listener_plan(BrokerSettings(host="127.0.0.1", port=8082))
    (only,) = plan.listeners
    assert plan.shared and only.inter_broker and only.protocol == "PLAINTEXT"
    assert only.advertised_url == "http://127.0.0.1:8082" and not only.authenticates


def test_client_and_broker_listeners_with_their_protocols_and_urls():
    settings = load_settings(None, env={
        "LAKETAIL_LISTENERS": "CLIENT://0.0.0.0:8082,BROKER://10.0.0.5:9093",
        "LAKETAIL_ADVERTISED_LISTENERS": "CLIENT://broker1.example:8082",
        "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "CLIENT:SASL_SSL,BROKER:SSL",
        "LAKETAIL_INTER_BROKER_LISTENER_NAME": "BROKER",
        "LAKETAIL_INTER_BROKER_SECRET": "s",
        "LAKETAIL_SSL_KEYSTORE_CERTIFICATE_CHAIN": "c.pem", "LAKETAIL_SSL_KEYSTORE_KEY": "k.pem",
    })
    client, peer = listener_plan(settings).listeners
    assert (client.name, client.protocol, client.sasl, client.inter_broker) == ("CLIENT", "SASL_SSL", True, False)
    assert (peer.name, peer.protocol, peer.inter_broker, peer.authenticates) == ("BROKER", "SSL", True, True)
    assert settings.url == "https://broker1.example:8082"
    assert settings.inter_broker_url == "https://10.0.0.5:9093"
    assert exposure_problems(listener_plan(settings), "none") == []


@pytest.mark.parametrize("overrides, complaint", [
    ({"listeners": "A://h:1,B://h:2"}, "inter.broker.listener.name"),
    ({"listeners": "A://h:1,B://h:2", "inter_broker_listener_name": "C"}, "not one of the listeners"),
    ({"listeners": "A://h:1,B://h:2", "inter_broker_listener_name": "B"}, "laketail.inter.broker.secret"),
    ({"listeners": "SSL://h:1"}, "ssl.keystore"),
    ({"listeners": "CLIENT://h:1"}, "no protocol for listener CLIENT"),
    ({"listeners": "A://h:1,A://h:2"}, "each name once"),
    ({"listeners": "A:/h:1"}, "NAME://host:port"),
    ({"listeners": "PLAINTEXT://h:1", "listener_security_protocol_map": "PLAINTEXT:TLS"}, "NAME:PROTOCOL"),
])
def test_incomplete_listener_plans_are_invalid_config(overrides, complaint):
    with pytest.raises(InvalidConfig, match=complaint):
        listener_plan(BrokerSettings(**overrides))


def test_only_unauthenticated_listeners_beyond_loopback_are_exposure_problems():
    def problems(listeners: str, client_auth: str = "none", **extra) -> list[str]:
        settings = BrokerSettings(listeners=listeners, inter_broker_listener_name="B" if "," in listeners else "",
                                  inter_broker_secret="s", ssl_client_auth=client_auth, **TLS, **extra)
        return exposure_problems(listener_plan(settings), client_auth)

    assert problems("PLAINTEXT://127.0.0.1:1") == []
    assert problems("PLAINTEXT://[::1]:1") == []
    assert len(problems("PLAINTEXT://0.0.0.0:1")) == 1
    assert len(problems("SSL://0.0.0.0:1")) == 1  # TLS alone names nobody
    assert problems("SSL://0.0.0.0:1", "required") == []
    assert problems("SASL_SSL://0.0.0.0:1") == []
    assert problems("SASL_PLAINTEXT://0.0.0.0:1,B://0.0.0.0:2", listener_security_protocol_map="B:SSL") == []
    assert len(exposure_problems(listener_plan(BrokerSettings(host="0.0.0.0")), "none")) == 1


# -- client settings -----------------------------------------------------------------------


def test_client_takes_confluent_kafkas_security_settings():
    conf = producer_config({"bootstrap.servers": "broker1:8082", "security.protocol": "SASL_SSL",
                            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                            "sasl.password": "pw", "ssl.ca.location": "/nonexistent/ca.pem"}, {})
    assert conf.security.protocol == "SASL_SSL" and conf.security.username == "alice"
    assert conf.bootstrap_servers == ("https://broker1:8082",)  # TLS: a bare host:port is https
    auth = conf.security.auth()
    request = next(auth.sync_auth_flow(__import__("httpx").Request("GET", "https://x/")))
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"alice:pw").decode()


@pytest.mark.parametrize("conf", [
    {"security.protocol": "KERBEROS"},
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "a", "sasl.password": "b"},
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "a"},
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
])
def test_incomplete_client_security_is_refused_at_construction(conf):
    with pytest.raises(ValueError):
        client_security(conf)
    with pytest.raises(KafkaException):
        producer_config({"bootstrap.servers": "http://h:1", **conf}, {})


def test_bearer_tokens_come_from_oauth_cb_like_confluent_kafka():
    import time

    import httpx

    calls = []

    def oauth_cb(config):
        calls.append(config)
        return f"token-{len(calls)}", time.time() + 3600

    sec = client_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb})
    auth = sec.auth()  # an httpx client keeps one
    for _ in range(2):
        request = next(auth.sync_auth_flow(httpx.Request("GET", "https://x/")))
        assert request.headers["authorization"] == "Bearer token-1"
    assert len(calls) == 1  # fetched again only near its expiry


def test_command_config_is_read_as_a_java_properties_file():
    text = "# client.properties\nsecurity.protocol=SASL_SSL\n! a comment\nsasl.mechanism: SCRAM-SHA-256\n" \
           "sasl.password = p=w:d\n"
    assert read_properties(text) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                     "sasl.password": "p=w:d"}


def test_the_cli_and_the_jobs_read_one_command_config_variable():
    from laketail.cli import options
    from laketail.client import security

    assert options.COMMAND_CONFIG_ENV == security.COMMAND_CONFIG_ENV


def test_a_malformed_command_config_is_one_error_line_naming_the_file(tmp_path):
    from click.testing import CliRunner

    from laketail.cli import cli

    bad = tmp_path / "client.properties"
    bad.write_text("security.protocol=SASL_PLAINTEXT\nnot a property line\n")
    result = CliRunner().invoke(cli, ["--command-config", str(bad), "topics", "list", "--server", "http://127.0.0.1:1"])
    assert result.exit_code == 1
    assert f"command config {bad}: cannot read 'not a property line' (expected key=value)" in result.output


def test_devcerts_makes_a_ca_and_a_server_certificate_once(tmp_path):
    import ssl

    from cryptography import x509

    from laketail.security.devcerts import make

    assert make(tmp_path, ["broker1", "broker2"]) is True
    first = (tmp_path / "server.pem").read_bytes()
    assert make(tmp_path, ["other"]) is False and (tmp_path / "server.pem").read_bytes() == first
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "server.pem", tmp_path / "server-key.pem")  # the key matches
    cert = x509.load_pem_x509_certificate(first)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"broker1", "broker2", "localhost"}
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    cert.verify_directly_issued_by(ca)


def test_spark_options_take_security_settings_under_the_laketail_prefix():
    from laketail.spark.options import SinkOptions, SourceOptions

    opts = {"laketail.servers": "https://b:8082", "subscribe": "t", "laketail.security.protocol": "SASL_SSL",
            "laketail.sasl.mechanism": "SCRAM-SHA-512", "laketail.sasl.username": "alice",
            "laketail.sasl.password": "pw", "kafka.unrelated": "x"}
    source = SourceOptions.parse(opts, streaming=False)
    assert dict(source.security) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                     "sasl.username": "alice", "sasl.password": "pw"}
    assert SinkOptions.parse(opts).security == source.security
    with pytest.raises(InvalidConfig, match="sasl.username"):
        SourceOptions.parse({**opts, "laketail.sasl.username": ""}, streaming=False)


def test_users_add_reads_the_password_from_stdin(tmp_path):
    """``--password-stdin`` called ``click.get_text_stream``, deprecated in click 8.5 (and
    gone in 9): the warning failed the command here, where warnings are errors."""
    from click.testing import CliRunner

    from laketail.cli import cli
    from laketail.security.credentials import CredentialStore

    data = str(tmp_path / "data")
    result = CliRunner().invoke(cli, ["users", "add", "bob", "--password-stdin", "--data", data],
                                input="pencil-pencil\n")
    assert result.exit_code == 0, (result.output, result.exception)
    stored = CredentialStore(data).load()["bob"]["SCRAM-SHA-256"]
    assert verify(stored, "pencil-pencil") and not verify(stored, "pencil-pencil\n")
