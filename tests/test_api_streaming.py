"""v3 streaming mode over a real connection: with ``Transfer-Encoding: chunked`` the
broker answers each record while the request is still open, so a client can wait for
one delivery report before it sends the next record (HTTP/1.1 spoken by hand, since
HTTP client libraries send the whole body before they read)."""

from __future__ import annotations

import asyncio
import json

import pytest

pytestmark = pytest.mark.integration


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _read_chunk(reader: asyncio.StreamReader) -> bytes:
    size = int((await asyncio.wait_for(reader.readline(), 30)).strip(), 16)
    data = await reader.readexactly(size + 2)
    return data[:-2]


async def _interactive(port: int, cluster_id: str, topic: str, values: list[str]) -> list[dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /v3/clusters/{cluster_id}/topics/{topic}/records HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
    )
    reports = []
    try:
        for i, value in enumerate(values):
            record = json.dumps({"value": {"type": "STRING", "data": value}}).encode()
            writer.write(_chunk(record))
            await writer.drain()
            if i == 0:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                assert head.startswith(b"HTTP/1.1 200"), head
                assert b"transfer-encoding: chunked" in head.lower(), head
            # One record in flight, so its report is the next chunk of the answer.
            lines = (await _read_chunk(reader)).splitlines()
            assert len(lines) == 1, lines
            reports.append(json.loads(lines[0]))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    finally:
        writer.close()
    return reports


def test_streaming_mode_answers_each_record_before_the_next_is_sent(broker, topic):
    rest = broker.rest
    values = [f"m{i}" for i in range(5)]
    reports = asyncio.run(_interactive(broker.port, rest.cluster_id, topic, values))
    assert [(r["error_code"], r["offset"]) for r in reports] == [(200, i) for i in range(5)]
    fetched = rest.fetch_range(topic, 0, 0, 5)
    assert [r["offset"] for r in fetched] == list(range(5))
