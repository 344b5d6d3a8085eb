"""Who sent a request, as the gateway's routes see it.

Authentication (the listener's middleware) stores the principal on
``request.state.principal``; routes and the authorizer read it through
:func:`principal_of` so that an unauthenticated listener needs no middleware at all.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

from laketail.security.principal import ANONYMOUS, KafkaPrincipal


def principal_of(request: HTTPConnection) -> KafkaPrincipal:
    """The request's principal; :data:`ANONYMOUS` when nothing authenticated it."""
    principal = getattr(request.state, "principal", None)
    return principal if isinstance(principal, KafkaPrincipal) else ANONYMOUS


def host_of(request: HTTPConnection) -> str:
    """The client's address, as Kafka's ACLs match hosts (``*`` matches any)."""
    client = request.client
    return client.host if client is not None else "*"
