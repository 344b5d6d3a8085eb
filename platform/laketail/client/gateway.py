"""The client's connection to laketail's HTTP gateway, and its one error boundary.

Role: send one request to a broker that answers and hand back the 2xx response.
Where it goes: the broker the caller names first (``broker=``, a partition's leader
from :class:`~laketail.client.metadata.Metadata`), then the server that answered
last, then ``bootstrap.servers``, then the other brokers metadata has named
(:meth:`Gateway.learn`). Any broker serves any request (a broker forwards a
partition's produce and fetch to its leader), so routing only saves a hop; a server
that cannot be reached is *unreachable* for a while -- ``reconnect.backoff.ms``,
doubling with each further failure up to ``reconnect.backoff.max.ms``, as librdkafka
backs off from a broker -- and is tried only after every other server.

Everything that can go wrong becomes a ``KafkaException`` here and nowhere else:

* an error body ``{"error_code", "message"}`` becomes the broker's own
  ``LaketailError`` (:func:`laketail.errors.from_body`), then its ``KafkaError``;
* a server that cannot be reached makes the gateway try the next one; when none
  answers, ``_TRANSPORT`` (retriable);
* a response that does not arrive within the request's timeout is ``_TIMED_OUT``
  (retriable; a produce retried after it may be written twice, as without
  idempotence in Kafka).

``on_error`` (the client's ``error_cb`` route) hears ``_ALL_BROKERS_DOWN`` once each
time every server stops answering, as librdkafka reports it. The ``transport``
argument is any httpx transport (``httpx.MockTransport``, a WSGI transport, ...) so
tests can plug one in. Thread-safe: httpx's client may be shared by threads, and the
server bookkeeping is under one lock.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import httpx
import orjson

from laketail.client.config import CommonConfig
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.security import ClientSecurity
from laketail.errors import from_body

ARROW_STREAM = "application/vnd.apache.arrow.stream"


class Gateway:
    """HTTP requests to a laketail cluster through its gateways."""

    def __init__(
        self,
        servers: tuple[str, ...],
        *,
        client_id: str = "rdkafka",
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        on_error: Callable[[KafkaError], None] | None = None,
        reconnect_backoff_ms: int = 100,
        reconnect_backoff_max_ms: int = 10_000,
        monotonic: Callable[[], float] = time.monotonic,
        security: ClientSecurity | None = None,
    ) -> None:
        self.servers = tuple(servers)
        self.on_error = on_error
        self._down = False
        self.timeout_s = timeout_s
        self.monotonic = monotonic
        self._http = httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            headers={"User-Agent": f"laketail-client ({client_id})"},
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            **(security.httpx_options() if security is not None else {}),  # TLS, SASL credentials
        )
        self.backoff_s = max(0.0, reconnect_backoff_ms / 1000.0)
        self.backoff_max_s = max(self.backoff_s, reconnect_backoff_max_ms / 1000.0)
        self._preferred: str | None = None
        self._learned: tuple[str, ...] = ()
        #: url -> (unreachable until, the back-off that set it)
        self._unreachable: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._cluster_id: str | None = None
        self._closed = False

    @classmethod
    def for_client(cls, config: CommonConfig, *, transport: httpx.BaseTransport | None = None,
                   on_error: Callable[[KafkaError], None] | None = None) -> "Gateway":
        """The gateway of a Producer, Consumer or AdminClient with ``config``."""
        return cls(
            config.bootstrap_servers, client_id=config.client_id, timeout_s=config.socket_timeout_ms / 1000.0,
            transport=transport, on_error=on_error, reconnect_backoff_ms=config.reconnect_backoff_ms,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms, security=config.security,
        )

    # -- servers --------------------------------------------------------------------------------

    def learn(self, urls: list[str]) -> None:
        """Brokers metadata named: servers to try after ``bootstrap.servers``."""
        with self._lock:
            self._learned = tuple(u.rstrip("/") for u in urls if u.rstrip("/") not in self.servers)

    @property
    def answered(self) -> str | None:
        """The server that answered last."""
        return self._preferred

    def reachable(self, url: str) -> bool:
        """False while ``url`` is backed off after a failed connection."""
        with self._lock:
            entry = self._unreachable.get(url)
        return entry is None or entry[0] <= self.monotonic()

    def _failed(self, url: str) -> None:
        now = self.monotonic()
        with self._lock:
            entry = self._unreachable.get(url)
            backoff = self.backoff_s if entry is None else min(self.backoff_max_s, max(entry[1], self.backoff_s) * 2)
            self._unreachable[url] = (now + backoff, backoff)

    def _answered(self, url: str) -> None:
        with self._lock:
            self._preferred = url
            self._unreachable.pop(url, None)
            self._down = False

    def candidates(self, broker: str | None = None) -> list[str]:
        """The servers in the order a request tries them: ``broker``, the last to
        answer, ``bootstrap.servers``, learnt brokers -- reachable ones first."""
        with self._lock:
            order = [u for u in (broker, self._preferred) if u] + [*self.servers, *self._learned]
            now = self.monotonic()
            unique = list(dict.fromkeys(order))
            up = [u for u in unique if self._unreachable.get(u, (0.0, 0.0))[0] <= now]
        return up + [u for u in unique if u not in up]

    # -- requests -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        broker: str | None = None,
    ) -> httpx.Response:
        """The 2xx response of the first server that answers (``broker`` first when
        given); else a ``KafkaException``."""
        if json is not None:
            content = orjson.dumps(json)
            headers = {"Content-Type": "application/json", **(headers or {})}
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)) if timeout_s else None
        servers = self.candidates(broker)
        last: Exception | None = None
        for server in servers:
            url = server + path
            try:
                kwargs: dict[str, Any] = {"params": params, "content": content, "headers": headers}
                if timeout is not None:
                    kwargs["timeout"] = timeout
                resp = self._http.request(method, url, **kwargs)
            except httpx.TimeoutException as exc:
                if isinstance(exc, httpx.ConnectTimeout):
                    self._failed(server)
                    last = exc
                    continue
                raise KafkaException(local_error("_TIMED_OUT", f"{method} {url}: {exc!r}", retriable=True)) from None
            except httpx.TransportError as exc:
                self._failed(server)
                last = exc
                continue
            except RuntimeError as exc:  # the client was closed under a request
                raise KafkaException(local_error("_DESTROY", str(exc))) from None
            self._answered(server)
            if resp.status_code >= 400:
                raise KafkaException(self._error_of(resp))
            return resp
        reason = f"no gateway of {servers} answered: {last!r}"
        with self._lock:
            announce, self._down = not self._down, True
        if announce and self.on_error is not None:
            n = len(servers)
            self.on_error(local_error("_ALL_BROKERS_DOWN", f"{n}/{n} brokers are down: {reason}"))
        raise KafkaException(local_error("_TRANSPORT", reason, retriable=True))

    @staticmethod
    def _error_of(resp: httpx.Response) -> KafkaError:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "message" not in body:
            reason = f"HTTP {resp.status_code}: {resp.text[:300]}"
            unknown = KafkaError.UNKNOWN  # type: ignore[attr-defined]
            return KafkaError(unknown, reason, retriable=resp.status_code >= 500)
        return KafkaError.from_laketail(from_body(resp.status_code, body))

    def get_json(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post_json(self, path: str, body: Any, **kwargs: Any) -> Any:
        resp = self.request("POST", path, json=body, **kwargs)
        return resp.json() if resp.content else None

    # -- cluster --------------------------------------------------------------------------------

    def cluster_id(self) -> str:
        """The cluster's id (``GET /v3/clusters``), learnt once."""
        with self._lock:
            known = self._cluster_id
        if known is None:
            known = self.get_json("/v3/clusters")["data"][0]["cluster_id"]
            with self._lock:
                self._cluster_id = known
        return known

    def v3(self, path: str = "") -> str:
        return f"/v3/clusters/{self.cluster_id()}{path}"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._http.close()
