"""The Kafka listener's frame decoder (laketail.kafka.protocol) and listener settings:
unit tests and a hypothesis fuzz of the decoder."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from laketail.config import BrokerSettings
from laketail.errors import InvalidConfig
from laketail.kafka.protocol import SUPPORTED, CloseConnection, build, decode_request, encode_response
from laketail.security.listeners import exposure_problems, listener_plan


def request_frame(api_key: int, version: int, body: dict, correlation_id: int = 1, client_id: str = "t") -> bytes:
    """A request frame as a client writes it (without the size prefix), built with kio."""
    cls = load_request_schema(api_key, version)
    header = cls.__header_schema__
    buf = io.BytesIO()
    fields = {"request_api_key": api_key, "request_api_version": version, "correlation_id": correlation_id,
              "client_id": client_id}
    entity_writer(header)(buf, build(header, fields))
    entity_writer(cls)(buf, build(cls, body))
    return buf.getvalue()


def test_every_supported_version_round_trips_a_default_request():
    for key, (_, low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            frame = request_frame(key, version, {}, correlation_id=version)
            req = decode_request(frame)
            assert (req.api_key, req.api_version, req.correlation_id) == (key, version, version)


def test_api_versions_too_new_is_answered_in_v0_layout():
    frame = struct.pack(">hhi", 18, 99, 42) + b"\x00\x01x" + b"future body bytes"
    req = decode_request(frame)
    assert req.body is None and req.correlation_id == 42
    answer = encode_response(req, build(req.response_type, {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 3}]}))
    size, correlation_id, error_code, count = struct.unpack_from(">iihi", answer)
    assert (size, correlation_id, error_code, count) == (len(answer) - 4, 42, 35, 1)


@pytest.mark.parametrize("frame,why", [
    (struct.pack(">hhi", 1000, 0, 1) + b"\x00\x00", "API key 1000"),
    (struct.pack(">hhi", 0, 2, 1) + b"\x00\x00", "Produce v2"),  # below the served range
    (struct.pack(">hhi", 1, 99, 1) + b"\x00\x00", "Fetch v99"),
    (b"\x00\x03", "no header"),
])
def test_frames_kafka_drops_close_the_connection(frame, why):
    with pytest.raises(CloseConnection, match=why):
        decode_request(frame)


def test_bytes_after_the_body_are_ignored_as_kafka_does():
    # librdkafka 2.x sends this Metadata v12 (AdminClient.list_topics): 3 bytes after the body
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    req = decode_request(frame)
    assert (req.api_key, req.api_version, req.client_id, req.body.topics) == (3, 12, "rdkafka", None)


def test_a_truncated_body_closes_the_connection():
    frame = request_frame(0, 7, {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"x" * 100}]}]})
    with pytest.raises(CloseConnection):
        decode_request(frame[:-10])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api_key=st.sampled_from(sorted(SUPPORTED) + [7, 1000, -1]), version=st.integers(-2, 20),
       rest=st.binary(max_size=300))
def test_fuzz_any_frame_decodes_or_closes_the_connection(api_key, version, rest):
    """Arbitrary bytes behind a plausible key and version: the decoder answers a
    Request or CloseConnection, never anything else (an escaping error would end the
    connection's task with a traceback instead of a clean close)."""
    frame = struct.pack(">hh", api_key, version) + rest
    try:
        req = decode_request(frame)
    except CloseConnection:
        return
    assert req.api_key == api_key


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzz_mutated_real_requests(data):
    """Real requests (a Produce and a Metadata) with bytes flipped, cut or added."""
    base = data.draw(st.sampled_from([
        request_frame(0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "topic", "partition_data": [{"index": 0, "records": b"\x00" * 70}]}]}),
        request_frame(3, 12, {"topics": [{"name": "a"}, {"name": "b"}]}),
        request_frame(11, 7, {"group_id": "g", "session_timeout": 10_000, "member_id": "", "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b"\x00\x00"}]}),
    ]))
    frame = bytearray(base)
    for _ in range(data.draw(st.integers(1, 5))):
        pos = data.draw(st.integers(4, len(frame) - 1))
        frame[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(frame)))
    try:
        decode_request(bytes(frame[:cut]) + data.draw(st.binary(max_size=8)))
    except CloseConnection:
        pass


def test_kio_reads_back_what_build_wrote():
    cls = load_request_schema(3, 12)
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, {"topics": [{"name": "x"}], "allow_auto_topic_creation": False}))
    body, _ = entity_reader(cls)(buf.getvalue(), 0)
    assert [t.name for t in body.topics] == ["x"] and body.allow_auto_topic_creation is False
    assert ErrorCode(3) is ErrorCode.unknown_topic_or_partition


# -- the listener settings ---------------------------------------------------------------------


def test_a_kafka_listener_beside_the_default_http_one():
    plan = listener_plan(BrokerSettings(listeners="KAFKA://127.0.0.1:9092",
                                        listener_security_protocol_map="KAFKA:PLAINTEXT"))
    assert [(lst.name, lst.port, lst.inter_broker) for lst in plan.listeners] == [("PLAINTEXT", 8082, True)]
    assert plan.shared
    assert [(lst.name, lst.port, lst.advertised_url) for lst in plan.kafka] == [
        ("KAFKA", 9092, "kafka://127.0.0.1:9092")]


def test_advertised_listeners_give_the_kafka_address_metadata_answers():
    plan = listener_plan(BrokerSettings(
        listeners="PLAINTEXT://0.0.0.0:8082,KAFKA://0.0.0.0:9092", listener_security_protocol_map="KAFKA:PLAINTEXT",
        advertised_listeners="KAFKA://broker-0.example:19092"))
    assert plan.shared and len(plan.listeners) == 1  # the Kafka one is not a second HTTP listener
    assert plan.kafka[0].advertised_url == "kafka://broker-0.example:19092"
    assert any("KAFKA" in p for p in exposure_problems(plan, "none"))  # 0.0.0.0 and nobody authenticated


@pytest.mark.parametrize("settings_kw,match", [
    ({"listeners": "KAFKA://127.0.0.1:9092"}, "no protocol for listener KAFKA"),
    ({"listeners": "KAFKA://127.0.0.1:9092", "listener_security_protocol_map": "KAFKA:SASL_SSL"},
     "set ssl.keystore.certificate.chain"),
    ({"listeners": "CLIENT://127.0.0.1:8082,KAFKA://127.0.0.1:9092", "listener_security_protocol_map":
      "CLIENT:PLAINTEXT,KAFKA:PLAINTEXT", "inter_broker_listener_name": "KAFKA"}, "brokers talk HTTP"),
])
def test_kafka_listener_settings_refused(settings_kw, match):
    with pytest.raises(InvalidConfig, match=match):
        listener_plan(BrokerSettings(**settings_kw))


def test_laketail_kafka_listener_names_picks_which_listeners_speak_kafka():
    plan = listener_plan(BrokerSettings(listeners="EXTERNAL://127.0.0.1:9092",
                                        listener_security_protocol_map="EXTERNAL:PLAINTEXT",
                                        kafka_listener_names="EXTERNAL"))
    assert [lst.name for lst in plan.kafka] == ["EXTERNAL"]


def test_a_client_assignor_name_maps_to_a_coordinator_strategy():
    """kafkajs offers "RoundRobinAssigner"; the coordinator assigns (docs §9.2)."""
    from laketail.kafka.apis import _strategy

    assert [_strategy(n) for n in ("range", "cooperative-sticky", "RoundRobinAssigner", "custom")] == [
        "range", "cooperative-sticky", "roundrobin", "range"]


def test_the_kafka_listener_idle_timeout_is_kafkas_and_its_own_setting():
    """laketail.kafka.connections.max.idle.ms: Kafka's default (10 min), apart from
    HTTP's connections.max.idle.ms; an idle connection is closed when it passes."""
    import asyncio

    from laketail.kafka.server import KafkaListener
    from laketail.security.listeners import Listener

    lst = Listener("KAFKA", "127.0.0.1", 0, "PLAINTEXT", False, "kafka://127.0.0.1:0")
    assert KafkaListener(lst, None, BrokerSettings()).idle_s == 600.0  # type: ignore[arg-type]
    settings = BrokerSettings(kafka_connections_max_idle_ms=200)  # HTTP's stays 30 s

    async def idle_connection_closes() -> bytes:
        listener = KafkaListener(lst, None, settings)  # type: ignore[arg-type]  # no request reaches the apis
        await listener.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
            got = await asyncio.wait_for(reader.read(1), 20)  # b"": the broker closed it
            writer.close()
            return got
        finally:
            await listener.close()

    assert asyncio.run(idle_connection_closes()) == b""
