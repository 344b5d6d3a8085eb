"""SASL on a Kafka listener: SaslHandshake, then SaslAuthenticate until a principal.

A ``SASL_PLAINTEXT`` or ``SASL_SSL`` Kafka listener gives every connection a
:class:`SaslGate`, which answers the connection's first requests the way Kafka's
``SaslServerAuthenticator`` does, before :class:`~laketail.kafka.apis.KafkaApis` sees
any of them:

* ApiVersions passes (a client asks for versions before the handshake);
* SaslHandshake (v0-v1) names a mechanism of ``sasl.enabled.mechanisms``; any other is
  answered UNSUPPORTED_SASL_MECHANISM with the enabled list, and the connection closes;
* after v1, SaslAuthenticate (v0-v2) carries the mechanism's tokens; after v0 (clients
  before Kafka 1.0, KIP-152) the tokens travel raw: each frame after the handshake is
  a size-prefixed token without a request header, answered by a size-prefixed token
  (:meth:`SaslGate.raw_token`), and a failure closes the connection without an
  answer, as Kafka's broker does for v0. The tokens are:

  - ``PLAIN`` (RFC 4616): ``authzid NUL user NUL password``, checked against the
    user's SCRAM credentials as HTTP Basic is
    (:meth:`~laketail.security.authenticator.Authenticator.basic`);
  - ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802): the real two-round exchange
    against the stored salt, iteration count, StoredKey and ServerKey that
    ``laketail users`` writes (:class:`ScramExchange`); the password never crosses
    the wire and the broker proves it holds ServerKey;
  - ``OAUTHBEARER`` (RFC 7628): ``n,,\\x01auth=Bearer <JWT>\\x01\\x01``, the JWT
    verified as the HTTP listener verifies a bearer token
    (:meth:`~laketail.security.authenticator.Authenticator.bearer`);

* any other request before the exchange is complete closes the connection (Kafka's
  ``IllegalSaslStateException``).

A failed exchange is answered SASL_AUTHENTICATION_FAILED (58) with a message that
never says whether the user exists, after ``connection.failed.authentication.delay.ms``
(:mod:`laketail.kafka.security`), logged on ``laketail.audit``, and the connection
is closed.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` above 0, the last
SaslAuthenticate answer (v1+) carries it as ``session_lifetime_ms``, and the client
must authenticate again on the same connection before that much time has passed:
SaslHandshake and SaslAuthenticate once more (:meth:`SaslGate.reauthenticate`), with
the same mechanism (else ILLEGAL_SASL_STATE and the connection closes) ending as the
same principal (else SASL_AUTHENTICATION_FAILED and the connection closes), which
starts a new session. A request other than SaslHandshake on a connection whose session
has expired closes it (:meth:`SaslGate.expired`), as Kafka's broker does. An
OAUTHBEARER session also ends when its token does (the JWT's ``exp``, read once the
authenticator has verified the token): the lifetime answered is then
``min(connections.max.reauth.ms, exp - now)``, and ``exp - now`` alone when the setting
is 0, as Kafka's ``SaslServerAuthenticator`` computes it. A connection whose session
has an end may re-authenticate; one without (PLAIN or SCRAM with the setting 0) never
needs to.
After success the connection's :class:`~laketail.kafka.apis.Session` carries
``User:<name>``, the principal the HTTP listeners give the same user, so the same
ACLs apply.

One gate per connection; event loop thread only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import time
from typing import TYPE_CHECKING, Callable

from laketail.errors import SaslAuthenticationFailed
from laketail.kafka.protocol import API_VERSIONS, CloseConnection, Request
from laketail.security import scram
from laketail.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from laketail.kafka.apis import Session
    from laketail.security.authenticator import Authenticator

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = SaslAuthenticationFailed.kafka_code
audit = logging.getLogger("laketail.audit")


class Answer:
    """What the gate says to one request: ``data`` to answer (None: not the gate's
    request, hand it to KafkaApis), and whether the connection closes after it."""

    __slots__ = ("data", "close")

    def __init__(self, data: dict | None, close: bool = False) -> None:
        self.data = data
        self.close = close


class SaslGate:
    """The SASL state of one connection: handshake, then authenticate, then done."""

    def __init__(self, authenticator: "Authenticator", session: "Session", listener: str,
                 reauth_ms: int = 0, now: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.authenticator = authenticator
        self.session = session
        self.listener = listener
        self.mechanism: str | None = None
        self.scram: ScramExchange | None = None
        self.authenticated = False
        #: connections.max.reauth.ms: the session lifetime given to clients (0: unlimited)
        self.reauth_ms = reauth_ms
        self._now = now  # monotonic seconds
        self._wall = wall  # seconds since the epoch, what a token's exp counts
        #: when the session ends unless the client re-authenticates (None: never)
        self.expires_at: float | None = None
        #: the session_lifetime_ms the last successful SaslAuthenticate answered (0: none)
        self.lifetime_ms = 0
        #: while re-authenticating: the principal and mechanism the new exchange must keep
        self._before: tuple[KafkaPrincipal, str] | None = None
        #: after a SaslHandshake v0: the next frames are raw SASL tokens, not requests
        self.raw = False

    def expired(self) -> bool:
        """Whether the authenticated session outlived its lifetime (``connections.max.reauth.ms``,
        or an OAUTHBEARER token's expiry)."""
        return self.expires_at is not None and self._now() >= self.expires_at

    def reauthenticate(self) -> None:
        """An authenticated client starts the exchange again (KIP-368): until it
        completes, only the exchange is served, and it must keep the principal and the
        mechanism."""
        assert self.authenticated and self.mechanism is not None
        self._before = (self.session.principal, self.mechanism)
        self.mechanism, self.scram, self.authenticated = None, None, False

    async def answer(self, request: Request) -> Answer:
        if request.api_key == API_VERSIONS:
            return Answer(None)
        if request.api_key == SASL_HANDSHAKE and self.mechanism is None:
            return self._handshake(request.body.mechanism, request.api_version)
        if request.api_key == SASL_AUTHENTICATE and self.mechanism is not None:
            try:
                token = await self._authenticate(bytes(request.body.auth_bytes))
            except SaslAuthenticationFailed as exc:
                audit.info("principal=- host=%s operation=Authenticate resource=Listener:%s result=denied "
                           "reason=%s", self.session.host, self.listener, exc.detail)
                return Answer({"error_code": SASL_AUTHENTICATION_FAILED, "error_message": exc.message,
                               "auth_bytes": b"", "session_lifetime": 0}, close=True)
            lifetime = self.lifetime_ms if self.authenticated else 0
            return Answer({"error_code": 0, "error_message": None, "auth_bytes": token, "session_lifetime": lifetime})
        raise CloseConnection(f"API key {request.api_key} before SASL authentication completed")

    async def raw_token(self, token: bytes) -> bytes:
        """After SaslHandshake v0: the server's next raw token for the client's ``token``;
        :class:`SaslAuthenticationFailed` (logged on ``laketail.audit``) ends the exchange."""
        try:
            return await self._authenticate(token)
        except SaslAuthenticationFailed as exc:
            audit.info("principal=- host=%s operation=Authenticate resource=Listener:%s result=denied "
                       "reason=%s", self.session.host, self.listener, exc.detail)
            raise

    def _handshake(self, mechanism: str, version: int) -> Answer:
        enabled = self.authenticator.mechanisms
        if mechanism not in enabled:
            return Answer({"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}, close=True)
        if self._before is not None and mechanism != self._before[1]:
            return Answer({"error_code": ILLEGAL_SASL_STATE, "mechanisms": enabled}, close=True)
        self.mechanism = mechanism
        self.raw = version == 0
        return Answer({"error_code": 0, "mechanisms": enabled})

    async def _authenticate(self, token: bytes) -> bytes:
        """The server's next token; sets the session's principal when the exchange completes."""
        mechanism = self.mechanism
        if mechanism == "PLAIN":
            authzid, user, password = _plain(token)
            if authzid and authzid != user:
                raise SaslAuthenticationFailed("PLAIN: an authorization id other than the user is not allowed")
            basic = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._done(await self.authenticator.basic(basic))
            return b""
        if mechanism == "OAUTHBEARER":
            jwt_token = _bearer(token)
            self._done(self.authenticator.bearer(jwt_token), _expiry_ms(jwt_token))
            return b""
        assert mechanism in scram.MECHANISMS
        if self.scram is None:
            exchange = ScramExchange(mechanism)
            user = exchange.parse_first(token)
            credential = await self.authenticator.scram_credential(user, mechanism)
            if credential is None:
                raise SaslAuthenticationFailed(f"authentication failed for user {user!r}: invalid credentials "
                                               f"with SASL mechanism {mechanism}")
            self.scram = exchange
            return exchange.server_first(credential)
        final = self.scram.server_final(token)
        self._done(KafkaPrincipal.user(self.scram.user))
        return final

    def _done(self, principal: KafkaPrincipal, credential_expiry_ms: float | None = None) -> None:
        """The exchange succeeded as ``principal``; ``credential_expiry_ms`` is when its
        credential ends (an OAUTHBEARER token's exp, ms since the epoch), if it does."""
        if self._before is not None and principal != self._before[0]:
            raise SaslAuthenticationFailed(f"cannot change principals during re-authentication from "
                                           f"{self._before[0]}: {principal}")
        self.session.principal = principal
        self.authenticated = True
        self._before = None
        lifetime = session_lifetime_ms(self.reauth_ms, credential_expiry_ms, self._wall() * 1000)
        self.lifetime_ms = lifetime or 0
        self.expires_at = None if lifetime is None else self._now() + lifetime / 1000


def session_lifetime_ms(reauth_ms: int, credential_expiry_ms: float | None, now_ms: float) -> int | None:
    """KIP-368's session lifetime (Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``):
    ``connections.max.reauth.ms`` (when above 0) capped at the credential's remaining
    life (when it has an expiry), never below 0; None when neither applies (the session
    never ends)."""
    limits = [reauth_ms] if reauth_ms > 0 else []
    if credential_expiry_ms is not None:
        limits.append(int(credential_expiry_ms - now_ms))
    return max(0, min(limits)) if limits else None


def _expiry_ms(jwt_token: str) -> float | None:
    """The ``exp`` of a JWT the authenticator has just verified (it requires the claim),
    in ms since the epoch; read without checking the signature again."""
    import jwt

    exp = jwt.decode(jwt_token.strip(), options={"verify_signature": False}).get("exp")
    return float(exp) * 1000 if isinstance(exp, (int, float)) else None


def _plain(token: bytes) -> tuple[str, str, str]:
    try:
        authzid, user, password = token.decode("utf-8").split("\0")
    except (UnicodeDecodeError, ValueError):
        raise SaslAuthenticationFailed("PLAIN: the token is not authzid NUL user NUL password") from None
    if not user or not password:
        raise SaslAuthenticationFailed("PLAIN: user and password are required")
    return authzid, user, password


def _bearer(token: bytes) -> str:
    """The JWT of an OAUTHBEARER client initial response (RFC 7628 §3.1)."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed("OAUTHBEARER: the token is not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not header.startswith(("n,", "y,")):
        raise SaslAuthenticationFailed("OAUTHBEARER: not a GS2 header followed by key/value pairs")
    for pair in rest.split("\x01"):
        key, _, value = pair.partition("=")
        if key == "auth" and value.startswith("Bearer "):
            return value.removeprefix("Bearer ").strip()
    raise SaslAuthenticationFailed("OAUTHBEARER: no auth=Bearer <token> pair")


class ScramExchange:
    """The server side of one SCRAM exchange (RFC 5802 §3, §5).

    ``client-first``: ``n,[a=authzid],n=user,r=cnonce[,ext]``; the answer
    ``server-first``: ``r=cnonce+snonce,s=base64(salt),i=iterations``;
    ``client-final``: ``c=base64(gs2-header),r=nonce,p=base64(ClientProof)``, where
    ``ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)``: the broker recovers
    ClientKey, checks ``H(ClientKey) == StoredKey`` and answers
    ``v=base64(HMAC(ServerKey, AuthMessage))``. Extensions (Kafka's ``tokenauth``,
    delegation tokens) are refused."""

    def __init__(self, mechanism: str, server_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        #: appended to the client's nonce; random unless given (golden tests)
        self.server_nonce = server_nonce or base64.b64encode(os.urandom(24)).decode()
        self.digest = scram.MECHANISMS[mechanism]
        self.user = ""
        self._gs2 = ""
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._stored_key = b""
        self._server_key = b""

    def parse_first(self, token: bytes) -> str:
        """The user the client names; :class:`SaslAuthenticationFailed` when malformed."""
        text = _utf8(token)
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise SaslAuthenticationFailed(f"{self.mechanism}: malformed client-first message "
                                           "(channel binding is not supported)")
        self._gs2 = f"{parts[0]},{parts[1]},"
        self._first_bare = parts[2]
        fields = _fields(self._first_bare)
        user, cnonce = fields.get("n"), fields.get("r")
        if not user or not cnonce or set(fields) - {"n", "r"}:
            raise SaslAuthenticationFailed(f"{self.mechanism}: client-first needs n= and r= and no extensions")
        self.user = user.replace("=2C", ",").replace("=3D", "=")
        authzid = parts[1].removeprefix("a=") if parts[1] else ""
        if authzid and authzid.replace("=2C", ",").replace("=3D", "=") != self.user:
            raise SaslAuthenticationFailed(f"{self.mechanism}: an authorization id other than the user")
        self._nonce = cnonce + self.server_nonce
        return self.user

    def server_first(self, credential: scram.ScramCredential) -> bytes:
        self._stored_key, self._server_key = credential.stored_key, credential.server_key
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def server_final(self, token: bytes) -> bytes:
        text = _utf8(token)
        without_proof, sep, proof_text = text.rpartition(",p=")
        fields = _fields(without_proof) if sep else {}
        fail = SaslAuthenticationFailed(f"authentication failed for user {self.user!r}: invalid credentials "
                                        f"with SASL mechanism {self.mechanism}")
        if fields.get("r") != self._nonce or fields.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise fail
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except binascii.Error:
            raise fail from None
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(self._stored_key, auth_message, self.digest).digest()
        if len(proof) != len(signature):
            raise fail
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), self._stored_key):
            raise fail
        verifier = hmac.new(self._server_key, auth_message, self.digest).digest()
        return b"v=" + base64.b64encode(verifier)


def _utf8(token: bytes) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed("SCRAM: the message is not UTF-8") from None


def _fields(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1 or key in out:
            raise SaslAuthenticationFailed(f"SCRAM: malformed attribute {part[:20]!r}")
        out[key] = value
    return out


async def illegal_state(request: Request, session: "Session") -> dict:
    """SaslHandshake or SaslAuthenticate reaching KafkaApis: on a listener without SASL,
    or after the exchange completed. Kafka's broker answers ILLEGAL_SASL_STATE."""
    return {"error_code": ILLEGAL_SASL_STATE, "error_message": "no SASL exchange is expected on this connection",
            "mechanisms": [], "auth_bytes": b"", "session_lifetime": 0}


#: KafkaApis' handlers for the SASL APIs, which the gate answers before authentication.
AFTER_AUTHENTICATION = {SASL_HANDSHAKE: illegal_state, SASL_AUTHENTICATE: illegal_state}
