"""The consumer's fetcher: positions of the assigned partitions, and prefetched records.

Role: keep, per assigned partition, the *position* (the offset of the next record the
application will get), the *fetch offset* (where the next fetch starts, ahead of the
position by what is buffered), and a buffer of prefetched messages. A small pool of
threads fetches in the background -- one request in flight per partition, through
``GET /v1/topics/{t}/partitions/{p}/records`` (Arrow IPC, long-polling up to
``fetch.wait.max.ms``), sent to the partition's leader when metadata knows it (any
broker would forward it; a fetch that failed because the leader moved or is gone has
the leaders asked for again before it is retried after ``retry.backoff.ms``) --
while the buffer holds fewer than ``max_records``;
:meth:`take` hands buffered messages to ``poll()``/``consume()``, round-robin over
the partitions, and moves the positions past them.

Starting points: a partition assigned at ``OFFSET_STORED`` / ``OFFSET_INVALID`` starts
at the group's committed offset, else at ``auto.offset.reset``; ``OFFSET_BEGINNING``
/ ``OFFSET_END`` at the log start / end; an offset at itself. OFFSET_OUT_OF_RANGE
resets by ``auto.offset.reset`` too. With ``auto.offset.reset=none`` a partition with
nowhere to start yields a message whose error is ``_AUTO_OFFSET_RESET`` and waits for
a ``seek()``. Control records (transaction markers) are never handed out, nor, with
``isolation.level=read_committed`` (the default), aborted records or anything past
the last stable offset; the fetch answer's ``X-Laketail-Next-Offset`` moves the fetch
offset past what was skipped, and the position follows it once the buffer is empty.

Every change of a partition (seek, assignment) bumps its *epoch*; a fetch answered for
an older epoch is dropped, so a seek never sees records from before it.

Thread-safety: all state is guarded by the consumer's condition (``cond``), which is
notified whenever messages arrive so a waiting ``poll()`` wakes up. Fetch requests
run without the lock.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from threading import Condition
from typing import Callable

import pyarrow as pa

from laketail.client.config import ConsumerConfig
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.gateway import ARROW_STREAM, Gateway
from laketail.client.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_TYPES,
    Message,
    error_message,
)
from laketail.client.metadata import REFRESH_CODES, Metadata

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: How long a partition whose topic is unknown waits before it is fetched again.
UNKNOWN_TOPIC_BACKOFF_S = 1.0


@dataclass
class PartitionState:
    position: int | None = None  # next offset for the application; None until known
    fetch_offset: int | None = None  # next offset to fetch
    start: int = OFFSET_INVALID  # the logical start still to resolve (when fetch_offset is None)
    buffer: deque = field(default_factory=deque)
    epoch: int = 0
    in_flight: bool = False
    paused: bool = False
    stalled: bool = False  # auto.offset.reset=none gave up: wait for a seek
    retry_at: float = 0.0
    eof_reported_at: int | None = None
    low: int = OFFSET_INVALID
    high: int = OFFSET_INVALID
    reported: int | None = None  # the error code last handed out, so it is reported once


def records_to_messages(topic: str, table: pa.Table) -> list[Message]:
    """Arrow rows of ``RECORD_SCHEMA`` as Messages, control records left out."""
    if table.num_rows == 0:
        return []
    cols = {name: table.column(name).to_pylist() for name in
            ("partition", "offset", "timestamp_type", "key", "value", "headers", "control", "leader_epoch")}
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    out = []
    for i in range(table.num_rows):
        if cols["control"][i] is not None:
            continue
        headers = cols["headers"][i]
        out.append(Message(
            topic=topic,
            partition=cols["partition"][i],
            offset=cols["offset"][i],
            key=cols["key"][i],
            value=cols["value"][i],
            headers=None if not headers else [(h["key"], h["value"]) for h in headers],
            timestamp=(TIMESTAMP_TYPES.get(cols["timestamp_type"][i], 1), stamps[i] // 1000),
            leader_epoch=cols["leader_epoch"][i],
        ))
    return out


class Fetcher:
    """Positions and prefetch buffers for the assigned partitions."""

    def __init__(
        self,
        config: ConsumerConfig,
        gateway: Gateway,
        metadata: Metadata,
        cond: Condition,
        committed: Callable[[list[TP]], dict[TP, int | None]],
    ) -> None:
        self.config = config
        self.gateway = gateway
        self.metadata = metadata
        self.cond = cond
        self.committed = committed
        self._parts: dict[TP, PartitionState] = {}
        self._order: list[TP] = []
        self._next = 0
        self._epochs = 0
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="laketail-consumer-fetch")
        self._closed = False

    # -- assignment (caller holds nothing) -----------------------------------------------------------

    def assign(self, starts: dict[TP, int]) -> None:
        """Replace the assignment: partition -> its start (an offset or a logical one)."""
        with self.cond:
            self._parts = {}
            self._order = []
            self._add(starts)

    def add(self, starts: dict[TP, int]) -> None:
        with self.cond:
            self._add(starts)

    def _add(self, starts: dict[TP, int]) -> None:
        for tp, start in starts.items():
            state = self._parts.get(tp)
            if state is None:
                state = self._parts[tp] = PartitionState()
                self._order.append(tp)
            self._set_start(state, start)
        self._schedule()

    def remove(self, tps: list[TP]) -> None:
        with self.cond:
            for tp in tps:
                if self._parts.pop(tp, None) is not None:
                    self._order.remove(tp)

    def assignment(self) -> list[TP]:
        with self.cond:
            return list(self._order)

    def _set_start(self, state: PartitionState, start: int) -> None:
        self._epochs += 1  # one counter for all states: a re-created state never reuses an epoch
        state.epoch = self._epochs
        state.in_flight = False
        state.buffer.clear()
        state.stalled = False
        state.retry_at = 0.0
        state.eof_reported_at = None
        if start >= 0:
            state.position = state.fetch_offset = start
        else:
            state.position = state.fetch_offset = None
            state.start = start

    def seek(self, tp: TP, offset: int) -> None:
        with self.cond:
            state = self._parts.get(tp)
            if state is None:
                raise KafkaException(local_error("_STATE", f"{tp[0]} [{tp[1]}] is not assigned"))
            self._set_start(state, offset)
            self._schedule()

    def position(self, tp: TP) -> int | None:
        with self.cond:
            state = self._parts.get(tp)
            return None if state is None else state.position

    def watermarks(self, tp: TP) -> tuple[int, int]:
        with self.cond:
            state = self._parts.get(tp)
            return (OFFSET_INVALID, OFFSET_INVALID) if state is None else (state.low, state.high)

    def set_paused(self, tps: list[TP], paused: bool) -> None:
        with self.cond:
            for tp in tps:
                if tp in self._parts:
                    self._parts[tp].paused = paused
            self._schedule()

    # -- handing out (application thread) --------------------------------------------------------------

    def take(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` buffered messages, round-robin over partitions; each
        record moves its partition's position past it."""
        out: list[Message] = []
        with self.cond:
            n = len(self._order)
            for i in range(n):
                if len(out) >= max_messages:
                    break
                tp = self._order[(self._next + i) % n]
                state = self._parts[tp]
                if state.paused:
                    continue
                while state.buffer and len(out) < max_messages:
                    msg = state.buffer.popleft()
                    if msg.error() is None:
                        state.position = msg.offset() + 1
                    out.append(msg)
                self._skip_unreturned(state)
            if n:
                self._next = (self._next + 1) % n
            self._schedule()
        return out

    def kick(self) -> None:
        """Issue fetches that are due (retries after a back-off)."""
        with self.cond:
            self._schedule()

    def close(self) -> None:
        with self.cond:
            self._closed = True
            self._parts = {}
            self._order = []
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- fetching (pool threads) ---------------------------------------------------------------------

    def _schedule(self) -> None:
        """Start a fetch for every partition that needs one (caller holds ``cond``)."""
        if self._closed:
            return
        now = time.monotonic()
        for tp in self._order:
            state = self._parts[tp]
            if state.in_flight or state.paused or state.stalled or state.retry_at > now:
                continue
            if len(state.buffer) >= self.config.fetch_max_records:
                continue
            try:
                self._pool.submit(self._fetch, tp, state.epoch, state.fetch_offset, state.start)
            except RuntimeError:  # the interpreter is exiting under an unclosed consumer
                self._closed = True
                return
            state.in_flight = True

    def _fetch(self, tp: TP, epoch: int, offset: int | None, start: int) -> None:
        try:
            if offset is None:
                offset = self._resolve(tp, start)
                if offset is None:
                    return self._done(tp, epoch, [], stall=local_error(
                        "_AUTO_OFFSET_RESET",
                        f"no committed offset for {tp[0]} [{tp[1]}] and auto.offset.reset=none"))
                with self.cond:
                    state = self._parts.get(tp)
                    if state is None or state.epoch != epoch:
                        return None
                    state.position = state.fetch_offset = offset
            wait_ms = self.config.fetch_wait_max_ms
            resp = self.gateway.request(
                "GET",
                f"/v1/topics/{tp[0]}/partitions/{tp[1]}/records",
                params={
                    "offset": offset,
                    "max_records": self.config.fetch_max_records,
                    "max_bytes": self.config.max_partition_fetch_bytes,
                    "timeout": wait_ms,
                    "isolation_level": self.config.isolation_level,
                },
                headers={"Accept": ARROW_STREAM},
                timeout_s=wait_ms / 1000.0 + self.config.socket_timeout_ms / 1000.0,
                broker=self.metadata.leader_url(*tp),
            )
            table = pa.ipc.open_stream(pa.py_buffer(resp.content)).read_all()
            messages = records_to_messages(tp[0], table)
            marks = (
                int(resp.headers.get("X-Laketail-Next-Offset", offset + table.num_rows)),
                int(resp.headers.get("X-Laketail-Log-Start-Offset", OFFSET_INVALID)),
                int(resp.headers.get("X-Laketail-High-Watermark", OFFSET_INVALID)),
            )
            self._done(tp, epoch, messages, marks=marks)
        except KafkaException as exc:
            self._failed(tp, epoch, exc.args[0])
        except Exception as exc:  # keep the partition alive through a bug or a bad body
            log.exception("fetch %s at offset %s failed", tp, offset)
            self._failed(tp, epoch, local_error("_BAD_MSG", repr(exc)))
        return None

    def _resolve(self, tp: TP, start: int) -> int | None:
        """An offset for a logical start (None: auto.offset.reset=none and no commit)."""
        if start == OFFSET_BEGINNING:
            spec = "earliest"
        elif start == OFFSET_END:
            spec = "latest"
        else:
            if self.config.group_id:
                committed = self.committed([tp]).get(tp)
                if committed is not None and committed >= 0:
                    return committed
            if self.config.auto_offset_reset == "none":
                return None
            spec = self.config.auto_offset_reset
        answer = self.gateway.get_json(
            f"/v1/topics/{tp[0]}/partitions/{tp[1]}/offsets",
            params={"timestamp": spec, "isolation_level": self.config.isolation_level},
            broker=self.metadata.leader_url(*tp),
        )
        return int(answer["offset"])

    def _done(self, tp: TP, epoch: int, messages: list[Message], *, marks: tuple[int, int, int] | None = None,
              stall: KafkaError | None = None) -> None:
        with self.cond:
            state = self._parts.get(tp)
            if state is None or state.epoch != epoch:
                return
            state.in_flight = False
            if stall is not None:
                state.stalled = True
                state.buffer.append(error_message(stall, tp[0], tp[1]))
            if marks is not None:
                next_offset, state.low, state.high = marks
                state.fetch_offset = next_offset
                state.reported = None
                state.buffer.extend(messages)
                self._skip_unreturned(state)
                if messages:
                    state.eof_reported_at = None
                elif (self.config.enable_partition_eof and next_offset >= state.high
                      and state.eof_reported_at != next_offset):
                    state.eof_reported_at = next_offset
                    state.buffer.append(error_message(
                        KafkaError(KafkaError._PARTITION_EOF,  # type: ignore[attr-defined]
                                   f"Fetch from broker reached end of partition at offset {next_offset}"),
                        tp[0], tp[1], next_offset))
            self.cond.notify_all()
            self._schedule()

    @staticmethod
    def _skip_unreturned(state: PartitionState) -> None:
        """With nothing buffered, the position is where the next fetch starts: past
        the transaction markers and aborted records a fetch skipped, as Kafka's
        consumer moves past them (so a committed position never points at a marker)."""
        if not state.buffer and state.fetch_offset is not None and state.position is not None \
                and state.position < state.fetch_offset:
            state.position = state.fetch_offset

    def _failed(self, tp: TP, epoch: int, err: KafkaError) -> None:
        with self.cond:
            state = self._parts.get(tp)
            if state is None or state.epoch != epoch:
                return
            state.in_flight = False
            code = err.code()
            if code == KafkaError.OFFSET_OUT_OF_RANGE:  # type: ignore[attr-defined]
                if self.config.auto_offset_reset == "none":
                    state.stalled = True
                    reset = local_error("_AUTO_OFFSET_RESET", f"{err.str()} and auto.offset.reset=none")
                    state.buffer.append(error_message(reset, tp[0], tp[1], state.fetch_offset))
                else:
                    state.fetch_offset = None
                    state.start = OFFSET_BEGINNING if self.config.auto_offset_reset == "earliest" else OFFSET_END
            elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:  # type: ignore[attr-defined]
                state.retry_at = time.monotonic() + UNKNOWN_TOPIC_BACKOFF_S
                if state.reported != code:
                    state.reported = code
                    state.buffer.append(error_message(err, tp[0], tp[1]))
            else:
                log.debug("fetch %s failed: %s", tp, err)
                if code in REFRESH_CODES:
                    self.metadata.invalidate(tp[0])
                state.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000.0
            self.cond.notify_all()
            self._schedule()
