"""The producer's retry rules in process, through a pluggable httpx transport: a
retriable broker error is retried and delivered once, with the batch's producer id,
epoch and sequence unchanged; any other error fails every record of the batch without
a retry."""

from __future__ import annotations

import httpx
import orjson
import pyarrow as pa

from laketail.client import KafkaError, Producer
from laketail.errors import InvalidRecord, NotEnoughReplicas


class FakeGateway:
    """Answers metadata for a one-partition topic ``t`` and replays produce answers."""

    def __init__(self, answers: list[tuple[int, dict]]) -> None:
        self.answers = list(answers)
        self.produced: list[pa.Table] = []
        self.params: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/topics/t/partitions":
            return httpx.Response(200, json=[{"partition": 0, "leader": 0, "replicas": []}])
        if request.url.path == "/v1/producers":
            return httpx.Response(200, json={"producer_id": 7, "producer_epoch": 0})
        assert request.url.path == "/v1/topics/t/partitions/0/records", request.url
        self.params.append(dict(request.url.params))
        self.produced.append(pa.ipc.open_stream(pa.py_buffer(request.content)).read_all())
        status, body = self.answers.pop(0)
        return httpx.Response(status, content=orjson.dumps(body))


def run(gateway: FakeGateway, count: int) -> list[tuple]:
    producer = Producer({"bootstrap.servers": "http://gateway", "retry.backoff.ms": 1, "linger.ms": 600_000},
                        transport=httpx.MockTransport(gateway))
    reports = []
    try:
        for i in range(count):
            producer.produce("t", f"v{i}".encode(), key=b"k",
                             on_delivery=lambda err, msg: reports.append((err, msg.offset(), msg.value())))
        assert producer.flush(30) == 0
    finally:
        producer.close()
    return reports


def test_a_retriable_error_is_retried_and_delivered_once():
    busy = NotEnoughReplicas("one replica short")
    ok = {"offsets": [{"partition": 0, "base_offset": 10, "last_offset": 12, "count": 3}]}
    gateway = FakeGateway([(busy.http_status, busy.to_body()), (200, ok)])
    reports = run(gateway, 3)
    assert reports == [(None, 10, b"v0"), (None, 11, b"v1"), (None, 12, b"v2")]
    assert len(gateway.produced) == 2
    assert gateway.produced[0].equals(gateway.produced[1])  # the same batch, sent again
    assert gateway.params[0] == gateway.params[1] == {
        "acks": "all", "producer_id": "7", "producer_epoch": "0", "sequence": "0", "transactional": "false"}
    assert gateway.produced[0].column("value").to_pylist() == [b"v0", b"v1", b"v2"]


def test_a_non_retriable_error_fails_the_batch():
    bad = InvalidRecord("no good")
    gateway = FakeGateway([(bad.http_status, bad.to_body())])
    reports = run(gateway, 2)
    assert [(err.code(), offset) for err, offset, _ in reports] == [(KafkaError.INVALID_RECORD, -1001)] * 2
    assert len(gateway.produced) == 1
