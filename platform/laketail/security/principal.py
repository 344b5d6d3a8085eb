"""Kafka's principal: a type and a name, written ``User:alice``.

Every request the gateway serves has one. Authentication sets it on
``request.state.principal``; a request that proved nothing (or a listener with no
authentication) is :data:`ANONYMOUS`, Kafka's ``User:ANONYMOUS``. ACLs, ``super.users``
and the audit log all name principals in this form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from laketail.errors import InvalidRequest

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """An authenticated identity; immutable and hashable (used as a cache key)."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: Any) -> KafkaPrincipal:
        """``"User:alice"`` -> ``KafkaPrincipal("User", "alice")``; the name may hold
        colons (``User:CN=a,O=b`` keeps everything after the first one). The wildcard
        principal ``User:*`` parses like any other."""
        if not isinstance(text, str) or ":" not in text:
            raise InvalidRequest(f"a principal is written <type>:<name>, e.g. User:alice; got {text!r}")
        kind, _, name = text.partition(":")
        if not kind or not name:
            raise InvalidRequest(f"a principal is written <type>:<name>, e.g. User:alice; got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
#: A peer broker speaking for itself, authenticated by the cluster secret on the
#: inter-broker listener. Its type is not ``User``, so no SCRAM user, token subject or
#: certificate mapping can produce it; the authorizer counts it among the super users,
#: as Kafka clusters list their inter-broker principal in ``super.users``.
BROKER = KafkaPrincipal("Broker", "laketail")
