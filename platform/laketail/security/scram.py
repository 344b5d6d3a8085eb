"""SCRAM credentials (RFC 5802, RFC 7677): what the broker keeps instead of a password.

For a password P, a random salt and an iteration count i::

    SaltedPassword = PBKDF2-HMAC-H(P, salt, i)
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")

The broker stores ``(mechanism, salt, iterations, StoredKey, ServerKey)``, as Kafka's
``kafka-configs --add-config SCRAM-SHA-256=[iterations=...,password=...]`` does; the
password itself is never stored. The gateway receives the password over TLS (HTTP
Basic) and checks it by recomputing StoredKey, which costs the ``i`` PBKDF2 rounds:
:class:`~laketail.security.authenticator.Authenticator` caches successful checks.

Pure functions; thread-safe.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from laketail.errors import InvalidConfig

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's minimum for SCRAM iterations (and its default, 4096).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 1_000_000


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _keys(password: str, salt: bytes, iterations: int, digest: str) -> tuple[bytes, bytes]:
    salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return stored_key, server_key


def make_credential(password: str, mechanism: str = "SCRAM-SHA-256", iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for ``password`` (a fresh random salt unless given)."""
    if mechanism not in MECHANISMS:
        raise InvalidConfig(f"unknown SASL mechanism {mechanism!r}: SCRAM-SHA-256 or SCRAM-SHA-512")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidConfig(f"iterations={iterations}: between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    if not password:
        raise InvalidConfig("a SCRAM password cannot be empty")
    salt = os.urandom(32) if salt is None else salt
    stored_key, server_key = _keys(password, salt, iterations, MECHANISMS[mechanism])
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def verify(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time compare)."""
    stored_key, _ = _keys(password, credential.salt, credential.iterations, MECHANISMS[credential.mechanism])
    return hmac.compare_digest(stored_key, credential.stored_key)
