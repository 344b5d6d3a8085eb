"""Coordinator requests go to the controller (multi-broker clusters only).

In a cluster, the group and transaction coordinators that answer clients run on the
controller broker (they read and write ``__consumer_offsets`` and
``__transaction_state`` through whichever brokers lead those partitions). A request
for a coordinator that reaches another broker is proxied to the controller, whole:
method, path, query, headers and body, and the controller's answer is returned as is
(so a v2 consumer instance's ``base_uri`` names the controller, where it lives, as a
Confluent REST Proxy instance's names the proxy that holds it). A controller that could
not be reached is NOT_CONTROLLER; one that got the request and never answered is
REQUEST_TIMED_OUT (it may have acted on it: a transactional produce may be written).

Coordinator requests: the group protocol and commits (``/v1/groups``), transactions,
producer ids and Spark sink batches (``/v1/transactions``, ``/v1/producers``,
``/v1/sinks``), v2 consumer instances (``/consumers``), v3 consumer groups and lag, and
the console's groups and transactions (``/v1/console/groups``, ``/v1/console/transactions``),
idempotent or transactional produce (a producer in the query, parsed as the route parses
it), whose epochs the
transaction coordinator checks. Everything else is answered locally. A pure ASGI
middleware, so the hot paths pay one prefix check.

On the controller (or a lone broker) the coordinators answer only once they have loaded
their internal partitions to the high watermark: until then every coordinator request is
answered 503 COORDINATOR_LOAD_IN_PROGRESS, and on a broker that no longer runs them
NOT_COORDINATOR (:meth:`laketail.broker.Broker.check_coordinating`); clients retry.

The proxied request goes to the controller's inter-broker listener with the cluster
secret (the node's HTTP client sends it) and names the client it speaks for
(:func:`laketail.security.peers.peer_headers`: the principal authentication gave this
request, and the client's address), so the controller authorizes the original client.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from laketail.errors import LaketailError
from laketail.security.peers import peer_headers

if TYPE_CHECKING:
    from laketail.api.services import ClusterService
    from laketail.broker import Broker

log = logging.getLogger(__name__)

PREFIXES = ("/v1/groups", "/v1/transactions", "/v1/producers", "/v1/sinks", "/consumers",
            "/v1/console/groups", "/v1/console/transactions",
            # the schema registry runs beside the coordinators (laketail.schemas)
            "/subjects", "/schemas/", "/config", "/mode", "/compatibility/")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


def is_coordinator_request(path: str, query: bytes) -> bool:
    if path.startswith("/internal/"):
        return False  # between brokers: already where it has to be
    if path.startswith(PREFIXES):
        return True
    if path.startswith("/v3/clusters/") and "/consumer-groups" in path:
        return True
    return _names_producer(query)


def _names_producer(query: bytes) -> bool:
    """An idempotent or transactional produce, read as the route and authorization read it
    (:func:`laketail.api.deps.producer_params`: ``producer%5Fid`` is ``producer_id``); a
    spelling they refuse is answered here (INVALID_REQUEST), not proxied."""
    from laketail.api.deps import producer_params
    from laketail.errors import InvalidRequest

    try:
        return producer_params(query) is not None
    except InvalidRequest:
        return False


class CoordinatorProxy:
    def __init__(self, app: ASGIApp, broker: Broker, cluster: ClusterService) -> None:
        self.app = app
        self.broker = broker
        self.cluster = cluster

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self._elsewhere():  # the coordinators run here: they answer once loaded
            if self.broker.coordinators_loaded or not is_coordinator_request(scope["path"], scope["query_string"]):
                await self.app(scope, receive, send)
                return
            try:
                self.broker.check_coordinating()
            except LaketailError as exc:
                await _answer(send, exc.http_status, [(b"content-type", b"application/json")],
                              json.dumps(exc.to_body()).encode())
                return
            await self.app(scope, receive, send)
            return
        if not is_coordinator_request(scope["path"], scope["query_string"]):
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in _HOP_BY_HOP]
        principal = scope.get("state", {}).get("principal")
        client = scope.get("client")
        headers += list(peer_headers("", principal, client[0] if client else None).items())
        path = scope["path"] + (("?" + scope["query_string"].decode()) if scope["query_string"] else "")
        try:
            resp = await self.cluster.call_controller_raw(scope["method"], path, headers=headers, content=body)
        except LaketailError as exc:  # NOT_CONTROLLER (not sent) or REQUEST_TIMED_OUT (not answered)
            resp = None
            status, out_headers = exc.http_status, [(b"content-type", b"application/json")]
            content = json.dumps(exc.to_body()).encode()
        if resp is not None:
            status = resp.status_code
            content = resp.content
            out_headers = [
                (k.encode(), v.encode()) for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP
            ]
        await _answer(send, status, out_headers, content)

    def _elsewhere(self) -> bool:
        """Whether the coordinators run on another broker (the controller)."""
        node = self.cluster
        return not (node.is_controller or len(node.image.brokers) <= 1)


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> None:
    headers = headers + [(b"content-length", str(len(content)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
