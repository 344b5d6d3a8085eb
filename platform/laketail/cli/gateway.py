"""HTTP access to one broker's gateway for the command line.

:class:`Gateway` (blocking) and :class:`AsyncGateway` (for commands that follow many
partitions at once) send one request and return the decoded JSON body. Every failure
becomes a :class:`~laketail.cli.options.CommandError` here, once:

* the broker's ``{"error_code", "message"}`` answer -> its ``message``;
* any other non-2xx answer -> the status and the start of the body;
* a refused connection -> "no broker answers at URL";
* a timeout or another transport failure -> what happened, with the URL.

Topic names go into paths percent-encoded, so a bad name reaches the broker (which
says why it is bad) instead of changing the route.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from laketail.cli.options import CommandError, client_http_options

#: Connecting to a broker on the same network takes milliseconds; waiting longer only
#: delays the "no broker answers" message.
CONNECT_TIMEOUT_S = 5.0
#: Admin and produce requests (acks=all waits up to request.timeout.ms = 30 s).
REQUEST_TIMEOUT_S = 60.0

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.v2+json"


def segment(name: str | int) -> str:
    """One path segment, percent-encoded."""
    return quote(str(name), safe="")


def raise_for_answer(url: str, response: httpx.Response) -> Any:
    """The JSON body of a 2xx answer (``None`` when empty); else a CommandError."""
    if response.is_success:
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise CommandError(
                f"the broker at {url} sent a body that is not JSON ({response.status_code})"
            ) from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        raise CommandError(str(body["message"]))
    text = response.text.strip().replace("\n", " ")[:200]
    raise CommandError(
        f"HTTP {response.status_code} from {response.request.method} {response.request.url}"
        + (f": {text}" if text else "")
    )


@contextlib.contextmanager
def transport_errors(url: str) -> Iterator[None]:
    """Turn httpx's transport failures into CommandErrors that name the broker."""
    try:
        yield
    except httpx.ConnectError as exc:
        raise CommandError(
            f"no broker answers at {url} ({_reason(exc)}); start one with `laketail serve` "
            "or point --server / $LAKETAIL_SERVER at one"
        ) from exc
    except httpx.TimeoutException as exc:
        raise CommandError(f"the broker at {url} did not answer in time ({type(exc).__name__})") from exc
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise CommandError(f"{url!r} is not a usable server URL: {exc}") from exc
    except httpx.HTTPError as exc:
        raise CommandError(f"request to {url} failed: {_reason(exc)}") from exc


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _timeout(read_s: float | None) -> httpx.Timeout:
    return httpx.Timeout(read_s or REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)


class Gateway:
    """A blocking client of one gateway; knows the cluster id once asked for it."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        with transport_errors(self.url):
            self._http = httpx.Client(base_url=self.url, timeout=_timeout(None), **client_http_options())
        self._cluster_id: str | None = None

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        read_timeout_s: float | None = None,
    ) -> Any:
        with transport_errors(self.url):
            response = self._http.request(
                method, path, params=params, json=json, headers=headers,
                timeout=_timeout(read_timeout_s),
            )
        return raise_for_answer(self.url, response)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def cluster_id(self) -> str:
        """The cluster id from ``GET /v3/clusters`` (asked once per gateway)."""
        if self._cluster_id is None:
            body = self.get("/v3/clusters")
            data = body.get("data") if isinstance(body, dict) else None
            if not data:
                raise CommandError(f"the broker at {self.url} reported no cluster")
            self._cluster_id = str(data[0]["cluster_id"])
        return self._cluster_id

    def v3(self, path: str = "") -> str:
        """A path under this broker's cluster: ``/v3/clusters/<id><path>``."""
        return f"/v3/clusters/{segment(self.cluster_id())}{path}"


class AsyncGateway:
    """The same as :class:`Gateway`, for asyncio (one long poll per partition)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        with transport_errors(self.url):
            self._http = httpx.AsyncClient(base_url=self.url, timeout=_timeout(None), **client_http_options())

    async def __aenter__(self) -> "AsyncGateway":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def get(
        self,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        read_timeout_s: float | None = None,
    ) -> Any:
        with transport_errors(self.url):
            response = await self._http.get(
                path, params=params, headers=headers, timeout=_timeout(read_timeout_s)
            )
        return raise_for_answer(self.url, response)
