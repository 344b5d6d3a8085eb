"""An HTTP proxy in front of the S3 server that a test can turn into an outage.

moto keeps its buckets in memory, so stopping and restarting it would lose the data an
outage test needs to find again. This proxy sits between the brokers and moto instead
(brokers get its address as ``AWS_ENDPOINT_URL``; the test reads the bucket directly)
and answers every request according to its :attr:`FaultProxy.mode`:

* ``"pass"`` -- forwarded to the S3 server;
* ``"down"`` -- the connection is closed without an answer (the store unreachable);
* ``"slowdown"`` -- ``503 SlowDown``, S3's throttling answer;
* ``"expired"`` -- ``403 ExpiredToken``, S3's answer to expired credentials.

:meth:`FaultProxy.hold` stalls the requests whose path matches a pattern until
:meth:`FaultProxy.release` (forwarded first, or not at all), so a test can kill a broker
with an upload or a commit in flight. It counts requests per method (``requests``) and
per S3 operation as S3 bills them (``operations``, :func:`s3_operation`), which benchmark
13 prices.
"""

from __future__ import annotations

import http.client
import re
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import parse_qs, urlsplit

Mode = Literal["pass", "down", "slowdown", "expired"]

_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "expired": (403, "ExpiredToken", "The provided token has expired."),
}
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


def s3_operation(method: str, path: str, copy_source: bool = False) -> str:
    """What a path-style S3 request is billed as: ``LIST`` (a GET of the bucket itself,
    ListObjects), ``COPY`` (a PUT with ``x-amz-copy-source``), else its method (``PUT``,
    ``POST`` for multipart uploads, ``GET``, ``HEAD``, ``DELETE``)."""
    parts = urlsplit(path)
    if method == "GET" and ("list-type" in parse_qs(parts.query) or "/" not in parts.path.strip("/")):
        return "LIST"
    if method == "PUT" and copy_source:
        return "COPY"
    return method


class FaultProxy:
    """The proxy (started on a free port of 127.0.0.1 by :meth:`start`)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.mode: Mode = "pass"
        self.requests: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()
        self.held: list[str] = []  # paths of the requests stalled so far
        self._hold: tuple[re.Pattern, bool] | None = None
        self._released = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

            def _handle(self) -> None:
                proxy._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client gone (a broker stopped)
                    super().handle_error(request, client_address)  # type: ignore[arg-type]

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def hold(self, path_pattern: str, *, forward_first: bool) -> None:
        """Stall requests whose path matches ``path_pattern`` (after forwarding them when
        ``forward_first``: the store did the work, its answer is what is held back)."""
        self._released.clear()
        self._hold = (re.compile(path_pattern), forward_first)

    def release(self) -> None:
        self._hold = None
        self._released.set()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        method = handler.command
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        self.requests[method] += 1
        self.operations[s3_operation(method, handler.path, "x-amz-copy-source" in handler.headers)] += 1
        mode = self.mode
        if mode == "down":
            handler.close_connection = True
            handler.connection.close()
            return
        if mode in _ERRORS:
            status, code, message = _ERRORS[mode]
            self._answer(handler, status, {"Content-Type": "application/xml"},
                         f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                         f"<Message>{message}</Message></Error>".encode())
            return
        hold = self._hold
        held = hold is not None and hold[0].search(handler.path) is not None
        if held and not hold[1]:  # type: ignore[index]
            self.held.append(handler.path)
            self._released.wait()
        status, headers, answer = self._forward(method, handler.path, dict(handler.headers.items()), body)
        if held and hold[1]:  # type: ignore[index]
            self.held.append(handler.path)
            self._released.wait()
        self._answer(handler, status, headers, answer, head=method == "HEAD")

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body or None,
                         headers={k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS})
            resp = conn.getresponse()
            answer = resp.read()
            return resp.status, {k: v for k, v in resp.getheaders() if k.lower() not in _HOP_HEADERS}, answer
        finally:
            conn.close()

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, headers: dict, body: bytes, head: bool = False) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            if key.lower() != "content-length":
                handler.send_header(key, value)
        length = headers.get("Content-Length") or headers.get("content-length") if head else None
        handler.send_header("Content-Length", str(length if length is not None else len(body)))
        handler.end_headers()
        if not head:
            handler.wfile.write(body)
