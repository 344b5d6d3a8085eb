"""What a forwarded or proxied request's transport failure tells the client (issue 35, the
Jepsen-style run's partial failures): an idempotent batch forwarded to the leader of
partition 2, which wrote it and was killed before answering, was answered
LEADER_NOT_AVAILABLE -- Kafka's word for "no leader, nothing written" -- though its
records were in the log. A request sent and never answered is REQUEST_TIMED_OUT
(the outcome is unknown); only a leader that could not be reached at all is
LEADER_NOT_AVAILABLE."""

from __future__ import annotations

import asyncio
import socket

import pytest

from laketail.cluster.metadata import BrokerRegistration, ClusterImage, PartitionRegistration
from laketail.cluster.node import ClusterNode
from laketail.config import BrokerSettings
from laketail.errors import LeaderNotAvailable, NotController, NotLeaderOrFollower, RequestTimedOut


class _Host:
    def __init__(self, data) -> None:
        self.settings = BrokerSettings(data=str(data))

    async def allocate_producer_ids(self, size: int) -> tuple[int, int]:
        raise AssertionError("not used here")


def _node(tmp_path, leader_port: int) -> ClusterNode:
    node = ClusterNode(_Host(tmp_path))
    node.image = ClusterImage(
        controller_id=1,
        brokers={1: BrokerRegistration(1, f"http://127.0.0.1:{leader_port}", "x")},
        partitions={("t", 0): PartitionRegistration("t", 0, [0, 1], 1, 3, [0, 1])},
    )
    return node


def test_a_forward_the_leader_took_and_never_answered_is_request_timed_out(tmp_path):
    received: list[bytes] = []

    async def go() -> BaseException:
        async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.append(await reader.readuntil(b"\r\n\r\n"))
            writer.close()  # the leader dies after reading (and maybe writing) the append

        server = await asyncio.start_server(swallow, "127.0.0.1", 0)
        node = _node(tmp_path, server.sockets[0].getsockname()[1])
        try:
            with pytest.raises(Exception) as raised:
                await node.call_leader("t", 0, "POST", "/internal/append", content=b"x", timeout=5)
            return raised.value
        finally:
            server.close()
            await server.wait_closed()

    error = asyncio.run(go())
    assert received, "the leader got the request"
    assert isinstance(error, RequestTimedOut), repr(error)


def test_a_leader_that_cannot_be_reached_is_leader_not_available(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused

    async def go() -> None:
        await _node(tmp_path, port).call_leader("t", 0, "POST", "/internal/append", content=b"x", timeout=5)

    with pytest.raises(LeaderNotAvailable):
        asyncio.run(go())


def test_a_leader_that_lost_its_partition_after_the_append_does_not_say_nothing_was_written(tmp_path):
    """acks=all waits after the append: a leader deposed meanwhile (the partition then
    offline) answered LEADER_NOT_AVAILABLE for records it had written. Kafka answers a
    produce waiting in purgatory NOT_LEADER_OR_FOLLOWER: the next leader may hold them."""
    node = _node(tmp_path, 1)
    node.image.partitions[("t", 0)] = PartitionRegistration("t", 0, [0, 1], -1, 4, [])

    async def go() -> None:
        await node.replicas.wait_replicated("t", 0, 10, 2, 1.0)

    with pytest.raises(NotLeaderOrFollower):
        asyncio.run(go())


def test_a_proxied_request_the_controller_took_and_never_answered_is_request_timed_out(tmp_path):
    """The coordinator proxy passes a transactional produce to the controller; killed after
    reading it (the Jepsen-style run's kill-controller), the answer was NOT_CONTROLLER --
    nothing done -- though the record was in the log. Not reachable at all stays
    NOT_CONTROLLER."""
    received: list[bytes] = []

    async def go() -> BaseException:
        async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.append(await reader.readuntil(b"\r\n\r\n"))
            writer.close()

        server = await asyncio.start_server(swallow, "127.0.0.1", 0)
        node = _node(tmp_path, server.sockets[0].getsockname()[1])
        try:
            with pytest.raises(Exception) as raised:
                await node.call_controller_raw("POST", "/topics/t/partitions/0?producer_id=7", content=b"{}")
            return raised.value
        finally:
            await node.http.aclose()
            server.close()
            await server.wait_closed()

    error = asyncio.run(go())
    assert received, "the controller got the request"
    assert isinstance(error, RequestTimedOut), repr(error)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def refused() -> None:
        node = _node(tmp_path, port)
        try:
            await node.call_controller_raw("POST", "/topics/t/partitions/0", content=b"{}")
        finally:
            await node.http.aclose()

    with pytest.raises(NotController):
        asyncio.run(refused())


def _answering(answers: list[tuple[int, bytes]], received: list[bytes]):
    """A leader that answers one request per connection, with ``answers`` in turn."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            received.append(head + await reader.readexactly(length))
            status, body = answers.pop(0)
            writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\nconnection: close\r\n"
                         b"content-length: %d\r\n\r\n%s" % (status, len(body), body))
            await writer.drain()
        finally:
            writer.close()
            await writer.wait_closed()

    return serve


def test_a_leader_still_taking_up_its_partition_is_called_again_until_it_answers(tmp_path):
    """The leader the image names answered NOT_LEADER_OR_FOLLOWER (and then UNKNOWN_TOPIC_OR_PARTITION)
    while it applied the image that made it leader: the forward was answered 421 to a REST
    client that had just been told the partition's leader (seen in CI, request processes).
    The forwarder calls again with Kafka's backoff until the leader takes the request."""
    not_leader = b'{"error_code":42101,"message":"NOT_LEADER_OR_FOLLOWER: broker 1 does not lead t-0"}'
    unknown = b'{"error_code":40402,"message":"UNKNOWN_TOPIC_OR_PARTITION: t-0"}'
    answers = [(421, not_leader), (421, not_leader), (404, unknown), (200, b'{"base_offset": 7}')]
    received: list[bytes] = []

    async def go() -> dict:
        server = await asyncio.start_server(_answering(answers, received), "127.0.0.1", 0)
        node = _node(tmp_path, server.sockets[0].getsockname()[1])
        try:
            resp = await node.call_leader("t", 0, "POST", "/internal/append", content=b"x", timeout=5)
            return resp.json()
        finally:
            await node.http.aclose()
            server.close()
            await server.wait_closed()

    assert asyncio.run(go()) == {"base_offset": 7}
    assert len(received) == 4 and all(r.endswith(b"\r\n\r\nx") for r in received)


def test_a_leader_that_keeps_saying_it_does_not_lead_is_answered_after_the_retry_time(tmp_path, monkeypatch):
    """Not for ever: after ``LEADER_RETRY_S`` the client gets NOT_LEADER_OR_FOLLOWER (retriable)."""
    from laketail.cluster import node as node_module

    monkeypatch.setattr(node_module, "LEADER_RETRY_S", 0.5)
    not_leader = b'{"error_code":42101,"message":"NOT_LEADER_OR_FOLLOWER: broker 1 does not lead t-0"}'
    answers = [(421, not_leader)] * 50
    received: list[bytes] = []

    async def go() -> None:
        server = await asyncio.start_server(_answering(answers, received), "127.0.0.1", 0)
        node = _node(tmp_path, server.sockets[0].getsockname()[1])
        try:
            await node.call_leader("t", 0, "POST", "/internal/append", content=b"x", timeout=5)
        finally:
            await node.http.aclose()
            server.close()
            await server.wait_closed()

    with pytest.raises(NotLeaderOrFollower):
        asyncio.run(go())
    assert 1 <= len(received) < 50  # it gave up with answers left


def test_a_heartbeat_is_not_queued_behind_requests_that_fill_the_shared_pool(tmp_path):
    """Client requests passed to the controller (a JoinGroup waits a whole rebalance) and
    ISR changes share the node's pool of 64 connections. With the pool full, a heartbeat
    waited in it past its timeout (PoolTimeout in the Jepsen run's logs), and a broker that
    misses a session of heartbeats claims the controller. Heartbeats have a client of their own."""
    answered: list[bytes] = []
    held: list[asyncio.Event] = []

    async def go() -> None:
        async def controller(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"/internal/v1/heartbeat" not in head.split(b"\r\n")[0]:
                held.append(release := asyncio.Event())
                await release.wait()  # a long poll that holds its connection
                writer.close()
                await writer.wait_closed()
                return
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            await reader.readexactly(length)
            body = b'{"controller_id": 1, "controller_epoch": 1, "version": 0}'
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            answered.append(head)
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(controller, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        node = _node(tmp_path, port)
        node.host.logs = _NoLogs()  # type: ignore[attr-defined]
        await asyncio.to_thread(node.store.register_broker, 1, url, "x")
        await asyncio.to_thread(node.store.claim_controller, 1, 0)
        holding = [asyncio.create_task(node.http.get(url + "/join", timeout=None)) for _ in range(64)]
        try:
            await asyncio.sleep(0.5)  # every connection of the shared pool is taken
            await node._heartbeat()
            assert len(held) == 64
        finally:
            for release in held:
                release.set()
            await asyncio.gather(*holding, return_exceptions=True)
            await node.close()
            server.close()
            await server.wait_closed()

    asyncio.run(go())
    assert len(answered) == 1


class _NoLogs:
    def all(self) -> list:
        return []
