"""Test-only: act as a principal before authentication exists in the gateway.

:class:`PrincipalFromTestHeader` is an ASGI middleware that exists only in the tests
folder: it sets ``scope["state"]["principal"]`` (what the product's authentication
sets) from the ``x-test-principal`` header. The product has no such mechanism; these
tests add it to an app they build themselves, in-process (:func:`authz_gateway`).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
from api_inprocess import InProcess
from starlette.types import ASGIApp, Receive, Scope, Send

from laketail.api import create_app
from laketail.config import BrokerSettings
from laketail.security.acl import AclBinding
from laketail.security.principal import KafkaPrincipal

TEST_HEADER = b"x-test-principal"
AUTHORIZER = "laketail.security.authorizer.AclAuthorizer"
ADMIN = "User:admin"


class PrincipalFromTestHeader:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == TEST_HEADER:
                    scope.setdefault("state", {})["principal"] = KafkaPrincipal.parse(value.decode())
        await self.app(scope, receive, send)


class AuthzGateway(InProcess):
    """An in-process gateway with authorization on; ``as_(principal)`` sends as someone."""

    def as_(self, principal: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        headers[TEST_HEADER.decode()] = principal
        return self.request(method, url, headers=headers, **kwargs)

    def admin(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.as_(ADMIN, method, url, **kwargs)

    def grant(self, *bindings: AclBinding) -> None:
        authorizer = self.app.state.authorizer
        self.run(authorizer.create(list(bindings), KafkaPrincipal.parse(ADMIN), "test"))

    @property
    def cluster_id(self) -> str:
        return self.broker.cluster_id


def allow(principal: str, operation: str, resource_type: str, name: str = "kafka-cluster",
          pattern: str = "LITERAL", host: str = "*") -> AclBinding:
    return AclBinding.of(resource_type, name, pattern, principal, host, operation, "ALLOW")


def deny(principal: str, operation: str, resource_type: str, name: str = "kafka-cluster",
         pattern: str = "LITERAL", host: str = "*") -> AclBinding:
    return AclBinding.of(resource_type, name, pattern, principal, host, operation, "DENY")


@contextmanager
def authz_gateway(data: Path, **settings: Any) -> Iterator[AuthzGateway]:
    """A started gateway on ``data`` with ACLs on, ``User:admin`` a super user, and the
    test-only principal header; closed when the block ends."""
    settings = {"authorizer_class_name": AUTHORIZER, "super_users": ADMIN, "tier_enabled": False,
                "maintenance_enabled": False, **settings}
    app = create_app(BrokerSettings(data=str(data), **settings))
    app.add_middleware(PrincipalFromTestHeader)  # outermost: the principal is set before authorization
    client = AuthzGateway(app)
    try:
        yield client
    finally:
        client.close()
