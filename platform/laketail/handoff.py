"""The local hand-off: appends a request process passes to the sibling that leads them.

Role: a broker served by several request processes (:mod:`laketail.request_processes`)
parses, validates and frames a produce request in whichever process the client's
connection reached, as Kafka's network threads do; only the appends cross to the
process that leads each partition, as Kafka's request handlers hand them to the log.
They cross over a Unix domain socket in the broker's local directory
(``request-processes/broker-<id>.sock``, mode 0600: only the broker's user connects),
never as a second HTTP request. One request's appends to the partitions one sibling
leads travel in one hand-off, answered with each partition's base offset or error;
each append carries its own producer (an idempotent producer's batches to several
partitions each have their sequence), so those travel together too.

Bytes (little-endian). A hand-off::

    u32 length of what follows
    u32 request id            (the answer carries it back; several are in flight per connection)
    i8  acks                  1 or -1 (all); acks=0 is handed off as 1, as forwards are
    u16 topic length, topic (UTF-8)
    u16 appends, each:
        i32 partition
        u8  1 when a max timestamp follows, then i64 max timestamp (microseconds)
        u8  producer          0: none; 1: followed by
            i64 producer id, i16 producer epoch, i32 base sequence, u8 transactional,
            u16 control length, control (UTF-8; empty: not a control batch)
        u32 length, one frame batch (FRAME_SCHEMA) as an Arrow IPC record batch message

Its answer::

    u32 length of what follows
    u32 request id
    u16 appends, in the hand-off's order, each:
        u8  0 appended: i64 base offset
            1 refused before anything was written (the sibling does not lead it),
            2 failed (written or not, unknown): either then
              i32 REST error code, u32 length, message ("KAFKA_NAME: detail", UTF-8)

An error rebuilt from its message is the class the sibling raised
(:func:`laketail.errors.from_body`), so Kafka's codes survive the hop. A refused append
is sent again over the inter-broker listener by the caller (which refreshes its image
and retries there, :meth:`~laketail.cluster.node.ClusterNode.call_leader`); so is a
hand-off to a sibling whose socket does not accept (nothing was sent). A connection
lost with hand-offs in flight answers them REQUEST_TIMED_OUT: whether they were
written is unknown. Hand-offs are not retried once sent, so they need no internal
producer identity (unlike HTTP forwards, :mod:`laketail.cluster.forwarding`).

Thread-safety: event loop thread only (server and client alike).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from laketail.errors import InvalidRequest, LaketailError, RequestTimedOut, from_body
from laketail.records import FRAME_SCHEMA, Acks
from laketail.storage.partition_log import ProducerBatch

log = logging.getLogger(__name__)

_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<IIb")  # length, request id, acks
_PRODUCER = struct.Struct("<qhiB")  # id, epoch, base sequence, transactional
_ENTRY = struct.Struct("<iBq")  # partition, has max timestamp, max timestamp us
_ANSWER_HEAD = struct.Struct("<IIH")  # length, request id, appends
_APPENDED = struct.Struct("<Bq")
_FAILED = struct.Struct("<BiI")

APPENDED, REFUSED, FAILED = 0, 1, 2
#: A hand-off larger than this is refused by the sibling (a frame is at most a request's
#: records; the HTTP body limit is far below it).
MAX_HANDOFF_BYTES = 1 << 30
#: Unix socket paths longer than this are reached through ``/proc/self/fd`` (``sun_path``
#: holds 108 bytes with its NUL).
_MAX_PATH = 100


@dataclass(frozen=True)
class Append:
    """One partition's append in a hand-off."""

    partition: int
    frame: pa.RecordBatch
    max_timestamp_us: int | None = None
    #: the idempotent or transactional producer of the batch; None: none
    producer: ProducerBatch | None = None


#: What a hand-off answers per append: the base offset, or the error and whether
#: nothing was written (REFUSED) or it is unknown (FAILED).
Outcome = int | tuple[int, LaketailError]


def socket_path(local_dir: Path, broker_id: int) -> Path:
    """The hand-off socket of the request process with ``broker_id``."""
    return local_dir / "request-processes" / f"broker-{broker_id}.sock"


# -- bytes ------------------------------------------------------------------------------------

def _text(data: str) -> bytes:
    raw = data.encode()
    return struct.pack("<H", len(raw)) + raw


def _producer(producer: ProducerBatch | None) -> list[bytes]:
    if producer is None:
        return [b"\x00"]
    return [b"\x01", _PRODUCER.pack(producer.producer_id, producer.producer_epoch, producer.base_sequence,
                                   producer.transactional), _text(producer.control or "")]


def encode_handoff(request_id: int, topic: str, appends: Sequence[Append], acks: Acks) -> bytes:
    """A hand-off's bytes (the module docstring's layout), length prefix included."""
    parts = [b"", _text(topic), struct.pack("<H", len(appends))]
    for a in appends:
        message = a.frame.serialize()
        has_ts = a.max_timestamp_us is not None
        parts += [_ENTRY.pack(a.partition, has_ts, a.max_timestamp_us if has_ts else 0), *_producer(a.producer),
                  _U32.pack(message.size), message]
    body_len = sum(len(p) for p in parts) + _HEAD.size - 4
    parts[0] = _HEAD.pack(body_len, request_id, -1 if acks == "all" else 1)
    return b"".join(parts)


@dataclass(frozen=True)
class Handoff:
    """A decoded hand-off."""

    request_id: int
    topic: str
    acks: Acks
    appends: list[Append]


def decode_handoff(body: bytes) -> Handoff:
    """A hand-off from its bytes after the length prefix; INVALID_REQUEST when they do
    not hold one."""
    try:
        view = memoryview(body)
        request_id, acks = struct.unpack_from("<Ib", view, 0)
        pos = 5
        (n,) = struct.unpack_from("<H", view, pos)
        topic = bytes(view[pos + 2:pos + 2 + n]).decode()
        pos += 2 + n
        (count,) = struct.unpack_from("<H", view, pos)
        pos += 2
        buf = pa.py_buffer(body)
        appends = []
        for _ in range(count):
            partition, has_ts, max_ts = _ENTRY.unpack_from(view, pos)
            pos += _ENTRY.size
            producer = None
            if view[pos]:
                pid, epoch, seq, txn = _PRODUCER.unpack_from(view, pos + 1)
                pos += 1 + _PRODUCER.size
                (n,) = struct.unpack_from("<H", view, pos)
                control = bytes(view[pos + 2:pos + 2 + n]).decode() or None
                pos += 2 + n
                producer = ProducerBatch(pid, epoch, seq, bool(txn), control)
            else:
                pos += 1
            (size,) = _U32.unpack_from(view, pos)
            pos += 4
            if pos + size > len(body):
                raise ValueError("a frame runs past the hand-off")
            frame = pa.ipc.read_record_batch(buf.slice(pos, size), FRAME_SCHEMA)
            pos += size
            appends.append(Append(partition, frame, max_ts if has_ts else None, producer))
    except (struct.error, ValueError, IndexError, UnicodeDecodeError, pa.ArrowException) as exc:
        raise InvalidRequest(f"not a hand-off: {type(exc).__name__}: {exc}") from None
    return Handoff(request_id, topic, "all" if acks == -1 else "1", appends)


def encode_answer(request_id: int, outcomes: Sequence[Outcome]) -> bytes:
    parts = [b""]
    for outcome in outcomes:
        if isinstance(outcome, int):
            parts.append(_APPENDED.pack(APPENDED, outcome))
        else:
            kind, error = outcome
            message = error.message.encode()
            parts += [_FAILED.pack(kind, error.rest_code, len(message)), message]
    body_len = sum(len(p) for p in parts) + _ANSWER_HEAD.size - 4
    parts[0] = _ANSWER_HEAD.pack(body_len, request_id, len(outcomes))
    return b"".join(parts)


def decode_answer(body: bytes) -> tuple[int, list[Outcome]]:
    """``(request id, outcomes)`` from an answer's bytes after the length prefix."""
    request_id, count = struct.unpack_from("<IH", body, 0)
    pos = 6
    outcomes: list[Outcome] = []
    for _ in range(count):
        kind = body[pos]
        if kind == APPENDED:
            outcomes.append(_APPENDED.unpack_from(body, pos)[1])
            pos += _APPENDED.size
            continue
        _, rest_code, size = _FAILED.unpack_from(body, pos)
        pos += _FAILED.size
        message = body[pos:pos + size].decode()
        pos += size
        outcomes.append((kind, from_body(rest_code // 100, {"error_code": rest_code, "message": message})))
    return request_id, outcomes


# -- the sibling's side -------------------------------------------------------------------------

#: Raises Kafka's answer when this process does not lead the partition (after waiting
#: for a leadership its image already gives it): nothing is written.
WaitLeads = Callable[[str, int], Awaitable[None]]
AppendOne = Callable[[str, int, pa.RecordBatch, Acks, "int | None", "ProducerBatch | None"], Awaitable[int]]


class HandoffServer:
    """The socket on which this request process takes its siblings' hand-offs.

    Each hand-off runs as a task of its own (appends wait for group commits and acks),
    its appends concurrently; answers go back as they complete."""

    def __init__(self, path: Path, wait_leads: WaitLeads, append: AppendOne) -> None:
        self.path = path
        self._wait_leads = wait_leads
        self._append = append
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        #: hand-offs taken (metrics)
        self.received = 0

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # left by a process killed with -9
        with _reachable(self.path) as path:
            self._server = await asyncio.start_unix_server(self._serve, path=path)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    (size,) = _U32.unpack(await reader.readexactly(4))
                    if size > MAX_HANDOFF_BYTES:
                        log.warning("a hand-off of %d bytes: closing the connection", size)
                        return
                    body = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                task = asyncio.get_running_loop().create_task(self._answer(body, writer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        try:
            handoff = decode_handoff(body)
        except InvalidRequest as exc:
            log.warning("%s: closing the connection", exc)
            writer.close()
            return
        self.received += 1
        if len(handoff.appends) == 1:  # no task of its own for the common single append
            outcomes = [await self._one(handoff, handoff.appends[0])]
        else:
            outcomes = await asyncio.gather(*(self._one(handoff, a) for a in handoff.appends))
        if not writer.is_closing():
            writer.write(encode_answer(handoff.request_id, outcomes))

    async def _one(self, handoff: Handoff, a: Append) -> Outcome:
        try:
            await self._wait_leads(handoff.topic, a.partition)
        except LaketailError as exc:
            return REFUSED, exc
        try:
            return await self._append(handoff.topic, a.partition, a.frame, handoff.acks, a.max_timestamp_us,
                                      a.producer)
        except LaketailError as exc:
            return FAILED, exc
        except Exception as exc:  # the append's own failure (disk): Kafka's unknown server error
            log.exception("handed-off append to %s-%d failed", handoff.topic, a.partition)
            return FAILED, LaketailError(f"{type(exc).__name__}: {exc}")


# -- the sending side ----------------------------------------------------------------------------

class SiblingUnreachable(Exception):
    """The sibling's socket did not accept a connection: nothing was sent."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future[list[Outcome]]] = {}
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                (size,) = _U32.unpack(await self.reader.readexactly(4))
                request_id, outcomes = decode_answer(await self.reader.readexactly(size))
                future = self.pending.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_result(outcomes)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, struct.error):
            pass
        finally:
            self.writer.close()
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(ConnectionResetError("the sibling closed the hand-off connection"))
            self.pending.clear()

    @property
    def alive(self) -> bool:
        return not self.task.done() and not self.writer.is_closing()

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


class HandoffClient:
    """This request process's hand-offs to its siblings: one connection per sibling,
    opened on first use and again after it is lost, several hand-offs in flight on it.

    Appends sent to the same sibling, topic and acks within one turn of the event loop
    travel in one hand-off (:meth:`send_gathered`): a Kafka Produce answers its
    partitions concurrently, each calling the produce path on its own, and those a
    sibling leads still cost one hop together."""

    def __init__(self, local_dir: Path, timeout_s: float) -> None:
        self.local_dir = local_dir
        self.timeout_s = timeout_s
        self._connections: dict[int, _Connection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._next_id = 0
        #: appends waiting for the end of this event-loop turn, by (sibling, topic, acks)
        self._gathering: dict[tuple[int, str, Acks], list[tuple[list[Append], asyncio.Future]]] = {}
        self._flushing: set[asyncio.Task] = set()
        #: hand-offs sent (metrics)
        self.sent = 0

    async def _connection(self, broker_id: int) -> _Connection:
        conn = self._connections.get(broker_id)
        if conn is not None and conn.alive:
            return conn
        async with self._connecting.setdefault(broker_id, asyncio.Lock()):
            conn = self._connections.get(broker_id)
            if conn is not None and conn.alive:
                return conn
            try:
                with _reachable(socket_path(self.local_dir, broker_id)) as path:
                    reader, writer = await asyncio.open_unix_connection(path)
            except OSError as exc:
                raise SiblingUnreachable(f"request process {broker_id}: {exc}") from exc
            conn = self._connections[broker_id] = _Connection(reader, writer)
            return conn

    async def send(self, broker_id: int, topic: str, appends: Sequence[Append], acks: Acks) -> list[Outcome]:
        """Hand ``appends`` to the request process ``broker_id``; each one's outcome in
        order. SiblingUnreachable when nothing was sent; REQUEST_TIMED_OUT (for all)
        when the answer did not come."""
        conn = await self._connection(broker_id)
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        request_id = self._next_id
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        conn.pending[request_id] = future
        conn.writer.write(encode_handoff(request_id, topic, appends, acks))
        self.sent += 1
        try:
            async with asyncio.timeout(self.timeout_s):  # no task per hand-off, unlike wait_for
                await conn.writer.drain()  # a sibling that does not read holds the sender back, not its memory
                return await future
        except (TimeoutError, ConnectionError) as exc:
            conn.pending.pop(request_id, None)
            error = RequestTimedOut(f"request process {broker_id} did not answer a hand-off to {topic}: "
                                    f"{type(exc).__name__} {exc}; whether it appended is unknown")
            return [(FAILED, error) for _ in appends]

    async def send_gathered(self, broker_id: int, topic: str, appends: Sequence[Append],
                            acks: Acks) -> list[Outcome]:
        """:meth:`send`, in one hand-off with the other appends to the same sibling, topic
        and acks asked for in this turn of the event loop."""
        key = (broker_id, topic, acks)
        waiting = self._gathering.get(key)
        if waiting is None:
            waiting = self._gathering[key] = []
            asyncio.get_running_loop().call_soon(self._flush, key)
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        waiting.append((list(appends), future))
        return await future

    def _flush(self, key: tuple[int, str, Acks]) -> None:
        waiting = self._gathering.pop(key)
        task = asyncio.get_running_loop().create_task(
            self.send(key[0], key[1], [a for appends, _ in waiting for a in appends], key[2]))

        def answer(done: asyncio.Task) -> None:
            error = done.exception() if not done.cancelled() else asyncio.CancelledError()
            outcomes = done.result() if error is None else []
            self._flushing.discard(done)
            start = 0
            for appends, future in waiting:
                mine, start = outcomes[start:start + len(appends)], start + len(appends)
                if future.done():  # its caller was cancelled
                    continue
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(mine)

        self._flushing.add(task)
        task.add_done_callback(answer)

    async def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        await asyncio.gather(*(c.task for c in self._connections.values()), return_exceptions=True)
        self._connections.clear()


class _reachable:
    """``path`` as a socket address short enough for ``sun_path``: itself, or its
    directory opened and named through ``/proc/self/fd`` (pytest's temporary paths
    often pass 108 bytes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> str:
        text = str(self.path)
        if len(text.encode()) <= _MAX_PATH:
            return text
        self._fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        return f"/proc/self/fd/{self._fd}/{self.path.name}"

    def __exit__(self, *_: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
