"""Slow and idle clients cannot hold the broker's connections: read deadlines and a
connection limit, enforced in uvicorn's HTTP protocol.

uvicorn closes a keep-alive connection idle between requests (``timeout_keep_alive``)
but waits forever for a request that has begun: a client that sends half a request
line, or half a body, and stalls holds a socket and a file handle for good, and a few
thousand of them exhaust the broker's descriptors. :class:`GuardedHttpProtocol` is
uvicorn's httptools protocol with three rules on top:

* ``laketail.request.header.timeout.ms`` -- a request's line and headers must be
  complete within this long of the connection opening or of the request's first
  byte; else the connection is closed.
* ``laketail.request.body.timeout.ms`` -- while a body is incomplete, the client must
  send a byte at least this often; else the connection is closed. Time during which
  the broker itself stopped reading (flow control: the app has not consumed what
  came) does not count against the client.
* ``max.connections`` (Kafka's key) -- a connection accepted while this many are open
  is closed at once.
* ``max.connections.per.ip`` and ``max.connections.per.ip.overrides`` (Kafka's keys) --
  a connection from an address that already holds its quota is closed at once, so one
  client cannot take the connections a legitimate one needs (:class:`ConnectionQuota`,
  one per broker process, over all its listeners).
* ``laketail.request.line.max.bytes`` and ``laketail.request.header.max.bytes`` -- a
  request line past the first is answered 414, a head (line and header fields) past the
  second 431, as soon as that many bytes came and before the rest is read: a client
  that has not authenticated yet cannot make the broker buffer an unbounded header.

With request processes, a client listener's protocol also keeps the processes'
connection counts even (:class:`laketail.request_processes.ConnectionBoard`): a process
holding more than its share answers one request with ``Connection: close``.

:func:`guarded_protocol` binds the three values from the broker's settings into a
subclass that ``uvicorn.Config(http=...)`` takes. Thread-safety: each protocol object
lives on the event loop thread, like uvicorn's own.

On a TLS listener it also passes on the client certificate uvicorn does not: the
verified peer certificate's subject (RFC 2253) goes into each request's
``scope["extensions"]["tls"]["client_cert_name"]`` (the ASGI TLS extension's key),
where authentication (:mod:`laketail.api.authentication`) maps it to a principal. And it
sends each answer's head and body as one TLS write (:class:`OneWritePerAnswer`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from laketail.config import BrokerSettings
    from laketail.request_processes import ConnectionBoard

log = logging.getLogger("laketail.api.connections")

#: When the broker stops, how long a TLS connection may take to close cleanly (the
#: client's ``close_notify``) before it is cut.
TLS_CLOSE_GRACE_S = 1.0


class ConnectionQuota:
    """Open connections by client address, against ``max.connections.per.ip`` and its
    overrides (Kafka's ``ConnectionQuotas``). Event-loop thread only."""

    def __init__(self, default: int, overrides: dict[str, int] | None = None) -> None:
        self.default = default
        self.overrides = dict(overrides or {})
        self.open: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: "BrokerSettings") -> "ConnectionQuota":
        return cls(settings.max_connections_per_ip, parse_overrides(settings.max_connections_per_ip_overrides))

    def limit(self, host: str) -> int:
        return self.overrides.get(host, self.default)

    def acquire(self, host: str) -> bool:
        """Count a new connection from ``host``; False (not counted) past its quota."""
        held = self.open.get(host, 0)
        if held >= self.limit(host):
            return False
        self.open[host] = held + 1
        return True

    def release(self, host: str) -> None:
        held = self.open.get(host, 0) - 1
        if held > 0:
            self.open[host] = held
        else:
            self.open.pop(host, None)


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs separated by commas (an
    IPv6 address in brackets, ``[::1]:50``), as Kafka writes them."""
    from laketail.errors import InvalidConfig

    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host or not count.strip().isdigit():
            raise InvalidConfig(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        out[host] = int(count)
    return out


def _refusal(status: int, reason: bytes, message: str) -> bytes:
    """A whole answer written before any request reached the app (and the connection closes)."""
    body = json.dumps({"error_code": status, "message": message}).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, reason, len(body))) + body


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with read deadlines and connection limits."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000
    request_line_max_bytes: int = 8192
    request_header_max_bytes: int = 8192
    #: ``max.connections.per.ip``: shared by every listener of the broker process
    quota: ConnectionQuota | None = None

    #: request-process mode, client listeners: the processes' connection counts
    board: "ConnectionBoard | None" = None

    _read_timer: asyncio.TimerHandle | None = None
    _tls: dict | None = None  # the ASGI TLS extension of this connection (TLS listeners only)
    _counted = False  # on the board
    _lost = False  # connection_lost has run
    _rebalancing = False  # this connection's last response said Connection: close for the board
    _quota_host: str | None = None  # counted on the quota under this address
    _head_bytes: int | None = 0  # bytes of the request head read so far; None while in a body
    _refused = False  # answered 414/431 and closing: nothing more is parsed
    _heads_read = 0  # request heads and requests completed on this connection

    # -- the connection --------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("refusing a connection from %s: max.connections=%d are open",
                        self._peer(), self.max_connections)
            transport.close()
            return
        if self.quota is not None and self.client:
            host = self.client[0]
            if not self.quota.acquire(host):
                log.warning("refusing a connection from %s: max.connections.per.ip=%d are open from it",
                            self._peer(), self.quota.limit(host))
                transport.close()
                return
            self._quota_host = host
        if self.board is not None:
            self.board.opened()
            self._counted = True
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            from laketail.security.ssl_principal import subject_name

            self.transport = OneWritePerAnswer(transport, self.loop)  # type: ignore[assignment]

            cert = ssl_object.getpeercert() or {}  # {} unless the certificate was verified
            subject = cert.get("subject")
            self._tls = {"client_cert_name": subject_name(subject) if subject else None,
                         "tls_version": ssl_object.version()}
        self._arm(self.header_timeout_s, "its request line and headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._disarm()
        if self._quota_host is not None and self.quota is not None:
            self.quota.release(self._quota_host)
            self._quota_host = None
        if self._counted and self.board is not None:
            self._counted = False
            self.board.closed(self._rebalancing)
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """The server is stopping: an idle connection is closed, a busy one after its
        answer (uvicorn's rule). A TLS close waits for the client's ``close_notify``,
        which an idle client that is not reading never sends, and uvloop waits 30 s for
        it: the stopping broker waited that long. After :data:`TLS_CLOSE_GRACE_S` a TLS
        connection whose answer is complete is cut instead."""
        super().shutdown()
        if self._tls is not None:
            self.loop.call_later(TLS_CLOSE_GRACE_S, self._cut_when_idle)

    def _cut_when_idle(self) -> None:
        if self._lost:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.loop.call_later(TLS_CLOSE_GRACE_S, self._cut_when_idle)  # its answer is still being written
            return
        self.transport.abort()

    # -- the request head's size -----------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        heads = self._heads_read
        super().data_received(data)
        if self._head_bytes is None or self._heads_read != heads:
            # In a body (socket.request.max.bytes bounds it), or a head or a request ended
            # in this chunk: what follows it in the chunk is not counted, so a next head
            # may read one chunk more than the limit before it is refused.
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.request_header_max_bytes:
            self._refuse(431, b"Request Header Fields Too Large",
                         f"the request's line and header fields exceed {self.request_header_max_bytes} bytes "
                         "(laketail.request.header.max.bytes)")

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.request_line_max_bytes:
            self._refuse(414, b"URI Too Long", f"the request target exceeds {self.request_line_max_bytes} bytes "
                                               "(laketail.request.line.max.bytes)")

    def _refuse(self, status: int, reason: bytes, message: str) -> None:
        if self._refused:
            return
        self._refused = True
        log.info("closing the connection from %s: %s", self._peer(), message)
        self.transport.write(_refusal(status, reason, message))
        self.transport.close()

    # -- parser callbacks: where a request stands ------------------------------------

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        if self._tls is not None:
            self.scope["extensions"] = {"tls": self._tls}
        if self._read_timer is None:
            self._arm(self.header_timeout_s, "its request line and headers")

    def on_headers_complete(self) -> None:
        if self._refused:
            return  # a refused head reaches no app
        self._head_bytes = None
        self._heads_read += 1
        super().on_headers_complete()
        self._arm(self.body_timeout_s, "a byte of its body")
        board = self.board
        if board is not None and self.cycle.keep_alive and board.over_share():
            # This process holds more than its share of the connections: this answer
            # closes one, and the client's next connection lands where the kernel puts it.
            self.cycle.keep_alive = False
            board.closing = self._rebalancing = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._refused:
            super().on_header(name, value)

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        super().on_body(body)
        self._arm(self.body_timeout_s, "a byte of its body")

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        self._disarm()
        self._head_bytes = 0  # the next request's head starts
        self._heads_read += 1

    # -- the deadline ----------------------------------------------------------------

    def _arm(self, timeout_s: float, waiting_for: str) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(timeout_s, self._timed_out, timeout_s, waiting_for)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self, timeout_s: float, waiting_for: str) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self.flow is not None and self.flow.read_paused:
            self._arm(timeout_s, waiting_for)  # the broker stopped reading, not the client
            return
        log.info("closing the connection from %s: it sent no %s within %d ms",
                 self._peer(), waiting_for, int(timeout_s * 1000))
        self.transport.close()

    def _peer(self) -> str:
        client = getattr(self, "client", None)
        return "%s:%d" % client if client else "?"


class OneWritePerAnswer:
    """A TLS connection's transport that sends an answer's head with its body.

    uvicorn writes a response's status line and headers in one ``write`` and its body in
    the next. Over TLS each ``write`` is a TLS record of its own and a socket write of its
    own, and the client decrypts two records for one small answer. This holds a head
    back until the next write, which it joins (small bodies: one record) or sends with
    it in one ``writelines`` (one socket write); a head that nothing follows in the same
    loop iteration (a streamed answer still waiting for its first chunk, ``100
    Continue``) goes out alone on the next one. Order is kept: a held head always goes
    before anything written after it. Everything else is the wrapped transport's.
    Event-loop thread only."""

    __slots__ = ("_transport", "_loop", "_held")

    #: Bodies up to this size are joined to their head (one TLS record holds 16 KiB).
    JOIN_UP_TO = 16_000

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= self.JOIN_UP_TO:
                self._transport.write(held + bytes(data))
            else:
                self._transport.writelines([held, data])
        elif type(data) is bytes and data.endswith(b"\r\n\r\n") and data.startswith(b"HTTP/1.1 "):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def writelines(self, chunks) -> None:
        self.flush()
        self._transport.writelines(chunks)

    def flush(self) -> None:
        """Send a held head now."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None  # an aborted connection sends nothing more
        self._transport.abort()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


def guarded_protocol(settings: "BrokerSettings", board: "ConnectionBoard | None" = None,
                     quota: ConnectionQuota | None = None) -> type[GuardedHttpProtocol]:
    """:class:`GuardedHttpProtocol` with the broker's timeouts and connection limits (and,
    on the client listeners of request processes, their connection board). ``quota`` is
    the broker's one :class:`ConnectionQuota`, shared by its listeners. A connection
    that sends nothing is closed after the header timeout or ``connections.max.idle.ms``,
    whichever is shorter."""
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,), {
        "header_timeout_s": min(settings.request_header_timeout_ms, settings.connections_max_idle_ms) / 1000.0,
        "body_timeout_s": settings.request_body_timeout_ms / 1000.0,
        "max_connections": settings.max_connections,
        "request_line_max_bytes": settings.request_line_max_bytes,
        "request_header_max_bytes": settings.request_header_max_bytes,
        "quota": quota if quota is not None else ConnectionQuota.from_settings(settings),
        "board": board,
    })
