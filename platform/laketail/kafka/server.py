"""The Kafka listener: an asyncio server in the broker's process, on its event loop.

:class:`KafkaListener` accepts connections on one ``laketail.kafka.listener.names``
listener and answers each connection's requests in order, one at a time, as Kafka's
broker does (a client pipelines; answers keep the request order). Every request goes
to :class:`~laketail.kafka.apis.KafkaApis` over the broker the HTTP gateway serves.

A connection is closed, and only that connection, when:

* the size prefix is below 8 bytes or above ``socket.request.max.bytes`` (nothing
  more is read: a client that lies about a huge size costs 4 bytes);
* a frame does not decode (:class:`~laketail.kafka.protocol.CloseConnection`: unknown
  API key, unsupported version, malformed header or body, trailing bytes);
* no request starts within ``laketail.kafka.connections.max.idle.ms`` (Kafka's
  ``connections.max.idle.ms`` and default, 10 minutes), or a started frame is not
  complete within ``laketail.request.body.timeout.ms`` (a slow or half-open client);
* on a ``SASL_*`` listener, a request other than ApiVersions, SaslHandshake and
  SaslAuthenticate arrives before authentication (or re-authentication, KIP-368), a
  request other than SaslHandshake arrives after the session's end
  (``connections.max.reauth.ms``, or an OAUTHBEARER token's expiry), or authentication fails (answered
  first, except after SaslHandshake v0, whose raw tokens have no error frame); on
  ``SSL``/``SASL_SSL``, the TLS handshake fails or a client certificate's
  subject matches no ``ssl.principal.mapping.rules`` rule
  (:mod:`laketail.kafka.security`, :mod:`laketail.kafka.sasl`).

:func:`serve_with_kafka` is the one hook ``laketail serve`` calls: it runs the HTTP
servers and, once the primary one has started the broker, the Kafka listeners beside
them; they close before the broker does.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Sequence

from laketail.errors import SaslAuthenticationFailed
from laketail.kafka.apis import KafkaApis, Session
from laketail.kafka.fetch_session import FetchSessionCache
from laketail.kafka.protocol import CloseConnection, build, decode_request, encode_response
from laketail.kafka.sasl import SASL_HANDSHAKE
from laketail.kafka.security import ListenerSecurity
from laketail.security.principal import ANONYMOUS

if TYPE_CHECKING:
    from laketail.config import BrokerSettings
    from laketail.security.listeners import Listener

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")


class PrimaryServer(Protocol):
    """What :func:`serve_with_kafka` needs of the primary HTTP server
    (``laketail.api.listeners.ListenerServer``; the engine never imports the api)."""

    started: bool
    on_exit: list[Callable[[], None]]

    def handle_exit(self, sig: int, frame: Any) -> None: ...


class KafkaListener:
    """One Kafka-protocol listener (see the module docstring). Event loop thread only."""

    def __init__(self, listener: "Listener", apis: KafkaApis, settings: "BrokerSettings",
                 security: ListenerSecurity | None = None) -> None:
        self.listener = listener
        self.apis = apis
        self.security = security or ListenerSecurity(listener, settings, None)
        self.max_request_bytes = settings.socket_request_max_bytes
        self.idle_s = settings.kafka_connections_max_idle_ms / 1000
        self.frame_s = settings.request_body_timeout_ms / 1000
        #: request processes all accept on the port, as on the HTTP one (laketail.kafka.siblings)
        self.shared_port = settings.request_processes > 1
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        tls = self.security.ssl_context()
        self.server = await asyncio.start_server(self._serve_connection, self.listener.host, self.listener.port,
                                                 reuse_address=True, reuse_port=self.shared_port or None, ssl=tls,
                                                 ssl_handshake_timeout=self.frame_s if tls else None)

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.connections):
            task.cancel()
        if self.connections:
            await asyncio.gather(*self.connections, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        peer = writer.get_extra_info("peername")
        session = Session(ANONYMOUS, peer[0] if peer else "*")
        try:
            gate = self.security.open(session, writer.get_extra_info("ssl_object"))
            await self._requests(reader, writer, session, gate)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass  # the client went away or stalled: only its connection ends
        except asyncio.CancelledError:
            pass  # the listener is closing; asyncio's stream callback would print a cancelled task
        except CloseConnection as exc:
            log.info("closing Kafka connection from %s: %s", session.host, exc)
        except Exception:  # a bug answering one request ends its connection, never the listener
            log.exception("closing Kafka connection from %s after an unexpected error", session.host)
        finally:
            self.connections.discard(task)
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session: Session,
                        gate: Any) -> None:
        while True:
            head = await asyncio.wait_for(reader.readexactly(4), self.idle_s)
            (size,) = _SIZE.unpack(head)
            raw = gate is not None and gate.raw and not gate.authenticated  # SaslHandshake v0: raw tokens
            if size < (0 if raw else 8) or size > self.max_request_bytes:
                raise CloseConnection(f"a request of {size} bytes (socket.request.max.bytes="
                                      f"{self.max_request_bytes})")
            frame = await asyncio.wait_for(reader.readexactly(size), self.frame_s)
            if raw:
                await self._raw_sasl_token(gate, frame, writer)
                continue
            request = decode_request(frame)
            if gate is not None and gate.authenticated:  # KIP-368: a session ends unless renewed
                if request.api_key == SASL_HANDSHAKE and gate.expires_at is not None:  # a session that ends
                    gate.reauthenticate()
                elif gate.expired():
                    raise CloseConnection("the SASL session expired without re-authentication "
                                          "(connections.max.reauth.ms or the token's expiry)")
            if gate is not None and not gate.authenticated:  # SASL: nothing but the exchange until it succeeds
                answer = await gate.answer(request)
                if answer.data is not None:
                    if answer.close:  # a failed exchange: Kafka's delayed answer, then the close
                        await self.security.before_failure_answer()
                    writer.write(encode_response(request, build(request.response_type, answer.data)))
                    await writer.drain()
                    if answer.close:
                        raise CloseConnection("SASL authentication failed")
                    continue
            answer = await self.apis.answer(request, session)
            if answer is not None:
                writer.write(answer)
                await writer.drain()


    async def _raw_sasl_token(self, gate: Any, token: bytes, writer: asyncio.StreamWriter) -> None:
        """One raw SASL token after SaslHandshake v0, answered by the server's raw token;
        a failure closes the connection unanswered (v0 has no error frame), after
        Kafka's failed-authentication delay."""
        try:
            reply = await gate.raw_token(token)
        except SaslAuthenticationFailed:
            await self.security.before_failure_answer()
            raise CloseConnection("SASL authentication failed") from None
        writer.write(_SIZE.pack(len(reply)) + reply)
        await writer.drain()


def kafka_listeners(app: Any, settings: "BrokerSettings") -> list[KafkaListener]:
    """The Kafka listeners of ``settings`` over the app's broker and authorizer (built
    once the broker has started: its cluster id and groups are ready)."""
    from laketail.security.authenticator import Authenticator
    from laketail.security.listeners import listener_plan

    out = []
    authenticator = None
    sessions = FetchSessionCache(settings.max_incremental_fetch_session_cache_slots)  # one per broker, as Kafka's
    for lst in listener_plan(settings).kafka:
        host, _, port = lst.advertised_url.removeprefix("kafka://").rpartition(":")
        apis = KafkaApis(app.state.broker, app.state.authorizer, (host.strip("[]"), int(port)), lst.name,
                         sessions)
        if (lst.sasl or lst.tls) and authenticator is None:
            authenticator = Authenticator(settings)  # one credential snapshot for every Kafka listener
        out.append(KafkaListener(lst, apis, settings, ListenerSecurity(lst, settings, authenticator)))
    # what a sibling request process passes on is answered by the listener of the same name
    app.state.kafka_apis = {lst.listener.name: lst.apis for lst in out}
    return out


async def serve_with_kafka(run_http: Awaitable[bool], servers: Sequence[PrimaryServer], app: Any,
                           settings: "BrokerSettings") -> bool:
    """Run the HTTP servers (``run_http``, :func:`laketail.api.listeners.run_servers`)
    and the Kafka listeners beside them; whether the primary HTTP server started."""
    primary = asyncio.ensure_future(run_http)
    while not servers[0].started and not primary.done():
        await asyncio.sleep(0.02)  # the lifespan starts the broker before any socket is bound
    listeners: list[KafkaListener] = []
    if servers[0].started:
        listeners = kafka_listeners(app, settings)
        loop = asyncio.get_running_loop()
        closing: list[asyncio.Task] = []

        def stop_kafka() -> None:  # on SIGINT/SIGTERM, before the broker closes
            loop.call_soon_threadsafe(lambda: closing.extend(
                [loop.create_task(lst.close()) for lst in listeners]))

        servers[0].on_exit.append(stop_kafka)
        try:
            for lst in listeners:
                await lst.start()
                log.info("Kafka listener %s on %s:%d (advertised %s)", lst.listener.name, lst.listener.host,
                         lst.port, lst.listener.advertised_url)
        except OSError as exc:
            log.error("cannot listen for Kafka clients on %s:%d: %s", lst.listener.host, lst.listener.port,
                      exc.strerror)
            servers[0].handle_exit(15, None)
    try:
        return await primary
    finally:
        await asyncio.gather(*(lst.close() for lst in listeners), return_exceptions=True)
