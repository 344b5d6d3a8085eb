"""What one broker shows another on the inter-broker listener.

Every request a broker sends a peer (heartbeats, metadata pushes, replica fetches,
forwarded produce and fetch, coordinator calls) carries the cluster secret
(``laketail.inter.broker.secret``) in :data:`SECRET_HEADER`; the receiving listener
(:mod:`laketail.api.authentication`) compares it in constant time. A request forwarded
on a client's behalf also names that client's principal and address, which the peer
believes only because the secret came with them. Send it over TLS (an ``SSL``
inter-broker listener) wherever the network between brokers is not private.
"""

from __future__ import annotations

from laketail.security.principal import KafkaPrincipal

SECRET_HEADER = "x-laketail-inter-broker-secret"
PRINCIPAL_HEADER = "x-laketail-principal"
CLIENT_HOST_HEADER = "x-laketail-client-host"


def peer_headers(secret: str, principal: KafkaPrincipal | None = None,
                 client_host: str | None = None) -> dict[str, str]:
    """The headers of a request to a peer: the secret, and whom it speaks for."""
    out = {SECRET_HEADER: secret} if secret else {}
    if principal is not None:
        out[PRINCIPAL_HEADER] = str(principal)
    if client_host:
        out[CLIENT_HOST_HEADER] = client_host
    return out
