"""Where the group commit writes: on the event loop when the write only copies into the
page cache, in a worker thread when it fsyncs, rolls a segment or would wait for the
log's lock. Either way the records are the same, dense and readable after a restart."""

import asyncio
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from laketail.clock import ManualClock
from laketail.config import TopicConfig
from laketail.records import build_frame_batch
from laketail.storage.partition_log import PartitionLog
from laketail.storage.segment import Segment

NO_FSYNC = TopicConfig(flush_messages=2**62)


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return build_frame_batch(timestamps_us=[1_000] * len(values), keys=[None] * len(values), values=values)


@pytest.fixture
def writers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of every segment write (a spy: the real write still runs)."""
    seen: list[int] = []
    write = Segment.append

    def spy(self: Segment, frames: list, now_ms: int) -> None:
        seen.append(threading.get_ident())
        write(self, frames, now_ms)

    monkeypatch.setattr(Segment, "append", spy)
    return seen


async def _append_all(plog: PartitionLog, batches: list[list[bytes]]) -> list[int]:
    return list(await asyncio.gather(*(plog.append(_batch(b)) for b in batches)))


def _reopened_values(directory: Path, config: TopicConfig) -> list[bytes]:
    plog = PartitionLog.open(directory, "t", 0, config, ManualClock())
    try:
        return plog.read(0, plog.high_watermark, 10**9, 1 << 40).column("value").to_pylist()
    finally:
        asyncio.run(plog.close())


def test_without_fsync_the_group_commit_writes_on_the_loop(tmp_path: Path, writers: list[int]) -> None:
    async def run() -> tuple[list[int], list[int], int]:
        plog = PartitionLog.open(tmp_path, "t", 0, NO_FSYNC, ManualClock())
        bases = await _append_all(plog, [[b"a", b"b"], [b"c"], [b"d", b"e", b"f"]])
        await plog.close()
        return bases, list(writers), threading.get_ident()

    bases, seen, loop_thread = asyncio.run(run())
    assert bases == [0, 2, 3]
    assert seen and set(seen) == {loop_thread}
    assert _reopened_values(tmp_path, NO_FSYNC) == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_an_fsync_sends_the_write_to_a_worker_thread(tmp_path: Path, writers: list[int]) -> None:
    async def run() -> tuple[list[int], list[int], int]:
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(flush_messages=1), ManualClock())
        bases = await _append_all(plog, [[b"a"], [b"b", b"c"]])
        await plog.close()
        return bases, list(writers), threading.get_ident()

    bases, seen, loop_thread = asyncio.run(run())
    assert bases == [0, 1]
    assert seen and loop_thread not in seen
    assert _reopened_values(tmp_path, TopicConfig()) == [b"a", b"b", b"c"]


def test_a_held_lock_sends_the_write_to_a_worker_thread(tmp_path: Path, writers: list[int]) -> None:
    async def run() -> tuple[list[int], list[int], int, int]:
        plog = PartitionLog.open(tmp_path, "t", 0, NO_FSYNC, ManualClock())
        plog._lock.acquire()  # as a reader in another thread holding it
        pending = asyncio.ensure_future(plog.append(_batch([b"x"])))
        for _ in range(20):
            await asyncio.sleep(0)
        end_while_held = plog.log_end_offset  # the loop did not wait: nothing written yet
        plog._lock.release()
        base = await pending
        await plog.close()
        return [base], list(writers), threading.get_ident(), end_while_held

    bases, seen, loop_thread, end_while_held = asyncio.run(run())
    assert end_while_held == 0
    assert bases == [0]
    assert seen and loop_thread not in seen


def test_a_due_roll_sends_the_write_to_a_worker_thread(tmp_path: Path, writers: list[int]) -> None:
    config = TopicConfig(flush_messages=2**62, segment_bytes=300)

    async def run() -> tuple[list[int], list[int], int, int]:
        plog = PartitionLog.open(tmp_path, "t", 0, config, ManualClock())
        await plog.append(_batch([b"v" * 200]))  # an empty segment takes any frame: no roll
        first = list(writers)
        writers.clear()
        await plog.append(_batch([b"w" * 200]))  # does not fit: a new segment first
        segments = len(plog.segments)
        await plog.close()
        return first, list(writers), threading.get_ident(), segments

    first, second, loop_thread, segments = asyncio.run(run())
    assert segments == 2
    assert first == [loop_thread]
    assert second and loop_thread not in second
    assert _reopened_values(tmp_path, config) == [b"v" * 200, b"w" * 200]


def _leader_frames(directory: Path, config: TopicConfig, batches: list[list[bytes]]) -> bytes:
    """The frames a leader's log holds for ``batches``, as a replica fetch copies them."""

    async def run() -> bytes:
        leader = PartitionLog.open(directory, "t", 0, config, ManualClock())
        await _append_all(leader, batches)
        data = leader.read_raw(0, 1 << 20)
        await leader.close()
        return data

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("config", "bound", "on_loop"),
    [
        (NO_FSYNC, 3, True),  # no fsync due: a copy into the page cache, on the loop
        (TopicConfig(flush_messages=1), 3, False),  # an fsync: a worker thread
        (NO_FSYNC, None, False),  # no bound on the records: a worker thread, as before
    ],
)
def test_a_follower_appends_on_the_loop_only_when_no_fsync_is_due(
    tmp_path: Path, writers: list[int], config: TopicConfig, bound: int | None, on_loop: bool
) -> None:
    data = _leader_frames(tmp_path / "leader", NO_FSYNC, [[b"a"], [b"b", b"c"]])
    writers.clear()

    async def run() -> tuple[int, list[int], int]:
        follower = PartitionLog.open(tmp_path / "follower", "t", 0, config, ManualClock())
        leo = await follower.append_raw(data, at_most_records=bound)
        await follower.close()
        return leo, list(writers), threading.get_ident()

    leo, seen, loop_thread = asyncio.run(run())
    assert leo == 3
    assert seen and (set(seen) == {loop_thread}) is on_loop
    assert _reopened_values(tmp_path / "follower", config) == [b"a", b"b", b"c"]
