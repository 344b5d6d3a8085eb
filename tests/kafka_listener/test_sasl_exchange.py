"""The SASL exchange of a Kafka connection (laketail.kafka.sasl), without a socket:
RFC 7677's SCRAM-SHA-256 example as golden bytes, the server's refusals, and the
gate's state machine (what may come before authentication)."""

from __future__ import annotations

import asyncio
import base64

import jwt
import pytest

from laketail.errors import SaslAuthenticationFailed
from laketail.kafka.apis import Session
from laketail.kafka.protocol import CloseConnection, Request
from laketail.kafka.sasl import SaslGate, ScramExchange, session_lifetime_ms
from laketail.security import scram
from laketail.security.principal import ANONYMOUS, KafkaPrincipal

# RFC 7677 §3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_exchange() -> ScramExchange:
    exchange = ScramExchange("SCRAM-SHA-256", server_nonce=RFC_SERVER_NONCE)
    assert exchange.parse_first(RFC_CLIENT_FIRST) == "user"
    credential = scram.make_credential("pencil", "SCRAM-SHA-256", 4096, salt=RFC_SALT)
    assert exchange.server_first(credential) == RFC_SERVER_FIRST
    return exchange


def test_scram_sha_256_matches_rfc_7677_byte_for_byte():
    assert _rfc_exchange().server_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


@pytest.mark.parametrize("final", [
    RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"),  # a wrong proof (another password)
    RFC_CLIENT_FINAL.replace(b"hNlF$k0,", b"hNlF$k1,"),  # not the nonce the server gave
    RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # claims channel binding it did not announce
    b"c=biws,r=x",  # no proof
    b"\xff\xfe",
])
def test_a_wrong_client_final_fails(final):
    with pytest.raises(SaslAuthenticationFailed):
        _rfc_exchange().server_final(final)


@pytest.mark.parametrize("first", [
    b"p=tls-server-end-point,,n=user,r=abc",  # channel binding
    b"n,,n=user,r=abc,tokenauth=true",  # Kafka's delegation-token extension
    b"n,a=admin,n=user,r=abc",  # acting as someone else
    b"n,,r=abc",
    b"garbage",
])
def test_a_client_first_laketail_does_not_serve_fails(first):
    with pytest.raises(SaslAuthenticationFailed):
        ScramExchange("SCRAM-SHA-512").parse_first(first)


def test_a_user_name_with_escaped_comma_and_equals():
    assert ScramExchange("SCRAM-SHA-256").parse_first(b"n,,n=a=2Cb=3Dc,r=abc") == "a,b=c"


class FakeAuthenticator:
    """The part of laketail.security.authenticator.Authenticator a gate uses: one
    SCRAM-SHA-512 user ``alice`` with password ``pw``, PLAIN as HTTP Basic."""

    mechanisms = ["SCRAM-SHA-512", "PLAIN"]

    def __init__(self) -> None:
        self.credential = scram.make_credential("pw", "SCRAM-SHA-512", 4096)

    async def scram_credential(self, user: str, mechanism: str):
        return self.credential if (user, mechanism) == ("alice", "SCRAM-SHA-512") else None

    async def basic(self, header_value: str) -> KafkaPrincipal:
        if base64.b64decode(header_value) != b"alice:pw":
            raise SaslAuthenticationFailed("invalid credentials")
        return KafkaPrincipal.user("alice")

    def bearer(self, token: str) -> KafkaPrincipal:
        raise SaslAuthenticationFailed("OAUTHBEARER is not enabled on this broker")


class Body:
    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


def _request(api_key: int, **fields) -> Request:
    return Request(api_key, 1, 7, "test", Body(**fields), object)


def _gate() -> tuple[SaslGate, Session]:
    session = Session(ANONYMOUS, "127.0.0.1")
    return SaslGate(FakeAuthenticator(), session, "SASL"), session  # type: ignore[arg-type]


def _client_final(first_bare: str, server_first: bytes, password: str, digest: str = "sha512") -> bytes:
    """The client's side of RFC 5802, written out independently of the server's."""
    import hashlib
    import hmac

    fields = dict(p.split("=", 1) for p in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.new(digest, client_key).digest(), auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_a_scram_exchange_through_the_gate_names_the_principal():
    async def run():
        gate, session = _gate()
        assert (await gate.answer(_request(18))).data is None  # ApiVersions goes on to KafkaApis
        shake = await gate.answer(_request(17, mechanism="SCRAM-SHA-512"))
        assert shake.data == {"error_code": 0, "mechanisms": ["SCRAM-SHA-512", "PLAIN"]}
        first = await gate.answer(_request(36, auth_bytes=b"n,,n=alice,r=nonce1"))
        assert first.data is not None and first.data["error_code"] == 0 and not gate.authenticated
        final = _client_final("n=alice,r=nonce1", first.data["auth_bytes"], "pw")
        last = await gate.answer(_request(36, auth_bytes=final))
        assert last.data is not None and last.data["error_code"] == 0 and last.data["auth_bytes"].startswith(b"v=")
        return gate, session

    gate, session = asyncio.run(run())
    assert gate.authenticated and session.principal == KafkaPrincipal.user("alice")


def test_a_wrong_password_is_answered_58_and_closes():
    async def run():
        gate, session = _gate()
        await gate.answer(_request(17, mechanism="SCRAM-SHA-512"))
        first = await gate.answer(_request(36, auth_bytes=b"n,,n=alice,r=nonce1"))
        final = _client_final("n=alice,r=nonce1", first.data["auth_bytes"], "not-pw")
        return gate, session, await gate.answer(_request(36, auth_bytes=final))

    gate, session, last = asyncio.run(run())
    assert last.close and last.data["error_code"] == 58 and "invalid credentials" in last.data["error_message"]
    assert not gate.authenticated and session.principal == ANONYMOUS


def test_an_unknown_user_fails_like_a_wrong_password():
    async def run():
        gate, _ = _gate()
        await gate.answer(_request(17, mechanism="SCRAM-SHA-512"))
        return await gate.answer(_request(36, auth_bytes=b"n,,n=mallory,r=nonce1"))

    answer = asyncio.run(run())
    assert answer.close and answer.data["error_code"] == 58


def test_plain_through_the_gate():
    async def run(token: bytes):
        gate, session = _gate()
        await gate.answer(_request(17, mechanism="PLAIN"))
        return await gate.answer(_request(36, auth_bytes=token)), session

    ok, session = asyncio.run(run(b"\0alice\0pw"))
    assert ok.data["error_code"] == 0 and session.principal == KafkaPrincipal.user("alice")
    for bad in (b"\0alice\0nope", b"bob\0alice\0pw", b"alice-pw"):
        refused, session = asyncio.run(run(bad))
        assert refused.close and refused.data["error_code"] == 58 and session.principal == ANONYMOUS


def test_an_unsupported_mechanism_is_answered_33_with_the_enabled_ones():
    async def run():
        return await _gate()[0].answer(_request(17, mechanism="GSSAPI"))

    answer = asyncio.run(run())
    assert answer.close and answer.data == {"error_code": 33, "mechanisms": ["SCRAM-SHA-512", "PLAIN"]}


@pytest.mark.parametrize("api_key", [0, 1, 3, 36])  # Produce, Fetch, Metadata; SaslAuthenticate before the handshake
def test_other_requests_before_authentication_close_the_connection(api_key):
    async def run():
        await _gate()[0].answer(_request(api_key, auth_bytes=b""))

    with pytest.raises(CloseConnection):
        asyncio.run(run())


def test_every_security_protocol_is_a_kafka_listener_protocol():
    from laketail.config import BrokerSettings
    from laketail.security.listeners import exposure_problems, listener_plan

    plan = listener_plan(BrokerSettings(
        listeners="A://0.0.0.0:9092,B://0.0.0.0:9093,C://0.0.0.0:9094,D://0.0.0.0:9095",
        listener_security_protocol_map="A:PLAINTEXT,B:SSL,C:SASL_PLAINTEXT,D:SASL_SSL", kafka_listener_names="A,B,C,D",
        ssl_keystore_certificate_chain="chain.pem", ssl_keystore_key="key.pem"))
    assert [(lst.name, lst.protocol, lst.tls, lst.sasl) for lst in plan.kafka] == [
        ("A", "PLAINTEXT", False, False), ("B", "SSL", True, False), ("C", "SASL_PLAINTEXT", False, True),
        ("D", "SASL_SSL", True, True)]
    # beyond loopback, the listeners that authenticate nobody are the ones serve refuses
    problems = exposure_problems(plan, "none")
    assert [p.split()[1] for p in problems] == ["A", "B"]
    assert [p.split()[1] for p in exposure_problems(plan, "required")] == ["A"]


def test_a_failed_answer_waits_connection_failed_authentication_delay_ms(monkeypatch):
    from laketail.config import BrokerSettings
    from laketail.kafka import security
    from laketail.security.listeners import listener_plan

    settings = BrokerSettings(listeners="K://127.0.0.1:9092", listener_security_protocol_map="K:SASL_PLAINTEXT",
                              kafka_listener_names="K", connection_failed_authentication_delay_ms=250)
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(security.asyncio, "sleep", sleep)
    listener_security = security.ListenerSecurity(listener_plan(settings).kafka[0], settings,
                                                  FakeAuthenticator())  # type: ignore[arg-type]
    asyncio.run(listener_security.before_failure_answer())
    assert waited == [0.25]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _plain_login(gate: SaslGate, token: bytes = b"\0alice\0pw", mechanism: str = "PLAIN"):
    async def run():
        shake = await gate.answer(_request(17, mechanism=mechanism))
        if shake.close:
            return shake
        return await gate.answer(_request(36, auth_bytes=token))

    return asyncio.run(run())


def _reauth_gate(reauth_ms: int = 5000) -> tuple[SaslGate, Session, Clock]:
    session, clock = Session(ANONYMOUS, "127.0.0.1"), Clock()
    gate = SaslGate(FakeAuthenticator(), session, "SASL", reauth_ms=reauth_ms, now=clock)  # type: ignore[arg-type]
    return gate, session, clock


def test_a_session_lifetime_is_given_and_renewed_by_reauthentication():
    gate, session, clock = _reauth_gate()
    done = _plain_login(gate)
    assert done.data["session_lifetime"] == 5000 and gate.authenticated
    clock.now += 4.9
    assert not gate.expired()
    gate.reauthenticate()  # KIP-368: the same connection, the same principal, the same mechanism
    assert not gate.authenticated and session.principal == KafkaPrincipal.user("alice")
    again = _plain_login(gate)
    assert again.data["error_code"] == 0 and again.data["session_lifetime"] == 5000 and gate.authenticated
    clock.now += 4.9  # 9.8 s after the first login: the renewed session still runs
    assert not gate.expired()
    clock.now += 0.2
    assert gate.expired()


def test_without_connections_max_reauth_ms_a_session_never_ends():
    gate, _, clock = _reauth_gate(reauth_ms=0)
    assert _plain_login(gate).data["session_lifetime"] == 0
    clock.now += 10 ** 9
    assert not gate.expired()


def test_reauthentication_may_not_change_the_principal_or_the_mechanism():
    gate, session, _ = _reauth_gate()
    _plain_login(gate)
    gate.reauthenticate()
    other = _plain_login(gate, b"\0alice\0nope")
    assert other.close and other.data["error_code"] == 58
    assert session.principal == KafkaPrincipal.user("alice") and not gate.authenticated

    gate, session, _ = _reauth_gate()
    _plain_login(gate)
    gate.reauthenticate()
    switched = _plain_login(gate, mechanism="SCRAM-SHA-512")
    assert switched.close and switched.data["error_code"] == 34  # ILLEGAL_SASL_STATE


def test_reauthentication_as_another_principal_is_refused():
    class TwoUsers(FakeAuthenticator):
        async def basic(self, header_value: str) -> KafkaPrincipal:
            return KafkaPrincipal.user(base64.b64decode(header_value).decode().split(":")[0])

    session, clock = Session(ANONYMOUS, "127.0.0.1"), Clock()
    gate = SaslGate(TwoUsers(), session, "SASL", reauth_ms=5000, now=clock)  # type: ignore[arg-type]
    _plain_login(gate)
    gate.reauthenticate()
    bob = _plain_login(gate, b"\0bob\0pw")
    assert bob.close and bob.data["error_code"] == 58 and "cannot change principals" in bob.data["error_message"]
    assert session.principal == KafkaPrincipal.user("alice")


def test_the_session_lifetime_is_kafkas_rule():
    # connections.max.reauth.ms alone; capped at a credential's remaining life; that life
    # alone when the setting is 0; never below 0; no end when neither applies
    assert session_lifetime_ms(5000, None, 1_000_000) == 5000
    assert session_lifetime_ms(5000, 1_003_000, 1_000_000) == 3000
    assert session_lifetime_ms(5000, 1_600_000, 1_000_000) == 5000
    assert session_lifetime_ms(0, 1_003_000, 1_000_000) == 3000
    assert session_lifetime_ms(5000, 999_000, 1_000_000) == 0
    assert session_lifetime_ms(0, None, 1_000_000) is None


class OAuthAuthenticator(FakeAuthenticator):
    """Verifies nothing (the real one checks the signature): any JWT is ``alice``."""

    mechanisms = ["OAUTHBEARER", "PLAIN"]

    def bearer(self, token: str) -> KafkaPrincipal:
        return KafkaPrincipal.user("alice")


def _oauth_login(gate: SaslGate, exp: int):
    token = jwt.encode({"sub": "alice", "exp": exp}, "k" * 32, algorithm="HS256")
    return _plain_login(gate, b"n,,\x01auth=Bearer %s\x01\x01" % token.encode(), mechanism="OAUTHBEARER")


@pytest.mark.parametrize("reauth_ms", [5000, 0])
def test_an_oauthbearer_session_ends_when_its_token_does(reauth_ms):
    session, clock = Session(ANONYMOUS, "127.0.0.1"), Clock()
    wall = 1_700_000_000.0
    gate = SaslGate(OAuthAuthenticator(), session, "SASL", reauth_ms=reauth_ms, now=clock,  # type: ignore[arg-type]
                    wall=lambda: wall)
    done = _oauth_login(gate, exp=int(wall) + 3)
    assert done.data["error_code"] == 0 and done.data["session_lifetime"] == 3000  # the token's, not 5000
    clock.now += 2.9
    assert not gate.expired()
    gate.reauthenticate()  # a fresh token renews the session on the same connection
    wall += 2.9
    again = _oauth_login(gate, exp=int(wall) + 600)
    assert again.data["session_lifetime"] == (5000 if reauth_ms else 600_000 - 900)
    clock.now += 4.9
    assert not gate.expired()
    clock.now += 600
    assert gate.expired()


def test_a_plain_session_with_reauth_off_still_never_ends_beside_oauthbearer():
    session, clock = Session(ANONYMOUS, "127.0.0.1"), Clock()
    gate = SaslGate(OAuthAuthenticator(), session, "SASL", reauth_ms=0, now=clock)  # type: ignore[arg-type]
    assert _plain_login(gate).data["session_lifetime"] == 0 and gate.expires_at is None
