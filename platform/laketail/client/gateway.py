"""The client's connection to laketail's HTTP gateway, and its one error boundary.

Role: send one request to the first of ``bootstrap.servers`` that answers and hand
back the 2xx response. Everything that can go wrong becomes a ``KafkaException``
here and nowhere else:

* an error body ``{"error_code", "message"}`` becomes the broker's own
  ``LaketailError`` (:func:`laketail.errors.from_body`), then its ``KafkaError``;
* a server that cannot be reached makes the gateway try the next one; when none
  answers, ``_TRANSPORT`` (retriable);
* a response that does not arrive within the request's timeout is ``_TIMED_OUT``
  (retriable; a produce retried after it may be written twice, as without
  idempotence in Kafka).

The server that answered last is tried first next time. ``on_error`` (the client's
``error_cb`` route) hears ``_ALL_BROKERS_DOWN`` once each time every server stops
answering, as librdkafka reports it. The ``transport`` argument
is any httpx transport (``httpx.MockTransport``, a WSGI transport, ...) so tests can
plug one in. Thread-safe: httpx's client may be shared by threads.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import httpx
import orjson

from laketail.client.errors import KafkaError, KafkaException, local_error
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
    ) -> None:
        self.servers = tuple(servers)
        self.on_error = on_error
        self._down = False
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            headers={"User-Agent": f"laketail-client ({client_id})"},
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        self._preferred = 0
        self._lock = threading.Lock()
        self._cluster_id: str | None = None
        self._closed = False

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
    ) -> httpx.Response:
        """The 2xx response of the first server that answers; else a ``KafkaException``."""
        if json is not None:
            content = orjson.dumps(json)
            headers = {"Content-Type": "application/json", **(headers or {})}
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)) if timeout_s else None
        start = self._preferred
        last: Exception | None = None
        for i in range(len(self.servers)):
            index = (start + i) % len(self.servers)
            url = self.servers[index] + path
            try:
                kwargs: dict[str, Any] = {"params": params, "content": content, "headers": headers}
                if timeout is not None:
                    kwargs["timeout"] = timeout
                resp = self._http.request(method, url, **kwargs)
            except httpx.TimeoutException as exc:
                if isinstance(exc, httpx.ConnectTimeout):
                    last = exc
                    continue
                raise KafkaException(local_error("_TIMED_OUT", f"{method} {url}: {exc!r}", retriable=True)) from None
            except httpx.TransportError as exc:
                last = exc
                continue
            except RuntimeError as exc:  # the client was closed under a request
                raise KafkaException(local_error("_DESTROY", str(exc))) from None
            self._preferred = index
            self._down = False
            if resp.status_code >= 400:
                raise KafkaException(self._error_of(resp))
            return resp
        reason = f"no gateway of {list(self.servers)} answered: {last!r}"
        if not self._down and self.on_error is not None:
            n = len(self.servers)
            self.on_error(local_error("_ALL_BROKERS_DOWN", f"{n}/{n} brokers are down: {reason}"))
        self._down = True
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
            if self._cluster_id is None:
                self._cluster_id = self.get_json("/v3/clusters")["data"][0]["cluster_id"]
            return self._cluster_id

    def v3(self, path: str = "") -> str:
        return f"/v3/clusters/{self.cluster_id()}{path}"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._http.close()
