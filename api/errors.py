"""The gateway's error boundary: every failure leaves as ``{"error_code", "message"}``.

Routes never build error responses. They raise :class:`~laketail.errors.LaketailError`
subclasses (or let the broker raise them), and :func:`install` registers the handlers
that turn them into a response with the error's HTTP status and Confluent-style body.
What is not a laketail error yet is translated here, once:

* FastAPI request validation (bad query parameter, broken or incomplete admin body)
  -> INVALID_REQUEST 400/40002;
* Starlette's own HTTP errors (no such route 404, wrong method 405), and a path
  parameter the route cannot take (``/partitions/foo``: 404) -> Jersey's answer
  in Confluent's REST Proxy: ``{"error_code": 404, "message": "HTTP 404 Not Found"}``;
  but the 400 FastAPI raises when it cannot read a model's body is answered by what
  caused it: a laketail error as itself, a ``RecursionError`` (JSON nested deeper than
  ``json.loads`` goes) as INVALID_REQUEST 400/40002;
* a query that names a parameter twice -> INVALID_REQUEST 400/40002 (:class:`OneValuePerName`);
* a client that disconnects while its body is read -> nothing worth logging;
* anything unexpected -> UNKNOWN_SERVER_ERROR 500/50001 (logged with its traceback).
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from laketail.errors import InvalidRequest, LaketailError, RecordTooLarge

log = logging.getLogger(__name__)

ERROR_MEDIA_TYPE = "application/json"


class _HttpError(LaketailError):
    """A routing-level HTTP error (404 no such route, 405 method) as Confluent's REST
    Proxy (Jersey) answers it: ``error_code`` is the status, the message Jersey's."""

    kafka_name = "INVALID_REQUEST"

    def __init__(self, status: int, detail: str) -> None:
        self.http_status = status
        super().__init__(detail, rest_code=status)

    @property
    def message(self) -> str:
        return f"HTTP {self.http_status} {self.detail}"


def error_response(err: LaketailError, path: str = "") -> Response:
    """The one place a ``LaketailError`` becomes an HTTP response (``path`` picks the
    v3 code where Confluent's v3 differs from v2)."""
    body = err.to_body(v3=path.startswith("/v3/"))
    return Response(orjson.dumps(body), status_code=err.http_status, media_type=ERROR_MEDIA_TYPE)


def _count(request: Request, err: LaketailError) -> None:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.count_error(err)


async def _on_laketail_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LaketailError)
    _count(request, exc)
    return error_response(exc, request.url.path)


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if errors and all(e.get("loc", ("",))[0] == "path" for e in errors):
        # a path segment that is not what the route takes (``/partitions/foo``): the route
        # does not match, as in Confluent's proxy (Jersey answers an unconvertible
        # @PathParam with 404)
        err = _HttpError(404, "Not Found")
        _count(request, err)
        return error_response(err)
    return await _on_laketail_error(request, InvalidRequest(describe_validation(exc)))


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    cause = exc.__cause__  # FastAPI raises its "error parsing the body" 400 from the failure
    if isinstance(cause, LaketailError):
        return await _on_laketail_error(request, cause)
    if isinstance(cause, RecursionError):  # json.loads of a body nested past the interpreter's stack
        return await _on_laketail_error(request, InvalidRequest("request body nests JSON too deeply"))
    err = _HttpError(exc.status_code, str(exc.detail))
    _count(request, err)
    response = error_response(err)
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


async def _on_disconnect(request: Request, exc: Exception) -> Response:
    """The client went away while its body was being read: nobody will read an answer."""
    log.debug("client disconnected during %s %s", request.method, request.url.path)
    return Response(status_code=499)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error in %s %s", request.method, request.url.path)
    err = LaketailError(f"{type(exc).__name__}: {exc}")
    _count(request, err)
    return error_response(err)


def describe_validation(exc: RequestValidationError) -> str:
    """A one-line summary of FastAPI's validation errors (``query.offset: ...``)."""
    parts = []
    for item in exc.errors():
        where = ".".join(str(p) for p in item.get("loc", ()))
        if item.get("type") == "json_invalid":
            parts.append(f"request body is not valid JSON ({item.get('ctx', {}).get('error', '')})")
        else:
            parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


#: Set to True in the ASGI scope by a route that consumes its body as a stream of
#: separately bounded parts (v3's streaming produce): :class:`BodyLimit` stops counting.
STREAMED_BODY = "laketail.streamed_body"


class BodyLimit:
    """Pure ASGI middleware: refuse a body past ``socket.request.max.bytes``.

    A body with a Content-Length is refused from the header alone, before the route
    runs (nothing wraps ``receive``, so the common produce costs nothing more). A chunked
    body is counted as the route reads it, whoever reads it (FastAPI for a model body,
    :func:`laketail.api.deps.read_body`): past the bound, ``receive`` raises
    MESSAGE_TOO_LARGE (413/41301) and the route gets no more of it. A route that streams
    its body in bounded parts opts out by setting :data:`STREAMED_BODY` in the scope.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            chunked = False
            for name, value in scope["headers"]:
                if name == b"content-length":
                    try:
                        length = int(value)
                    except ValueError:
                        length = 0
                    if length > self.max_bytes:
                        err = RecordTooLarge(
                            f"request body of {length} bytes is above "
                            f"socket.request.max.bytes={self.max_bytes}"
                        )
                        await error_response(err)(scope, receive, send)
                        return
                    break
                if name == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
            if chunked:
                receive = self._counted(scope, receive)
        await self.app(scope, receive, send)

    def _counted(self, scope: Scope, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request" and not scope.get(STREAMED_BODY):
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise RecordTooLarge(f"request body is above socket.request.max.bytes={self.max_bytes}")
            return message

        return counted


class OneValuePerName:
    """Pure ASGI middleware: INVALID_REQUEST (400/40002) for a query string that names a
    parameter more than once (``?offset=0&offset=7``). Starlette keeps the last value,
    Jersey (REST Proxy) the first; which one the client meant is not guessed, for any
    route. A query without ``&`` costs one byte search; one without escapes is split
    without decoding."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query: bytes = scope.get("query_string", b"")
            if b"&" in query:
                if b"%" in query or b"+" in query:
                    names = [name for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True)]
                else:
                    names = [pair.partition(b"=")[0].decode("latin-1") for pair in query.split(b"&") if pair]
                twice = _repeated(names)
                if twice is not None:
                    err = InvalidRequest(f"query parameter {twice[:100]!r} is given more than once")
                    await error_response(err, scope.get("path", ""))(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _repeated(names: list[str]) -> str | None:
    """The first name that occurs twice (one pass: a query of 30,000 names costs no more
    than splitting it)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def install(app: FastAPI, max_body_bytes: int) -> None:
    """Register the handlers, the body bound and the one-value-per-name query rule on ``app``."""
    app.add_exception_handler(LaketailError, _on_laketail_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(ClientDisconnect, _on_disconnect)
    app.add_exception_handler(Exception, _on_unexpected)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(OneValuePerName)
