"""TLS connections send an answer's head and body in one write
(:class:`laketail.api.connections.OneWritePerAnswer`), over a real socket pair on a real
event loop: the peer reads the same bytes in the same order, a head that nothing follows
still goes out, and closing sends what is held first."""

from __future__ import annotations

import asyncio
import socket

from laketail.api.connections import OneWritePerAnswer

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n"
BODY = b'{"offsets":1}'


class Counted:
    """A real transport whose write calls are counted."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.calls: list[str] = []

    def write(self, data) -> None:
        self.calls.append("write")
        self.transport.write(data)

    def writelines(self, chunks) -> None:
        self.calls.append("writelines")
        self.transport.writelines(chunks)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()

    def abort(self) -> None:
        self.transport.abort()


_peers: list[asyncio.StreamWriter] = []  # the reading ends' writers, kept open while a test reads


async def _connected() -> tuple[Counted, OneWritePerAnswer, asyncio.StreamReader]:
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    reader, writer = await asyncio.open_connection(sock=theirs)
    _peers.append(writer)
    counted = Counted(transport)
    return counted, OneWritePerAnswer(counted, loop), reader  # type: ignore[arg-type]


async def _read(reader: asyncio.StreamReader, n: int | None = None) -> bytes:
    """``n`` bytes, or all up to the end of the stream; a test that would wait for ever fails."""
    return await asyncio.wait_for(reader.read() if n is None else reader.readexactly(n), 30)


def _run(test) -> None:
    async def with_peers() -> None:
        try:
            await test()
        finally:
            while _peers:
                writer = _peers.pop()
                writer.close()
                await writer.wait_closed()

    asyncio.run(with_peers())


def test_a_head_and_its_small_body_are_one_write() -> None:
    async def run() -> None:
        counted, wrapped, reader = await _connected()
        wrapped.write(HEAD)
        assert counted.calls == []  # held for its body
        wrapped.write(BODY)
        assert counted.calls == ["write"]
        assert await _read(reader, len(HEAD) + len(BODY)) == HEAD + BODY
        wrapped.close()

    _run(run)


def test_a_large_body_goes_with_its_head_in_one_writelines() -> None:
    big = bytes(range(256)) * 200  # 51,200 bytes: above what is joined

    async def run() -> None:
        counted, wrapped, reader = await _connected()
        wrapped.write(HEAD)
        wrapped.write(memoryview(big))
        assert counted.calls == ["writelines"]
        assert await _read(reader, len(HEAD) + len(big)) == HEAD + big
        wrapped.close()

    _run(run)


def test_a_head_that_nothing_follows_goes_out_on_the_next_loop_iteration() -> None:
    cont = b"HTTP/1.1 100 Continue\r\n\r\n"

    async def run() -> None:
        counted, wrapped, reader = await _connected()
        wrapped.write(cont)
        assert await _read(reader, len(cont)) == cont
        assert counted.calls == ["write"]
        wrapped.write(HEAD)  # the answer that follows is held and joined as usual
        wrapped.write(BODY)
        assert await _read(reader, len(HEAD) + len(BODY)) == HEAD + BODY
        assert counted.calls == ["write", "write"]
        wrapped.close()

    _run(run)


def test_other_writes_pass_straight_through_in_order() -> None:
    chunk = b"5\r\nhello\r\n"

    async def run() -> None:
        counted, wrapped, reader = await _connected()
        wrapped.write(chunk)
        assert counted.calls == ["write"]
        wrapped.write(HEAD)
        wrapped.writelines([chunk, chunk])  # the held head goes first
        assert counted.calls == ["write", "write", "writelines"]
        assert await _read(reader, len(chunk) + len(HEAD) + 2 * len(chunk)) == chunk + HEAD + chunk + chunk
        wrapped.close()

    _run(run)


def test_closing_sends_a_held_head_first() -> None:
    async def run() -> None:
        _, wrapped, reader = await _connected()
        wrapped.write(HEAD)
        wrapped.close()
        assert await _read(reader) == HEAD  # everything up to the end of the stream

    _run(run)


def test_an_aborted_connection_sends_nothing_more() -> None:
    async def run() -> None:
        counted, wrapped, reader = await _connected()
        wrapped.write(HEAD)
        wrapped.abort()
        await asyncio.sleep(0)  # the flush the head scheduled runs, and finds nothing held
        assert counted.calls == []
        assert await _read(reader) == b""

    _run(run)
