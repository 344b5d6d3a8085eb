"""The gateway's operational surface: Prometheus metrics, OpenAPI, the body bound and
the error body for anything that is not a route."""

from __future__ import annotations

import pytest
from api_inprocess import BINARY_V2, assert_error, b64, create_topic, gateway, produce
from integration.support import prom_sample

BOUND = 4096


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with gateway(tmp_path_factory.mktemp("api-ops"), socket_request_max_bytes=BOUND) as c:
        yield c


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample (labels matched exactly, in any order)."""
    found = prom_sample(text, name, **labels)
    if found is not None:
        return found
    raise AssertionError(f"no sample {name}{labels}")


def test_metrics_count_requests_and_show_partition_offsets(client):
    create_topic(client, "metered", 2)
    produce(client, "metered", [b"abc", b"de"], partition=1)
    resp = client.get("/topics/metered/partitions/1/records", params={"offset": 0})
    assert resp.status_code == 200
    client.get("/topics/metered/partitions/1/records", params={"offset": 99})  # an error

    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert sample(text, "laketail_produce_records_total", topic="metered") == 2
    assert sample(text, "laketail_produce_bytes_total", topic="metered") == 5
    assert sample(text, "laketail_produce_requests_total", api="v2") >= 1
    assert sample(text, "laketail_produce_latency_seconds_count", api="v2") >= 1
    assert sample(text, "laketail_fetch_records_total", topic="metered") == 2
    assert sample(text, "laketail_fetch_latency_seconds_count", api="v2") >= 1
    assert sample(text, "laketail_request_errors_total", error="OFFSET_OUT_OF_RANGE") >= 1
    assert sample(text, "laketail_partition_log_end_offset", topic="metered", partition="1") == 2
    assert sample(text, "laketail_partition_high_watermark", topic="metered", partition="1") == 2
    assert sample(text, "laketail_partition_log_end_offset", topic="metered", partition="0") == 0
    assert 0 <= sample(text, "laketail_partition_tiered_offset", topic="metered", partition="1") <= 2


def test_openapi_documents_every_api_and_its_bodies(client):
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in ["/topics", "/topics/{topic}", "/topics/{topic}/partitions/{partition}/records",
                 "/v3/clusters", "/v3/clusters/{cluster_id}/topics/{topic}/records",
                 "/v3/clusters/{cluster_id}/topics/{topic}/configs:alter",
                 "/v1/topics/{topic}/records", "/v1/topics/{topic}/partitions/{partition}/offsets",
                 "/metrics"]:
        assert path in paths, path
    v2_body = paths["/topics/{topic}"]["post"]["requestBody"]["content"]
    assert {"application/vnd.kafka.binary.v2+json", "application/vnd.kafka.json.v2+json"} <= set(v2_body)
    v3_body = paths["/v3/clusters/{cluster_id}/topics/{topic}/records"]["post"]["requestBody"]["content"]
    assert "application/json" in v3_body
    v1_body = paths["/v1/topics/{topic}/records"]["post"]["requestBody"]["content"]
    assert "application/vnd.apache.arrow.stream" in v1_body
    acks = [p for p in paths["/topics/{topic}"]["post"]["parameters"] if p["name"] == "acks"]
    assert acks and acks[0]["in"] == "query"


def test_body_over_the_bound_is_413_and_writes_nothing(client):
    create_topic(client, "bounded", 1)
    big = {"records": [{"value": b64(b"x" * BOUND)}]}
    resp = client.post("/topics/bounded", json=big, headers={"Content-Type": BINARY_V2})
    assert_error(resp, 413, 41301, "MESSAGE_TOO_LARGE")

    async def chunked():
        yield b'{"records": [{"value": "'
        for _ in range(BOUND // 1000 + 1):
            yield b"A" * 1000
        yield b'"}]}'

    resp = client.post("/topics/bounded", content=chunked(), headers={"Content-Type": BINARY_V2})
    assert_error(resp, 413, 41301, "MESSAGE_TOO_LARGE")
    assert client.get("/topics/bounded/partitions/0/offsets").json()["end_offset"] == 0
    assert produce(client, "bounded", [b"small"])[0]["offset"] == 0


def test_unknown_route_and_method_keep_the_error_shape(client):
    body = assert_error(client.get("/no/such/route"), 404, 404, "HTTP 404 Not Found")
    assert body == {"error_code": 404, "message": "HTTP 404 Not Found"}  # Confluent's (Jersey's) answer
    assert_error(client.delete("/topics"), 405, 405, "HTTP 405 Method Not Allowed")
