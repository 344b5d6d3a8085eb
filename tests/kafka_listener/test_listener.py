"""The Kafka listener over raw sockets: what closes a connection (and only that one),
and a produce whose batch fails validation writing nothing."""

from __future__ import annotations

import socket
import struct
import uuid

import httpx
import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from laketail.kafka import records
from laketail.kafka.protocol import SUPPORTED
from tests.kafka_listener.test_protocol import request_frame

pytestmark = pytest.mark.integration


def _connect(kafka_broker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", kafka_broker.kafka_port), timeout=30)
    return sock


def _read_frame(sock: socket.socket) -> bytes:
    head = _read_exactly(sock, 4)
    (size,) = struct.unpack(">i", head)
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _call(sock: socket.socket, api_key: int, version: int, body: dict, correlation_id: int = 7):
    frame = request_frame(api_key, version, body, correlation_id)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    answer = _read_frame(sock)
    response = load_response_schema(api_key, version)
    header, used = entity_reader(response.__header_schema__)(answer, 0)
    assert header.correlation_id == correlation_id
    return entity_reader(response)(answer, used)[0]


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def _api_versions_answer(kafka_broker) -> list[int]:
    with _connect(kafka_broker) as sock:
        answer = _call(sock, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
        return sorted(k.api_key for k in answer.api_keys)


def test_api_versions_lists_only_what_is_served(kafka_broker):
    assert _api_versions_answer(kafka_broker) == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22,
                                                  23, 24, 25, 26, 28, 29, 30, 31, 32, 33, 36, 37, 42, 44, 47, 60, 61,
                                                  65, 66]


@pytest.mark.parametrize("send", [
    struct.pack(">i", 200 * 1024 * 1024),  # above socket.request.max.bytes: nothing more is read
    struct.pack(">i", 3) + b"abc",  # too short for a header
    struct.pack(">i", 10) + struct.pack(">hhi", 1000, 0, 1) + b"\x00\x00",  # unknown API key
    struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\xff\xff",  # a body that does not parse
])
def test_bad_frames_close_that_connection_and_others_are_served(kafka_broker, send):
    with _connect(kafka_broker) as other, _connect(kafka_broker) as bad:
        bad.sendall(send)
        assert _closed(bad)
        answer = _call(other, 3, 12, {"topics": []})  # the other connection still gets answers
        assert [b.port for b in answer.brokers] == [kafka_broker.kafka_port]
    assert len(_api_versions_answer(kafka_broker)) == len(SUPPORTED)


def test_api_versions_newer_than_served_gets_v0_with_unsupported_version(kafka_broker):
    with _connect(kafka_broker) as sock:
        frame = struct.pack(">hhi", 18, 42, 99) + b"\x00\x01t" + b"\x00" * 5
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        answer = _read_frame(sock)
    correlation_id, error_code = struct.unpack_from(">ih", answer)
    assert (correlation_id, error_code) == (99, 35)


def _produce_body(topic: str, batch: bytes, acks: int = -1) -> dict:
    return {"acks": acks, "timeout": 30_000, "transactional_id": None,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def test_a_batch_with_a_bad_crc_gets_corrupt_message_and_writes_nothing(kafka_broker):
    topic = f"crc-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 1).status_code in (200, 201)
    good = records.encode_batch(0, [0], [1000], [b"k"], [b"v"], [None])
    bad = bytearray(good)
    bad[-1] ^= 0x01
    with _connect(kafka_broker) as sock:
        answer = _call(sock, 0, 9, _produce_body(topic, bytes(good) + bytes(bad)))
        part = answer.responses[0].partition_responses[0]
        assert (int(part.error_code), part.base_offset) == (2, -1)  # CORRUPT_MESSAGE
        # nothing of the request was written, not even its good first batch
        assert kafka_broker.rest.offsets(topic, 0)[1] == 0
        answer = _call(sock, 0, 9, _produce_body(topic, good), correlation_id=8)
        assert int(answer.responses[0].partition_responses[0].error_code) == 0
    assert kafka_broker.rest.offsets(topic, 0)[1] == 1


def test_produce_to_an_unknown_partition_is_unknown_topic_or_partition(kafka_broker):
    good = records.encode_batch(0, [0], [1000], [None], [b"v"], [None])
    with _connect(kafka_broker) as sock:
        answer = _call(sock, 0, 9, _produce_body(f"missing-{uuid.uuid4().hex[:6]}", good))
    assert int(answer.responses[0].partition_responses[0].error_code) == 3


def test_invalid_acks_is_invalid_required_acks(kafka_broker):
    topic = f"acks-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 1).status_code in (200, 201)
    good = records.encode_batch(0, [0], [1000], [None], [b"v"], [None])
    with _connect(kafka_broker) as sock:
        answer = _call(sock, 0, 9, _produce_body(topic, good, acks=2))
    assert int(answer.responses[0].partition_responses[0].error_code) == 21
    assert httpx.get(f"{kafka_broker.url}/topics/{topic}/partitions/0/offsets").json()["end_offset"] == 0


def test_an_incremental_fetch_of_an_unknown_session_is_fetch_session_id_not_found(kafka_broker):
    with _connect(kafka_broker) as sock:
        answer = _call(sock, 1, 12, {"max_wait": 0, "min_bytes": 1, "session_id": 123, "session_epoch": 1,
                                     "topics": [], "forgotten_topics_data": []})
    assert (int(answer.error_code), answer.session_id) == (70, 0)  # FETCH_SESSION_ID_NOT_FOUND


def test_a_record_above_max_message_bytes_is_message_too_large_and_writes_nothing(kafka_broker):
    topic = f"big-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 1, configs={"max.message.bytes": "2000"}).status_code in (200, 201)
    batch = records.encode_batch(0, [0, 1], [1000, 1000], [None, None], [b"small", b"x" * 5000], [None, None])
    with _connect(kafka_broker) as sock:
        answer = _call(sock, 0, 9, _produce_body(topic, batch))
    assert int(answer.responses[0].partition_responses[0].error_code) == 10  # MESSAGE_TOO_LARGE
    assert kafka_broker.rest.offsets(topic, 0)[1] == 0


def test_a_log_append_time_topic_stamps_the_records_itself(kafka_broker):
    topic = f"lat-{uuid.uuid4().hex[:8]}"
    configs = {"message.timestamp.type": "LogAppendTime"}
    assert kafka_broker.rest.create_topic(topic, 1, configs=configs).status_code in (200, 201)
    batch = records.encode_batch(0, [0, 1], [1000, 2000], [None, None], [b"a", b"b"], [None, None])
    with _connect(kafka_broker) as sock:
        answer = _call(sock, 0, 9, _produce_body(topic, batch))
        assert int(answer.responses[0].partition_responses[0].error_code) == 0
        fetched = _call(sock, 1, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]})
    raw = fetched.responses[0].partitions[0].records
    (batch_out,) = records.split_batches(raw)
    attributes, = struct.unpack_from(">h", batch_out, 21)
    assert attributes & records.ATTR_LOG_APPEND_TIME
    assert min(records.decode_batch(batch_out).timestamps_ms) > 2000  # the broker's clock, not the client's


def test_the_pass_on_route_refuses_what_is_not_a_kafka_request_and_writes_nothing(kafka_broker):
    """``POST /internal/v1/kafka/{listener}`` (a sibling request process passing a frame on):
    an unknown listener, bytes that are no request and a body past socket.request.max.bytes
    are 4xx; a real frame after them is answered."""
    topic = f"pass-{uuid.uuid4().hex[:8]}"
    assert kafka_broker.rest.create_topic(topic, 1).status_code in (200, 201)
    http = kafka_broker.rest.http
    frame = request_frame(18, 3, {"client_software_name": "t", "client_software_version": "1"}, 7)
    assert http.post("/internal/v1/kafka/NOPE", content=frame).status_code == 400
    for junk in (b"", b"\x00\x12", struct.pack(">hhi", 1000, 0, 1) + b"\x00\x00",
                 struct.pack(">hhi", 3, 12, 1) + b"\xff" * 64):
        resp = http.post("/internal/v1/kafka/KAFKA", content=junk)
        assert resp.status_code == 400, (junk, resp.status_code, resp.text)
    produce = request_frame(0, 9, _produce_body(topic, records.encode_batch(0, [0], [1000], [None], [b"v"], [None])),
                            8)
    huge = produce + b"\x00" * (101 * 1024 * 1024)
    assert http.post("/internal/v1/kafka/KAFKA", content=huge).status_code == 413
    assert http.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"] == 0  # nothing written
    assert http.post("/internal/v1/kafka/KAFKA", content=frame).status_code == 200
