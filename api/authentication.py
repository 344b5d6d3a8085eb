"""Authentication: the outermost layer of every listener's app; sets the request's principal.

One :class:`Authenticate` wraps the gateway once per listener
(:mod:`laketail.security.listeners`), ahead of everything else (the access log, the
coordinator proxy, the produce/fetch fast path, FastAPI), so no route is reached
without it. For each HTTP request it decides, by the listener's role and protocol:

* ``/internal`` on a listener that is not the inter-broker one: 404, as if the routes
  did not exist (they do not, for clients).
* On the inter-broker listener, when the cluster has a secret: a request showing
  ``x-laketail-inter-broker-secret`` equal to it is a peer broker's (compared in
  constant time); a wrong one is refused, and so is any request without it on a
  separate inter-broker listener or to ``/internal``. A peer may pass on the principal
  and address of the client whose request it forwards (the coordinator proxy does) in
  ``x-laketail-principal`` / ``x-laketail-client-host``; only a peer may: those headers
  are dropped from every other request before anything reads them. A peer without
  them acts as :data:`BROKER_PRINCIPAL`.
* On a ``SASL_*`` listener: ``Authorization: Basic`` (SCRAM credentials) or
  ``Bearer`` (OAuth JWT) is required; missing or wrong -> 401
  ``SASL_AUTHENTICATION_FAILED`` (40101) with a ``WWW-Authenticate`` challenge.
* On an ``SSL`` listener: a verified client certificate's subject names the principal
  (``ssl.principal.mapping.rules``); no certificate -> ``User:ANONYMOUS``.
* ``PLAINTEXT``: ``User:ANONYMOUS``.
* The web console's page and packaged assets (``GET /console``, ``/console/assets/...``)
  are static and served to anyone as ``User:ANONYMOUS``, so its sign-in form can load;
  every request the page then makes carries the signed-in user's credentials. A refusal
  of a request marked ``X-Requested-With`` (the console's) has no ``WWW-Authenticate``
  challenge, so the browser shows the console's sign-in rather than its own dialog.

A failed authentication is answered only after ``connection.failed.authentication.delay.ms``
(Kafka's key and default, 100 ms), as Kafka delays closing a connection whose
authentication failed: a client guessing passwords gets one try per connection and per
delay, and ``max.connections.per.ip`` bounds its connections. The connection is kept
(HTTP's 401 is an answer, not the end of the connection, and the Python client retries
on the one it has).

Every refusal is a line on ``laketail.audit`` (host, listener, reason; never the
credentials). The principal goes to ``scope["state"]["principal"]`` (``request.state.principal``,
read through :func:`laketail.api.principal.principal_of`). The lifespan passes through.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from laketail.api.access_log import PRINCIPAL_KEY
from laketail.errors import LaketailError, SaslAuthenticationFailed
from laketail.security import peers
from laketail.security.authenticator import Authenticator
from laketail.security.listeners import Listener
from laketail.security.principal import ANONYMOUS, BROKER, KafkaPrincipal

SECRET_HEADER = peers.SECRET_HEADER.encode()
PRINCIPAL_HEADER = peers.PRINCIPAL_HEADER.encode()
CLIENT_HOST_HEADER = peers.CLIENT_HOST_HEADER.encode()
_PEER_ONLY = (SECRET_HEADER, PRINCIPAL_HEADER, CLIENT_HOST_HEADER)
#: Who a peer broker is when it does not speak for a client (Kafka's inter-broker user).
BROKER_PRINCIPAL = BROKER
#: Kafka's authorizer-logger style lines: here, every refused authentication.
audit = logging.getLogger("laketail.audit")
_NOT_FOUND = json.dumps({"error_code": 404, "message": "HTTP 404 Not Found"}).encode()
_STATIC_PAGES = ("/console", "/console/")
_STATIC_PREFIX = "/console/assets/"


def _static_page(scope: Scope) -> bool:
    """The console's page and assets: static files, open to anyone (no data in them)."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
        return False
    path = scope["path"]
    return path in _STATIC_PAGES or path.startswith(_STATIC_PREFIX)


class Authenticate:
    """ASGI middleware for one listener; stateless per request, event-loop only."""

    def __init__(self, app: ASGIApp, listener: Listener, authenticator: Authenticator | None,
                 secret: str = "", *, failed_delay_s: float = 0.1) -> None:
        self.app = app
        self.failed_delay_s = failed_delay_s
        self.listener = listener
        self.authenticator = authenticator
        self.secret = secret.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        internal = scope["path"].startswith("/internal/") or scope["path"] == "/internal"
        if internal and not self.listener.inter_broker:
            await _answer(send, 404, _NOT_FOUND, websocket=scope["type"] == "websocket")
            return
        headers = scope["headers"]
        shown = {k: v for k, v in headers if k in _PEER_ONLY or k in (b"authorization", b"x-requested-with")}
        if any(k in _PEER_ONLY for k in shown):
            scope["headers"] = [(k, v) for k, v in headers if k not in _PEER_ONLY]
        try:
            if b"authorization" not in shown and not internal and _static_page(scope):
                principal = ANONYMOUS
            else:
                principal = await self._principal(scope, shown, internal)
        except SaslAuthenticationFailed as exc:
            client = scope.get("client")
            audit.info("principal=- host=%s operation=Authenticate resource=Listener:%s result=denied reason=%s",
                       client[0] if client else "-", self.listener.name, exc.detail)
            if self.failed_delay_s > 0:
                await asyncio.sleep(self.failed_delay_s)  # Kafka's delayed close of a failed login
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": exc.message[:120]})
            else:
                await _refuse(send, exc, challenge=b"x-requested-with" not in shown)
            return
        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        state["principal"] = principal
        scope[PRINCIPAL_KEY] = str(principal)  # what the access log prints
        await self.app(scope, receive, send)

    async def _principal(self, scope: Scope, shown: dict[bytes, bytes], internal: bool) -> KafkaPrincipal:
        lst = self.listener
        if lst.inter_broker and self.secret:
            presented = shown.get(SECRET_HEADER)
            if presented is not None:
                if not hmac.compare_digest(presented, self.secret):
                    raise SaslAuthenticationFailed("inter-broker listener: the cluster secret is wrong")
                return _forwarded(scope, shown)
            if internal or not lst.shared:
                raise SaslAuthenticationFailed("inter-broker listener: a peer broker must show the cluster secret")
        if lst.sasl:
            return await self._sasl(shown.get(b"authorization"))
        if lst.tls:
            name = scope.get("extensions", {}).get("tls", {}).get("client_cert_name")
            if name and self.authenticator is not None:
                return self.authenticator.certificate(name)
        return ANONYMOUS

    async def _sasl(self, authorization: bytes | None) -> KafkaPrincipal:
        if authorization is None:
            raise SaslAuthenticationFailed(
                f"listener {self.listener.name} ({self.listener.protocol}) needs credentials: "
                "HTTP Basic (SCRAM user) or Bearer (OAuth token)")
        assert self.authenticator is not None
        scheme, _, value = authorization.decode("latin-1").partition(" ")
        if scheme.lower() == "basic":
            return await self.authenticator.basic(value)
        if scheme.lower() == "bearer":
            return self.authenticator.bearer(value)
        raise SaslAuthenticationFailed(f"unsupported Authorization scheme {scheme!r}: Basic or Bearer")


def _forwarded(scope: Scope, shown: dict[bytes, bytes]) -> KafkaPrincipal:
    raw = shown.get(PRINCIPAL_HEADER)
    host = shown.get(CLIENT_HOST_HEADER)
    if host:
        scope["client"] = (host.decode("latin-1"), 0)  # host ACLs match the original client
    if raw is None:
        return BROKER_PRINCIPAL
    try:
        return KafkaPrincipal.parse(raw.decode("utf-8"))
    except (LaketailError, UnicodeDecodeError):
        raise SaslAuthenticationFailed("a forwarded principal must be written <type>:<name>") from None


async def _refuse(send: Send, exc: SaslAuthenticationFailed, *, challenge: bool = True) -> None:
    extra = [(b"www-authenticate", b'Basic realm="laketail", Bearer realm="laketail"')] if challenge else []
    await _answer(send, exc.http_status, json.dumps(exc.to_body()).encode(), extra)


async def _answer(send: Send, status: int, body: bytes, extra: list | None = None, *,
                  websocket: bool = False) -> None:
    if websocket:
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})

