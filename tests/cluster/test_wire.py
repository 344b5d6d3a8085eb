"""The replica fetch loop's HTTP client against a real uvicorn server: answers, the
gateway's errors as laketail exceptions, chunked bodies, one kept-alive connection,
a connection the server closed replaced without losing the request, timeouts."""

import asyncio
import json
import socket
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from laketail.cluster.wire import PeerLink
from laketail.errors import NotLeaderOrFollower


class Peer:
    """A uvicorn server on a socket bound before it starts; remembers the client port
    of every request (one port = one connection)."""

    def __init__(self, port: int = 0) -> None:
        self.ports: list[int] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        app = Starlette(routes=[
            Route("/base/echo", self.echo, methods=["POST"]),
            Route("/base/fail", self.fail, methods=["POST"]),
            Route("/base/chunked", self.chunked, methods=["POST"]),
            Route("/base/slow", self.slow, methods=["POST"]),
        ])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            assert self.thread.is_alive()
            time.sleep(0.01)

    async def echo(self, request: Request) -> Response:
        self.ports.append(request.client.port)
        body = await request.json()
        return Response(json.dumps({"got": body}).encode() + b"\x00\xff", media_type="application/octet-stream")

    async def fail(self, request: Request) -> Response:
        return JSONResponse({"error_code": 42101, "message": "NOT_LEADER_OR_FOLLOWER: broker 2 does not lead t-0"},
                            status_code=421)

    async def chunked(self, request: Request) -> Response:
        async def parts():
            for i in range(3):
                yield bytes([i]) * 70_000
        return StreamingResponse(parts(), media_type="application/octet-stream")

    async def slow(self, request: Request) -> Response:
        await asyncio.sleep(5)
        return Response(b"late")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture
def peer():
    p = Peer()
    yield p
    if p.thread.is_alive():
        p.stop()


def test_answers_come_back_on_one_kept_alive_connection(peer):
    async def go():
        link = PeerLink(f"http://127.0.0.1:{peer.port}/base")
        answers = [await link.post_json("/echo", {"n": i, "s": "é"}, 5) for i in range(20)]
        link.close()
        return answers

    answers = asyncio.run(go())
    assert [json.loads(a[:-2]) for a in answers] == [{"got": {"n": i, "s": "é"}} for i in range(20)]
    assert all(a.endswith(b"\x00\xff") for a in answers)
    assert len(set(peer.ports)) == 1 and len(peer.ports) == 20


def test_a_gateway_error_is_raised_as_its_exception_and_the_link_goes_on(peer):
    async def go():
        link = PeerLink(f"http://127.0.0.1:{peer.port}/base")
        try:
            with pytest.raises(NotLeaderOrFollower, match="does not lead"):
                await link.post_json("/fail", {}, 5)
            return await link.post_json("/echo", {"after": True}, 5)
        finally:
            link.close()

    assert json.loads(asyncio.run(go())[:-2]) == {"got": {"after": True}}


def test_a_chunked_body_is_read_whole(peer):
    async def go():
        link = PeerLink(f"http://127.0.0.1:{peer.port}/base")
        try:
            return await link.post_json("/chunked", {}, 5)
        finally:
            link.close()

    assert asyncio.run(go()) == b"\x00" * 70_000 + b"\x01" * 70_000 + b"\x02" * 70_000


def test_a_connection_the_peer_closed_is_replaced_and_the_request_still_answered(peer):
    async def go():
        link = PeerLink(f"http://127.0.0.1:{peer.port}/base")
        first = await link.post_json("/echo", {"n": 1}, 5)
        # The peer restarts on the same port: the kept-alive connection is dead.
        await asyncio.to_thread(peer.stop)
        restarted = await asyncio.to_thread(Peer, peer.port)
        try:
            second = await link.post_json("/echo", {"n": 2}, 5)
        finally:
            link.close()
            await asyncio.to_thread(restarted.stop)
        return first, second, restarted.ports

    first, second, ports = asyncio.run(go())
    assert json.loads(second[:-2]) == {"got": {"n": 2}}
    assert len(ports) == 1  # the request reached the restarted peer once


def test_a_timeout_closes_the_connection_and_the_next_request_opens_another(peer):
    async def go():
        link = PeerLink(f"http://127.0.0.1:{peer.port}/base")
        try:
            await link.post_json("/echo", {"n": 1}, 5)
            with pytest.raises(TimeoutError):
                await link.post_json("/slow", {}, 0.2)
            return await link.post_json("/echo", {"n": 2}, 5)
        finally:
            link.close()

    assert json.loads(asyncio.run(go())[:-2]) == {"got": {"n": 2}}
    assert len(set(peer.ports)) == 2  # the half-answered connection was not reused


def test_a_peer_that_is_gone_is_a_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused

    async def go():
        await PeerLink(f"http://127.0.0.1:{port}").post_json("/echo", {}, 5)

    with pytest.raises(OSError):
        asyncio.run(go())
