"""The local hand-off between request processes (``laketail.handoff``): its bytes, and a
server and client over a real Unix socket in one event loop (the processes themselves
are under test in tests/fault/test_request_processes.py)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pyarrow as pa
import pytest

from laketail.errors import (
    HotTierFull,
    InvalidRequest,
    KafkaStorageError,
    NotLeaderOrFollower,
    RecordTooLarge,
    RequestTimedOut,
)
from laketail.handoff import (
    FAILED,
    REFUSED,
    Append,
    HandoffClient,
    HandoffServer,
    SiblingUnreachable,
    decode_answer,
    decode_handoff,
    encode_answer,
    encode_handoff,
    socket_path,
)
from laketail.maintenance.table_commit import MaintenanceConflict
from laketail.records import CREATE_TIME, TIMESTAMP_TYPE, build_frame_batch, null_headers
from laketail.storage.partition_log import ProducerBatch


def _frame(values: list[bytes]) -> pa.RecordBatch:
    n = len(values)
    return build_frame_batch(timestamps_us=pa.repeat(pa.scalar(1_000, TIMESTAMP_TYPE), n),
                             keys=pa.array([b"k"] * n, pa.binary()), values=pa.array(values, pa.binary()),
                             headers=null_headers(n), timestamp_type=CREATE_TIME)


def test_golden_bytes_of_a_hand_off_and_of_an_answer():
    assert encode_handoff(9, "t1", [], "all") == bytes.fromhex("0b000000" "09000000" "ff" "0200" "7431" "0000")
    frame = _frame([b"v"])
    message = frame.serialize().to_pybytes()
    producer = ProducerBatch(5, 2, 7, True, "COMMIT")
    raw = encode_handoff(9, "t1", [Append(3, frame, 123, producer), Append(4, frame)], "1")
    head = bytes.fromhex(
        "09000000" "01" "0200" "7431" "0200"
        "03000000" "01" "7b00000000000000" "01" "0500000000000000" "0200" "07000000" "01" "0600" "434f4d4d4954")
    second = bytes.fromhex("04000000" "00" "0000000000000000" "00")
    size = len(message).to_bytes(4, "little")
    assert raw == (len(raw) - 4).to_bytes(4, "little") + head + size + message + second + size + message
    error = NotLeaderOrFollower("x")
    assert encode_answer(3, [42, (REFUSED, error)]) == bytes.fromhex(
        "31000000" "03000000" "0200" "00" "2a00000000000000" "01" "75a40000" "19000000") + error.message.encode()


def test_a_hand_off_and_its_answer_decode_to_what_was_encoded():
    frame = _frame([b"a", b"bb", b"ccc"])
    producer = ProducerBatch(11, 0, 4)
    raw = encode_handoff(77, "topic", [Append(1, frame), Append(3, frame, 123_456, producer)], "1")
    assert int.from_bytes(raw[:4], "little") == len(raw) - 4
    handoff = decode_handoff(raw[4:])
    assert (handoff.request_id, handoff.topic, handoff.acks) == (77, "topic", "1")
    assert [(a.partition, a.max_timestamp_us, a.producer) for a in handoff.appends] == [
        (1, None, None), (3, 123_456, producer)]
    assert all(a.frame.equals(frame) for a in handoff.appends)

    answer = encode_answer(77, [10, (FAILED, RecordTooLarge("too big"))])
    request_id, (base, (kind, error)) = decode_answer(answer[4:])
    assert (request_id, base, kind) == (77, 10, FAILED)
    assert type(error) is RecordTooLarge and error.kafka_code == 10 and error.detail == "too big"


def test_an_error_keeps_its_class_when_a_subclass_shares_its_kafka_name():
    """HotTierFull answers KAFKA_STORAGE_ERROR with REST 503 50307: it comes back as
    itself (so a forwarding broker answers 503 too), and a plain KAFKA_STORAGE_ERROR
    stays plain (not MaintenanceConflict, a subclass with the parent's code)."""
    answer = encode_answer(1, [(FAILED, HotTierFull("t-0: full")), (FAILED, KafkaStorageError("disk"))])
    _, ((_, full), (_, disk)) = decode_answer(answer[4:])
    assert type(full) is HotTierFull and full.http_status == 503 and full.kafka_code == 56
    assert full.detail == "t-0: full"
    assert type(disk) is KafkaStorageError and disk.http_status == 500
    assert MaintenanceConflict.rest_code == KafkaStorageError.rest_code  # the case that must stay plain


def test_bytes_that_are_not_a_hand_off_are_refused():
    raw = encode_handoff(1, "t", [Append(0, _frame([b"v"]))], "1")
    for broken in (raw[4:12], raw[4:-10], b"\x00"):
        with pytest.raises(InvalidRequest):
            decode_handoff(broken)


def _long_dir(tmp_path: Path) -> Path:
    """A directory whose socket path passes sun_path's 108 bytes."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(socket_path(deep, 1))) > 108
    return deep


def test_appends_cross_a_real_socket_with_their_offsets_and_kafkas_errors(tmp_path):
    local = _long_dir(tmp_path)
    appended: list[tuple[str, int, int, str, int | None, ProducerBatch | None]] = []

    async def wait_leads(topic: str, partition: int) -> None:
        if partition == 2:
            raise NotLeaderOrFollower(f"{topic}-{partition} is led elsewhere")

    async def append(topic, partition, frame, acks, max_ts, producer) -> int:
        if partition == 3:
            raise RecordTooLarge("record 0 is too large")
        appended.append((topic, partition, frame.num_rows, acks, max_ts, producer))
        return 100 * partition

    async def run() -> None:
        server = HandoffServer(socket_path(local, 1), wait_leads, append)
        await server.start()
        assert stat.S_IMODE(socket_path(local, 1).stat().st_mode) == 0o600
        client = HandoffClient(local, timeout_s=10)
        try:
            frame = _frame([b"x"] * 5)
            outcomes = await client.send(1, "t", [Append(p, frame, 9 if p == 0 else None) for p in range(4)], "all")
            assert outcomes[:2] == [0, 100]
            assert outcomes[2][0] == REFUSED and isinstance(outcomes[2][1], NotLeaderOrFollower)
            assert outcomes[3][0] == FAILED and isinstance(outcomes[3][1], RecordTooLarge)
            assert appended == [("t", 0, 5, "all", 9, None), ("t", 1, 5, "all", None, None)]
            producer = ProducerBatch(11, 0, 4)
            many = await asyncio.gather(*(client.send(1, "t", [Append(1, frame, None, producer)], "1")
                                          for _ in range(20)))
            assert many == [[100]] * 20  # twenty in flight on one connection, each its own answer
            assert appended[-1] == ("t", 1, 5, "1", None, producer)
            assert (client.sent, server.received) == (21, 21)
            await server.close()
            with pytest.raises(SiblingUnreachable):  # nothing was sent
                await HandoffClient(local, timeout_s=10).send(1, "t", [Append(0, frame)], "1")
        finally:
            await client.close()
            await server.close()

    asyncio.run(run())


def test_a_sibling_that_does_not_answer_leaves_the_outcome_unknown(tmp_path):
    async def run() -> None:
        release = asyncio.Event()

        async def wait_leads(topic: str, partition: int) -> None:
            return None

        async def append(*_) -> int:
            await release.wait()
            return 0

        server = HandoffServer(socket_path(tmp_path, 1), wait_leads, append)
        await server.start()
        client = HandoffClient(tmp_path, timeout_s=0.2)
        try:
            ((kind, error),) = await client.send(1, "t", [Append(0, _frame([b"v"]))], "1")
            assert kind == FAILED and isinstance(error, RequestTimedOut)
        finally:
            release.set()
            await client.close()
            await server.close()

    asyncio.run(run())


def test_appends_asked_for_in_one_event_loop_turn_travel_in_one_hand_off(tmp_path):
    """A Kafka Produce answers its partitions concurrently: the appends its partitions
    send the same sibling in one turn cost one hand-off, each caller its own outcomes,
    errors included; appends to another topic or with other acks travel apart."""
    async def run() -> None:
        async def wait_leads(topic: str, partition: int) -> None:
            if partition == 9:
                raise NotLeaderOrFollower(f"{topic}-{partition} is led elsewhere")

        producers: dict[int, ProducerBatch | None] = {}

        async def append(topic, partition, frame, acks, max_ts, producer) -> int:
            producers[partition] = producer
            return 1000 * partition + frame.num_rows

        server = HandoffServer(socket_path(tmp_path, 1), wait_leads, append)
        await server.start()
        client = HandoffClient(tmp_path, timeout_s=10)
        try:
            idempotent = {p: ProducerBatch(7, 0, 10 * p) for p in (1, 2)}  # a sequence per partition
            outcomes = await asyncio.gather(
                *(client.send_gathered(1, "t", [Append(p, _frame([b"x"] * (p + 1)), None, idempotent.get(p))], "all")
                  for p in range(4)),
                client.send_gathered(1, "t", [Append(9, _frame([b"x"])), Append(5, _frame([b"y"]))], "all"))
            assert outcomes[:4] == [[1], [1002], [2003], [3004]]
            (kind, error), base = outcomes[4]
            assert kind == REFUSED and isinstance(error, NotLeaderOrFollower) and base == 5001
            assert (client.sent, server.received) == (1, 1)
            assert producers == {0: None, 1: idempotent[1], 2: idempotent[2], 3: None, 5: None}
            await asyncio.gather(client.send_gathered(1, "t", [Append(0, _frame([b"x"]))], "all"),
                                 client.send_gathered(1, "u", [Append(0, _frame([b"x"]))], "all"),
                                 client.send_gathered(1, "t", [Append(0, _frame([b"x"]))], "1"))
            assert (client.sent, server.received) == (4, 4)
            await server.close()
            with pytest.raises(SiblingUnreachable):  # nothing was sent: every caller is told
                await asyncio.gather(*(HandoffClient(tmp_path, timeout_s=10).send_gathered(
                    1, "t", [Append(p, _frame([b"x"]))], "1") for p in range(2)))
        finally:
            await client.close()
            await server.close()

    asyncio.run(run())
