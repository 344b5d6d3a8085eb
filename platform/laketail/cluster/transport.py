"""How a broker reaches its peers: the cluster's one seam to the network.

Brokers call each other three ways: an httpx client for the control calls (heartbeats,
metadata pushes, ISR changes, whatever is passed on to the controller), a
:class:`~laketail.cluster.wire.PeerLink` per leader for replica fetches, and a
:class:`~laketail.cluster.wire.PeerPool` per leader for forwarded produce and fetch.
A :class:`PeerTransport` makes all three, so the :class:`~laketail.cluster.node.ClusterNode`
never opens a socket itself: :class:`NetworkTransport` (the default) speaks HTTP to each
peer's inter-broker listener, and a test hands in one that delivers to brokers in the same
process, the way httpx takes a ``MockTransport`` (``tests/cluster/harness.py``).

Failure contract, which the node's callers rely on: a link or pool raises
:class:`~laketail.cluster.wire.PeerUnreached` when nothing was sent, an ``OSError`` or
``TimeoutError`` when the request went out and no answer came; the httpx client raises
``httpx.ConnectError`` and ``httpx.TransportError`` likewise. Event loop thread only.
"""

from __future__ import annotations

import ssl
from typing import Any, Mapping, Protocol

import httpx

from laketail.cluster.wire import PeerLink, PeerPool, PeerResponse


class Link(Protocol):
    """One request at a time to one peer (replica fetches): :class:`PeerLink`'s surface."""

    url: str

    async def post_json(self, path: str, payload: dict, timeout_s: float) -> bytes: ...

    def close(self) -> None: ...


class Pool(Protocol):
    """Concurrent requests to one peer (forwarded produce and fetch): :class:`PeerPool`'s surface."""

    url: str

    async def request(self, method: str, path: str, **kwargs: Any) -> PeerResponse: ...

    def close(self) -> None: ...


class PeerTransport(Protocol):
    """Makes the node's clients to its peers (module docstring)."""

    def http_client(self) -> httpx.AsyncClient:
        """The client for control calls; the node closes it."""
        ...

    def link(self, url: str) -> Link: ...

    def pool(self, url: str) -> Pool: ...


class NetworkTransport:
    """Peers over the network: each call shows the cluster secret (``headers``) and, when
    TLS is configured, checks the peer against the cluster's CA (``ssl_context``)."""

    def __init__(self, headers: Mapping[str, str], ssl_context: ssl.SSLContext | None = None) -> None:
        self.headers = dict(headers)
        self.ssl_context = ssl_context

    def http_client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        return httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=2.0), limits=limits,
                                 headers=self.headers, verify=self.ssl_context or True)

    def link(self, url: str) -> PeerLink:
        return PeerLink(url, headers=self.headers, ssl_context=self.ssl_context)

    def pool(self, url: str) -> PeerPool:
        return PeerPool(url, headers=self.headers, ssl_context=self.ssl_context)
