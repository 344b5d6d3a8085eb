"""The HTTP access log (``laketail serve --access-log``, off by default).

One line per request on the ``laketail.access`` logger, written when the response
ends (or the request fails without one)::

    GET /topics/orders/partitions/0/records?offset=42 200 3.1ms principal=-

method, path with its query, status (499 when the client left before any answer,
500 when the app raised), duration, and the request's principal: the
``laketail.principal`` key of the ASGI scope once authentication sets it, ``-``
until then. Everything taken from the request is escaped: control characters,
backslashes and non-ASCII characters become ``\\xNN`` / ``\\uNNNN``, so one request
is always one line and cannot forge another.

A pure ASGI middleware (no body wrapping): it only watches ``http.response.start``.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("laketail.access")

#: Where authentication leaves the request's principal (``User:alice``) in the scope.
PRINCIPAL_KEY = "laketail.principal"


def escape(text: str) -> str:
    """``text`` with every character outside printable ASCII (and ``\\``) escaped."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    text = text.replace("\\", "\\x5c")
    return text.encode("ascii", "backslashreplace").decode("ascii").translate(_CONTROLS)


_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}


def access_line(method: str, path: str, query: bytes, status: int, seconds: float, principal: str | None) -> str:
    """The logged line for one request (pure, for tests)."""
    target = path + ("?" + query.decode("latin-1") if query else "")
    return (f"{escape(method)} {escape(target)} {status} {seconds * 1000:.1f}ms "
            f"principal={escape(principal) if principal else '-'}")


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 499  # nobody answered: the client went away first

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except BaseException:
            status = 500 if status == 499 else status
            raise
        finally:
            log.info(access_line(scope["method"], scope["path"], scope.get("query_string", b""), status,
                                 time.perf_counter() - started, scope.get(PRINCIPAL_KEY)))
