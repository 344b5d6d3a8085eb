"""A client's security settings, under confluent-kafka's (librdkafka's) property names.

* ``security.protocol`` -- ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT``,
  ``SASL_SSL``. The TLS protocols need ``https://`` gateway URLs in
  ``bootstrap.servers`` (a bare ``host:port`` is then ``https://host:port``).
* ``sasl.mechanism`` (alias ``sasl.mechanisms``) -- ``PLAIN``, ``SCRAM-SHA-256``,
  ``SCRAM-SHA-512`` (all three send ``sasl.username`` / ``sasl.password`` as HTTP Basic
  over the TLS connection; the broker checks them against its SCRAM credentials) or
  ``OAUTHBEARER`` (``Authorization: Bearer``: a token from ``oauth_cb``, which returns
  ``(token, expiry_seconds)`` as confluent-kafka's does, or laketail's
  ``sasl.oauthbearer.token`` for a fixed one).
* ``ssl.ca.location`` -- the CA bundle (PEM) that signed the brokers' certificates;
  ``ssl.certificate.location`` / ``ssl.key.location`` (``ssl.key.password``) -- this
  client's certificate for mutual TLS; ``enable.ssl.certificate.verification`` (true).

:func:`client_security` parses them (bad values are ``ValueError``); the same keys
serve the Spark source and sink (``laketail.``-prefixed there), and the CLI and the
Spark jobs (``--command-config``, ``LAKETAIL_*``: :func:`client_properties`).
:meth:`ClientSecurity.httpx_options` is what an ``httpx.Client`` takes. Immutable; thread-safe.
"""

from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import httpx

from laketail.security.listeners import PROTOCOLS, SASL_PROTOCOLS, TLS_PROTOCOLS

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: The keys read here (everything else under ``ssl.`` / ``sasl.`` is accepted and ignored).
KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "sasl.oauthbearer.token", "oauth_cb", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password", "enable.ssl.certificate.verification",
})


@dataclass(frozen=True)
class ClientSecurity:
    """A client's parsed security settings: protocol, SASL mechanism and credentials, TLS files.

    Built by :func:`client_security` from confluent-kafka's property names (module
    docstring); :meth:`httpx_options` turns them into what an ``httpx.Client`` takes (the
    TLS context and the ``Authorization`` it sends). Immutable; thread-safe.
    """

    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    oauth_cb: Callable[[Any], Any] | None = None
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    verify_certificates: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    def ssl_context(self) -> ssl.SSLContext | bool:
        """What httpx's ``verify`` takes: a context with the CA and client certificate."""
        if not self.verify_certificates:
            return False
        ctx = ssl.create_default_context(cafile=self.ca_location) if self.ca_location \
            else ssl.create_default_context()
        if self.certificate_location:
            ctx.load_cert_chain(self.certificate_location, self.key_location, self.key_password)
        return ctx

    def auth(self) -> httpx.Auth | None:
        if not self.sasl:
            return None
        if self.mechanism == "OAUTHBEARER":
            return _BearerAuth(self.token, self.oauth_cb)
        return httpx.BasicAuth(self.username or "", self.password or "")

    def httpx_options(self) -> dict[str, Any]:
        """``verify`` and ``auth`` for an httpx client of the gateway."""
        out: dict[str, Any] = {}
        if self.tls or self.ca_location or self.certificate_location:
            out["verify"] = self.ssl_context()
        auth = self.auth()
        if auth is not None:
            out["auth"] = auth
        return out


class _BearerAuth(httpx.Auth):
    """``Authorization: Bearer``; a token from ``oauth_cb`` is fetched again before it expires."""

    def __init__(self, token: str | None, oauth_cb: Callable[[Any], Any] | None) -> None:
        self._token = token
        self._cb = oauth_cb
        self._expires = float("inf") if token else 0.0
        self._lock = threading.Lock()

    def _current(self) -> str:
        with self._lock:
            if self._cb is not None and time.time() >= self._expires - 5:
                token, expiry = self._cb(None)[:2]
                self._token, self._expires = str(token), float(expiry)
            return self._token or ""

    def auth_flow(self, request: httpx.Request):
        request.headers["Authorization"] = f"Bearer {self._current()}"
        yield request


def client_security(conf: Mapping[str, Any]) -> ClientSecurity:
    """The security settings among ``conf``'s keys; ``ValueError`` names the bad one."""
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).strip().upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    mechanism = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "PLAIN"))).strip().upper()
    if mechanism not in MECHANISMS:
        raise ValueError(f"sasl.mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
    sec = ClientSecurity(
        protocol=protocol,
        mechanism=mechanism,
        username=_opt(conf, "sasl.username"),
        password=_opt(conf, "sasl.password"),
        token=_opt(conf, "sasl.oauthbearer.token"),
        oauth_cb=conf.get("oauth_cb"),
        ca_location=_opt(conf, "ssl.ca.location"),
        certificate_location=_opt(conf, "ssl.certificate.location"),
        key_location=_opt(conf, "ssl.key.location"),
        key_password=_opt(conf, "ssl.key.password"),
        verify_certificates=str(conf.get("enable.ssl.certificate.verification", "true")).strip().lower()
        not in ("false", "0", "no", "off"),
    )
    if sec.sasl and mechanism != "OAUTHBEARER" and not (sec.username and sec.password is not None):
        raise ValueError(f"security.protocol={protocol} with {mechanism} needs sasl.username and sasl.password")
    if sec.sasl and mechanism == "OAUTHBEARER" and not (sec.token or sec.oauth_cb):
        raise ValueError("sasl.mechanism=OAUTHBEARER needs oauth_cb or sasl.oauthbearer.token")
    if sec.oauth_cb is not None and not callable(sec.oauth_cb):
        raise ValueError("oauth_cb must be callable")
    return sec


#: The variable that names a properties file when no ``--command-config`` does.
COMMAND_CONFIG_ENV = "LAKETAIL_COMMAND_CONFIG"
#: ``LAKETAIL_<KEY>`` for each of :data:`KEYS` (``LAKETAIL_SASL_USERNAME``, ...).
KEY_VARIABLES = {"LAKETAIL_" + key.upper().replace(".", "_"): key for key in KEYS}
#: Every variable that gives a tool client credentials (the broker's own jobs drop them:
#: they call the broker as a peer).
CLIENT_VARIABLES = frozenset(KEY_VARIABLES) | {COMMAND_CONFIG_ENV}


def read_properties(text: str) -> dict[str, str]:
    """A Java properties file's ``key=value`` / ``key: value`` lines (``#`` and ``!``
    comments); ``ValueError`` names a line that is neither."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ValueError(f"cannot read {line!r} (expected key=value)")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def client_properties(path: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The client properties of a tool (the CLI, the Spark jobs): the file at ``path``
    (Kafka tools' ``--command-config``; else ``$LAKETAIL_COMMAND_CONFIG``), then each of
    :data:`KEYS` from ``LAKETAIL_<KEY>`` (upper-cased, dots as underscores:
    ``LAKETAIL_SASL_USERNAME``) over it. ``OSError`` for an unreadable file,
    ``ValueError`` for a malformed one."""
    path = path or env.get(COMMAND_CONFIG_ENV)
    props: dict[str, str] = {}
    if path:
        with open(path, encoding="utf-8") as fh:
            try:
                props = read_properties(fh.read())
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
    for var, key in KEY_VARIABLES.items():
        if var in env:
            props[key] = env[var]
    return props


def _opt(conf: Mapping[str, Any], key: str) -> str | None:
    value = conf.get(key)
    return None if value is None else str(value)
