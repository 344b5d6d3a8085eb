"""In-process gateways for the ``test_api_*`` tests: the real app and a real broker on
a temporary data directory, driven through httpx's ASGI transport on an event loop of
their own (lifespan included), so route contracts are checked without a server
process. :class:`InProcess` is a small synchronous client over that loop."""

from __future__ import annotations

import asyncio
import base64
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
from fastapi import FastAPI

from laketail.api import create_app
from laketail.config import BrokerSettings

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
V2 = "application/vnd.kafka.v2+json"
ARROW = "application/vnd.apache.arrow.stream"


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


class InProcess:
    """The app, its lifespan and an httpx client, all on one background event loop
    (the broker is only ever called from that loop's thread, as it requires)."""

    def __init__(self, app: FastAPI, timeout_s: float = 60.0) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._lifespan = app.router.lifespan_context(app)
        self.run(self._lifespan.__aenter__())
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://laketail.test",
            timeout=timeout_s,
        )

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout_s)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.run(self.http.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)

    @property
    def broker(self) -> Any:
        return self.app.state.broker

    def close(self) -> None:
        try:
            self.run(self.http.aclose())
            self.run(self._lifespan.__aexit__(None, None, None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(self.timeout_s)
            self.loop.close()


@contextmanager
def gateway(data: Path, **settings: Any) -> Iterator[InProcess]:
    """A started gateway on ``data``; the broker closes when the block ends."""
    client = InProcess(create_app(BrokerSettings(data=str(data), **settings)))
    try:
        yield client
    finally:
        client.close()


def cluster_id(client: InProcess) -> str:
    resp = client.get("/v3/clusters")
    assert resp.status_code == 200, resp.text
    return resp.json()["data"][0]["cluster_id"]


def create_topic(client: InProcess, name: str, partitions: int = 1, **configs: str) -> None:
    body: dict[str, Any] = {"topic_name": name, "partitions_count": partitions}
    if configs:
        body["configs"] = [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]
    resp = client.post(f"/v3/clusters/{cluster_id(client)}/topics", json=body)
    assert resp.status_code == 201, resp.text


def produce(client: InProcess, topic: str, values: list[bytes], partition: int | None = None,
            **params: str) -> list[dict]:
    path = f"/topics/{topic}" if partition is None else f"/topics/{topic}/partitions/{partition}"
    resp = client.post(path, json={"records": [{"value": b64(v)} for v in values]},
                       headers={"Content-Type": BINARY_V2}, params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()["offsets"]


def assert_error(resp, status: int, code: int, name: str) -> dict:
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text}"
    body = resp.json()
    assert body["error_code"] == code, body
    assert body["message"].startswith(name), body
    return body
