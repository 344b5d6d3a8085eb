"""A direct dispatch for the produce and fetch routes, ahead of FastAPI's router.

FastAPI (0.16x) resolves a request by walking every included router, each of which
matches its routes again when it handles the request: for a fetch that is found in
the seventh router, about 30 route matches and a quarter of the request's CPU. The
produce and fetch endpoints take the bare ``Request`` and read their own parameters
(they declare no dependencies), so nothing FastAPI's router does for them is needed.
This middleware matches them first, with the very routes FastAPI registered (same
paths, same regexes, same endpoints; the OpenAPI document is unchanged) and calls the
endpoint; every other request goes on to FastAPI.

Errors go through the application's own exception handlers, so the answers are
exactly those FastAPI's ``ExceptionMiddleware`` would give.
"""

from __future__ import annotations

from typing import Callable, Iterable

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from laketail.api.routes import arrow, fetch, internal, produce

HOT_ENDPOINTS = {
    produce.produce_to_topic,
    produce.produce_to_partition,
    fetch.fetch_records,
    arrow.produce_arrow,
    arrow.produce_arrow_partition,
    arrow.fetch_arrow,
    internal.replica_fetch,  # a follower's fetch: hundreds a second under acks=all
    internal.append,  # a produce forwarded by a broker that does not lead the partition
    internal.records,  # a fetch forwarded likewise
}


class _HotRoute:
    def __init__(self, route: APIRoute) -> None:
        self.route = route
        self.methods = route.methods or set()
        self.regex = route.path_regex
        self.convertors = route.param_convertors
        self.endpoint: Callable = route.endpoint

    def match(self, method: str, path: str) -> dict | None:
        if method not in self.methods:
            return None
        found = self.regex.match(path)
        if found is None:
            return None
        return {name: self.convertors[name].convert(value) for name, value in found.groupdict().items()}


def hot_routes(routes: Iterable) -> list[_HotRoute]:
    """The produce and fetch routes among ``routes``, looking into included routers
    (the gateway includes its routers without a prefix, so their paths are the paths)."""
    found = []
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's record of an include_router
        if inner is not None:
            found.extend(hot_routes(inner.routes))
        elif isinstance(route, APIRoute) and route.endpoint in HOT_ENDPOINTS:
            found.append(_HotRoute(route))
    return found


class HotRoutes:
    def __init__(self, app: ASGIApp, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self._routes: list[_HotRoute] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self._routes is None:  # every router is included by the first request
                self._routes = hot_routes(self.fastapi_app.routes)
            method, path = scope["method"], scope["path"]
            for hot in self._routes:
                params = hot.match(method, path)
                if params is not None:
                    scope["path_params"] = params
                    scope["route"] = hot.route
                    await self._call(hot, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _call(self, hot: _HotRoute, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await hot.endpoint(request)
        except Exception as exc:  # the app's own exception handlers decide; the rest propagates as is
            handler = self._handler_for(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception):
        handlers = self.fastapi_app.exception_handlers
        for cls in type(exc).__mro__:
            if cls in handlers:
                return handlers[cls]
        return None
