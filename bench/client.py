"""A minimal HTTP/1.1 keep-alive client on asyncio streams, and an open-loop pacer.

Role: drive servers from Python with as little client overhead as possible (httpx costs
more per request than the endpoints being measured), for the latency figures (fixed
request rate) and the Python-to-Python comparison with NATS.

:func:`paced` sends request *i* at ``t0 + i / rate`` whatever happened to earlier ones
and measures each latency from that intended start, so a stall shows up in every
request it delays (no coordinated omission). Connections are taken from a pool and new
ones opened when all are busy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

#: a pooled connection idle this long is not reused (uvicorn's keep-alive timeout is 5 s)
_STALE_S = 3.0


class HttpError(Exception):
    """A non-2xx answer or a broken connection."""


class Connection:
    """One keep-alive connection to ``host:port``; one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> "Connection":
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                f"Content-Length: {len(body)}"]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        status_line_and_headers = await self.reader.readuntil(b"\r\n\r\n")
        lines = status_line_and_headers.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                data = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(data[:-2])
            payload = b"".join(parts)
        else:
            payload = await self.reader.readexactly(length or 0)
        return status, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def split_url(url: str) -> tuple[str, int]:
    hostport = url.split("://", 1)[1].split("/", 1)[0]
    host, _, port = hostport.partition(":")
    return host, int(port or 80)


@dataclass
class Sample:
    intended: float  # monotonic time the request was due
    latency_s: float
    status: int
    body: bytes = b""


@dataclass
class PacedResult:
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    error_examples: list[str] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_examples) < 5:
            self.error_examples.append(what[:300])

    def latencies_ms(self) -> list[float]:
        return [s.latency_s * 1000 for s in self.samples if 200 <= s.status < 300]


async def paced(
    url: str,
    rate_per_s: float,
    duration_s: float,
    make: Callable[[int], tuple[str, str, bytes, dict[str, str]]],
    on_done: Callable[[int, Sample], None] | None = None,
    max_connections: int = 64,
    on_due: Callable[[int, float], None] | None = None,
) -> PacedResult:
    """Send ``make(i)`` = (method, path, body, headers) at ``rate_per_s`` for ``duration_s``.

    ``on_due(i, due)`` learns each request's scheduled time before it is sent;
    ``on_done(i, sample)`` gets each answer."""
    host, port = split_url(url)
    idle: list[tuple[Connection, float]] = []
    opened = 0
    result = PacedResult()
    tasks: set[asyncio.Task] = set()
    gate = asyncio.Semaphore(max_connections)

    async def one(i: int, due: float) -> None:
        nonlocal opened
        async with gate:
            conn = None
            while idle:
                candidate, last_used = idle.pop()
                if time.monotonic() - last_used < _STALE_S:
                    conn = candidate
                    break
                candidate.close()  # uvicorn drops keep-alive connections idle for 5 s
            if conn is None:
                opened += 1
                conn = Connection(host, port)
            method, path, body, headers = make(i)
            try:
                status, payload = await conn.request(method, path, body, headers)
            except (OSError, asyncio.IncompleteReadError) as exc:
                conn.close()
                result.error(f"connection: {exc!r}")
                sample = Sample(due, time.monotonic() - due, 599, str(exc).encode())
            else:
                sample = Sample(due, time.monotonic() - due, status, payload)
                idle.append((conn, time.monotonic()))
                if not 200 <= status < 300:
                    result.error(f"{status}: {payload[:200]!r}")
        result.samples.append(sample)
        if on_done is not None:
            on_done(i, sample)

    loop = asyncio.get_running_loop()
    start = time.monotonic() + 0.05
    n = int(rate_per_s * duration_s)
    for i in range(n):
        due = start + i / rate_per_s
        if on_due is not None:
            on_due(i, due)
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = loop.create_task(one(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    for conn, _ in idle:
        conn.close()
    return result


async def closed_loop(
    url: str,
    duration_s: float,
    concurrency: int,
    make: Callable[[int], Awaitable[tuple[str, str, bytes, dict[str, str]]] | tuple],
    max_requests: int | None = None,
) -> tuple[int, float, list[float]]:
    """``concurrency`` connections each sending back to back; returns (requests,
    elapsed seconds, latencies in ms). Raises :class:`HttpError` on any non-2xx."""
    host, port = split_url(url)
    deadline = time.monotonic() + duration_s
    counter = 0
    latencies: list[float] = []

    async def worker() -> None:
        nonlocal counter
        conn = await Connection(host, port).open()
        try:
            while time.monotonic() < deadline and (max_requests is None or counter < max_requests):
                i = counter
                counter += 1
                req = make(i)
                if asyncio.iscoroutine(req):
                    req = await req
                method, path, body, headers = req
                t = time.monotonic()
                status, payload = await conn.request(method, path, body, headers)
                latencies.append((time.monotonic() - t) * 1000)
                if not 200 <= status < 300:
                    raise HttpError(f"{method} {path}: {status} {payload[:300]!r}")
        finally:
            conn.close()

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(latencies), time.monotonic() - started, latencies


def run(coro):
    """``asyncio.run`` with uvloop when it is installed (less client overhead)."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)
