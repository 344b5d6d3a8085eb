"""The OpenAPI description states what the JSON endpoints take: the fuzzer (and any
client generator) builds requests from it, and an empty body schema would leave the
routes' parsing untested. Many routes parse their raw bodies themselves, so their
bodies are described by hand (``openapi_extra``); this pins that each one is there."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from laketail.api import create_app
from laketail.config import BrokerSettings

#: (method, path, media type) -> properties the body schema must name.
BODIES = {
    ("post", "/topics/{topic}", "application/vnd.kafka.binary.v2+json"): {"records"},
    ("post", "/topics/{topic}", "application/vnd.kafka.json.v2+json"): {"records"},
    ("post", "/topics/{topic}/partitions/{partition}", "application/vnd.kafka.binary.v2+json"): {"records"},
    ("post", "/v3/clusters/{cluster_id}/topics", "application/json"): {"topic_name", "partitions_count"},
    ("post", "/v3/clusters/{cluster_id}/topics/{topic}/configs:alter", "application/json"): {"data"},
    ("post", "/v3/clusters/{cluster_id}/topics/{topic}/records", "application/json"): {"key", "value", "headers"},
    ("post", "/consumers/{group}", "application/vnd.kafka.v2+json"): {"name", "format", "auto.offset.reset"},
    ("post", "/consumers/{group}/instances/{instance}/subscription", "application/vnd.kafka.v2+json"):
        {"topics", "topic_pattern"},
    ("post", "/consumers/{group}/instances/{instance}/assignments", "application/vnd.kafka.v2+json"):
        {"partitions"},
    ("post", "/consumers/{group}/instances/{instance}/positions", "application/vnd.kafka.v2+json"): {"offsets"},
    ("post", "/consumers/{group}/instances/{instance}/positions/beginning", "application/vnd.kafka.v2+json"):
        {"partitions"},
    ("post", "/consumers/{group}/instances/{instance}/positions/end", "application/vnd.kafka.v2+json"):
        {"partitions"},
    ("post", "/consumers/{group}/instances/{instance}/offsets", "application/vnd.kafka.v2+json"): {"offsets"},
    ("get", "/consumers/{group}/instances/{instance}/offsets", "application/vnd.kafka.v2+json"): {"partitions"},
    ("post", "/v1/groups/{group}/join", "application/json"): {"member_id", "topics"},
    ("post", "/v1/groups/{group}/commit", "application/json"): {"offsets"},
    ("post", "/v1/transactions/{transactional_id}/begin", "application/json"): {"producer_id", "producer_epoch"},
    ("post", "/v1/transactions/{transactional_id}/offsets", "application/json"): {"group_id", "offsets"},
    ("post", "/v1/sinks/{sink_id}/batches/{batch_id}/commit", "application/json"): {"transactional_ids"},
}


@pytest.fixture(scope="module")
def description() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        return create_app(BrokerSettings(data=data)).openapi()


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``$ref`` and a nullable ``anyOf`` wrapper followed."""
    while True:
        if "$ref" in schema:
            schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
        else:
            return schema


@pytest.mark.parametrize(("method", "path", "media"), list(BODIES))
def test_json_request_bodies_are_described(description: dict[str, Any], method: str, path: str,
                                           media: str) -> None:
    operation = description["paths"][path][method]
    content = operation.get("requestBody", {}).get("content", {})
    assert media in content, f"{method.upper()} {path} describes no {media} body: {sorted(content)}"
    schema = _resolve(description, content[media]["schema"])
    assert schema.get("type") == "object", schema
    assert BODIES[(method, path, media)] <= set(schema.get("properties", {})), schema
