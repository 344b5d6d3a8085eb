"""Turning a request's proof into a principal: SCRAM passwords, bearer tokens, certificates.

:class:`Authenticator` is the broker's one place for that decision; the gateway's
:mod:`laketail.api.authentication` middleware hands it what a request shows:

* ``Authorization: Basic base64(user:password)`` -- checked against the user's SCRAM
  credential in the catalog (:mod:`laketail.security.credentials`), for each mechanism
  of ``sasl.enabled.mechanisms`` the user has. The check costs the credential's PBKDF2
  rounds, so a successful one is remembered for ``laketail.sasl.credential.cache.ms``,
  keyed by a salted hash of the presented header value (the password is not kept),
  and only while the catalog still holds the very credential it was checked against: a
  removed or changed user is refused from the next reload of the table (at most
  :data:`RELOAD_S` later), whatever the cache says.
* ``Authorization: Bearer <JWT>`` -- an OAuth token, verified with PyJWT against the
  public keys of ``sasl.oauthbearer.jwks.endpoint.url`` (a JWKS document or a PEM
  public key, as a path or ``file://`` URL), with ``exp`` required and
  ``sasl.oauthbearer.expected.audience`` / ``.issuer`` checked when set. The claim
  ``sasl.oauthbearer.sub.claim.name`` (``sub``) names the principal.
* a verified client certificate's subject (mTLS), mapped by
  ``ssl.principal.mapping.rules`` (:mod:`laketail.security.ssl_principal`).

Failures raise :class:`~laketail.errors.SaslAuthenticationFailed`; the message never
says whether the user exists.

Thread-safety: the coroutines run on the event loop; PBKDF2 and catalog reads run in
worker threads; the cache and the credential snapshot are replaced, never mutated in
place by two parties (a lost cache entry only costs one more PBKDF2).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from laketail.config import BrokerSettings
from laketail.errors import InvalidConfig, SaslAuthenticationFailed
from laketail.security import scram
from laketail.security.credentials import Credentials, CredentialStore
from laketail.security.principal import KafkaPrincipal
from laketail.security.ssl_principal import PrincipalMapper

log = logging.getLogger(__name__)

#: How often the credential table is re-read (a removed user is refused after at most this).
RELOAD_S = 1.0
#: At most this many verified credentials are remembered.
CACHE_ENTRIES = 10_000
_JWT_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]


@dataclass(frozen=True)
class _Verified:
    principal: KafkaPrincipal
    user: str
    mechanism: str
    stored_key: bytes
    expires: float


class Authenticator:
    """The broker's one authentication decision: a request's proof to a ``KafkaPrincipal``.

    :meth:`basic` checks a user's password against its SCRAM credential (cached after a
    success), :meth:`bearer` verifies a JWT, :meth:`certificate` maps a client
    certificate's subject; :meth:`scram_credential` serves the Kafka listener's SCRAM
    exchange. Failures raise ``SaslAuthenticationFailed`` without saying whether the user
    exists. Thread-safety: coroutines on the event loop; PBKDF2 and catalog reads run in
    worker threads.
    """

    def __init__(self, settings: BrokerSettings, store: CredentialStore | None = None) -> None:
        self.mechanisms = [m.strip().upper() for m in settings.sasl_enabled_mechanisms.split(",") if m.strip()]
        unknown = set(self.mechanisms) - {*scram.MECHANISMS, "OAUTHBEARER", "PLAIN"}
        if unknown:
            raise InvalidConfig(f"sasl.enabled.mechanisms: unknown {', '.join(sorted(unknown))}")
        self.store = store or CredentialStore(settings.data)
        self.cache_s = settings.sasl_credential_cache_ms / 1000.0
        self.mapper = PrincipalMapper(settings.ssl_principal_mapping_rules)
        self.sub_claim = settings.sasl_oauthbearer_sub_claim_name or "sub"
        self.audience = settings.sasl_oauthbearer_expected_audience or None
        self.issuer = settings.sasl_oauthbearer_expected_issuer or None
        self._jwt_keys = _load_jwt_keys(settings.sasl_oauthbearer_jwks_endpoint_url)
        self._pepper = os.urandom(16)  # the cache's keys mean nothing outside this process
        self._cache: dict[bytes, _Verified] = {}
        self._credentials: Credentials = {}
        self._version: int | None = None  # of the credentials table, at the last load
        self._loaded_at = float("-inf")
        self._reload: asyncio.Task | None = None

    # -- HTTP Basic over SCRAM credentials ---------------------------------------------

    async def basic(self, header_value: str) -> KafkaPrincipal:
        """The principal of an ``Authorization: Basic ...`` value.

        A value seen before is looked up by a salted hash of the value itself (a repeated
        request decodes nothing), and counts only while the credential it was verified
        against is still the user's in the latest snapshot of the table."""
        key = hashlib.sha256(self._pepper + header_value.encode()).digest()
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit.expires > now:
            if now - self._loaded_at > RELOAD_S:
                await self._snapshot()
            creds = self._credentials.get(hit.user)
            if creds is not None:
                held = creds.get(hit.mechanism)
                if held is not None and held.stored_key == hit.stored_key and hit.mechanism in self.mechanisms:
                    return hit.principal
        try:
            decoded = base64.b64decode(header_value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise SaslAuthenticationFailed("malformed HTTP Basic credentials") from None
        user, sep, password = decoded.partition(":")
        if not sep or not user:
            raise SaslAuthenticationFailed("malformed HTTP Basic credentials")
        creds = (await self._snapshot()).get(user, {})
        for cred in [creds[m] for m in self.mechanisms if m in creds]:
            if await asyncio.to_thread(scram.verify, cred, password):
                principal = KafkaPrincipal.user(user)
                if len(self._cache) >= CACHE_ENTRIES:
                    self._cache = {k: v for k, v in self._cache.items() if v.expires > now}
                    if len(self._cache) >= CACHE_ENTRIES:
                        self._cache.clear()
                self._cache[key] = _Verified(principal, user, cred.mechanism, cred.stored_key, now + self.cache_s)
                return principal
        raise SaslAuthenticationFailed(f"authentication failed for user {user!r}: "
                                       f"invalid credentials with SASL mechanisms {', '.join(self.mechanisms)}")

    async def scram_credential(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        """``user``'s stored credential for ``mechanism`` when that mechanism is enabled:
        what a SCRAM exchange (Kafka's SaslAuthenticate, :mod:`laketail.kafka.sasl`) runs against."""
        if mechanism not in self.mechanisms:
            return None
        return (await self._snapshot()).get(user, {}).get(mechanism)

    async def _snapshot(self) -> Credentials:
        """The credentials as of the last load; a stale snapshot starts a reload in the
        background (requests wait for a load only before the first one)."""
        if time.monotonic() - self._loaded_at > RELOAD_S:
            if self._reload is None or self._reload.done():
                self._reload = asyncio.ensure_future(self._load())
            if self._loaded_at == float("-inf"):
                await asyncio.shield(self._reload)
        return self._credentials

    async def _load(self) -> None:
        try:
            version, credentials = await asyncio.to_thread(self.store.load_if_changed, self._version)
        except Exception as exc:  # storage or delta-rs trouble: keep the last snapshot, retry on the next request
            log.warning("reading %s failed: %s: %s", self.store.uri, type(exc).__name__, exc)
            return
        if credentials is not None:
            self._credentials, self._version = credentials, version
        self._loaded_at = time.monotonic()

    # -- OAuth bearer tokens -----------------------------------------------------------

    def bearer(self, token: str) -> KafkaPrincipal:
        """The principal of an ``Authorization: Bearer <JWT>`` value."""
        import jwt

        if "OAUTHBEARER" not in self.mechanisms or not self._jwt_keys:
            raise SaslAuthenticationFailed("OAUTHBEARER is not enabled on this broker")
        try:
            header = jwt.get_unverified_header(token)
            key = self._key_for(header)
            options: Any = {"require": ["exp"], "verify_aud": self.audience is not None}
            claims = jwt.decode(token.strip(), key, algorithms=_JWT_ALGORITHMS, audience=self.audience,
                                issuer=self.issuer, options=options)
        except jwt.PyJWTError as exc:
            raise SaslAuthenticationFailed(f"invalid OAuth bearer token: {exc}") from None
        name = claims.get(self.sub_claim)
        if not isinstance(name, str) or not name:
            raise SaslAuthenticationFailed(f"the OAuth bearer token has no '{self.sub_claim}' claim")
        return KafkaPrincipal.user(name)

    def _key_for(self, header: dict):
        import jwt

        kid = header.get("kid")
        if kid is not None and kid in self._jwt_keys:
            return self._jwt_keys[kid]
        if len(self._jwt_keys) == 1:
            return next(iter(self._jwt_keys.values()))
        raise jwt.InvalidKeyError(f"no configured key has kid {kid!r}")

    # -- client certificates -----------------------------------------------------------

    def certificate(self, distinguished_name: str) -> KafkaPrincipal:
        name = self.mapper.name_for(distinguished_name)
        if not name:
            raise SaslAuthenticationFailed(f"no ssl.principal.mapping.rules rule matches {distinguished_name!r}")
        return KafkaPrincipal.user(name)


def _load_jwt_keys(location: str) -> dict[str | None, object]:
    """``kid`` -> public key, from a JWKS document or a PEM public key; {} when unset."""
    if not location:
        return {}
    import jwt
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    parts = urlsplit(location)
    if parts.scheme not in ("", "file"):
        raise InvalidConfig("sasl.oauthbearer.jwks.endpoint.url: laketail reads a local file (path or file://); "
                            "fetch the provider's JWKS into one")
    path = Path(parts.path if parts.scheme == "file" else location)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidConfig(f"sasl.oauthbearer.jwks.endpoint.url: cannot read {path}: {exc}") from exc
    try:
        if raw.lstrip().startswith(b"{"):
            keys = jwt.PyJWKSet.from_dict(json.loads(raw))
            return {k.key_id: k.key for k in keys.keys}
        return {None: load_pem_public_key(raw)}
    except (ValueError, jwt.PyJWTError) as exc:
        raise InvalidConfig(f"sasl.oauthbearer.jwks.endpoint.url: {path} is neither a JWKS nor a PEM "
                            f"public key: {exc}") from exc
