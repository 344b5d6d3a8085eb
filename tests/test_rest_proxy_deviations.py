"""The REST Proxy deviations a peer proxy's published suite measured (issue 37, section 2),
each held to its primary source, against an in-process gateway.

The peer suite is Karapace's REST proxy suite (Aiven-Open/karapace
``tests/integration/test_rest.py``): ``test_content_types``,
``test_publish_malformed_requests``, ``test_too_large_record``; its consumer suite
(``test_rest_consumer.py``) for subscription bodies and long polls. Confluent's
kafka-rest is cited where it decides (``Versions.java``, ``AbstractProduceAction``,
``KafkaConsumerReadTask``, Jersey's ``@PathParam`` handling).
"""

from __future__ import annotations

import uuid

import pytest
from api_inprocess import BINARY_V2, JSON_V2, V2, assert_error, b64, create_topic, gateway


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with gateway(tmp_path_factory.mktemp("deviations")) as c:
        yield c


@pytest.fixture
def topic(client):
    name = f"dev-{uuid.uuid4().hex[:10]}"
    create_topic(client, name, 1)
    return name


# Confluent's grammar application/vnd.kafka[.embedded_format][.api_version]+json (API
# reference, "Content Types"; API versions v1 and v2; "if the embedded format is
# omitted, binary is assumed"); the peer suite's valid_headers, less its avro one
# (which needs a schema: tests/schemas/test_embedded_formats.py).
VALID_CONTENT_TYPES = [
    ("application/vnd.kafka.v1+json", "binary"),
    ("application/vnd.kafka.binary.v1+json", "binary"),
    ("application/vnd.kafka.json+json", "json"),
    ("application/vnd.kafka+json", "binary"),
    ("application/json", "binary"),
    ("application/octet-stream", "binary"),
]
# the peer suite's invalid_headers: all refused
INVALID_CONTENT_TYPES = [
    "application/vnd.kafka.v3+json", "application/vnd.kafka.binary.v1+foo", "application/vnd.kafka.avro.v0+json",
    "application/vnd.kafka.json+avro", "application/vnd.kafka", "application/vnd.kafka+binary",
    "application/text", "bar/baz",
]


@pytest.mark.parametrize("content_type,embedded", VALID_CONTENT_TYPES)
def test_the_content_types_of_the_grammar_are_taken(client, topic, content_type, embedded):
    value = b64(b"foo") if embedded == "binary" else {"foo": "bar"}
    resp = client.post(f"/topics/{topic}", json={"records": [{"value": value}]},
                       headers={"Content-Type": content_type})
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("content_type", INVALID_CONTENT_TYPES)
def test_content_types_outside_the_grammar_are_refused(client, topic, content_type):
    resp = client.post(f"/topics/{topic}", json={"records": [{"value": b64(b"foo")}]},
                       headers={"Content-Type": content_type})
    assert_error(resp, 415, 41501, "INVALID_REQUEST")


@pytest.mark.parametrize("accept", ["application/vnd.kafka.v1+json", "application/vnd.kafka+json", "application/json",
                                    "application/*", "*/json", "*/*", V2])
def test_acceptable_accept_values_answer(client, topic, accept):
    # the peer suite's valid_accept_headers, on GET /brokers
    for path in ("/brokers", "/topics", f"/topics/{topic}/partitions/0/offsets"):
        assert client.get(path, headers={"Accept": accept}).status_code == 200


@pytest.mark.parametrize("accept", ["application/octet-stream", "application/vnd.kafka+foo", "application/text",
                                    "foo/*", "bar/json", "*/baz"])
def test_an_unacceptable_accept_is_406(client, topic, accept):
    # the peer suite's invalid_accept_headers ("assert not res.ok"); Jersey answers an
    # Accept none of the resource's @Produces types match with 406
    for path in ("/brokers", "/topics", f"/topics/{topic}", f"/topics/{topic}/partitions/0/offsets"):
        assert_error(client.get(path, headers={"Accept": accept}), 406, 40601, "INVALID_REQUEST")


@pytest.mark.parametrize("body", [{"records": []}, {"foo": "bar"}, {"records": [{"valur": {"foo": "bar"}}]}],
                         ids=["empty-records", "unknown-body-field", "only-an-unknown-record-field"])
@pytest.mark.parametrize("partitioned", [False, True])
def test_malformed_produce_bodies_are_422_and_write_nothing(client, topic, body, partitioned):
    # test_publish_malformed_requests: "for js in [...]: assert res.status_code == 422";
    # kafka-rest's v2 ProduceRequest declares ``@NotEmpty records`` (bean validation: 422)
    path = f"/topics/{topic}/partitions/0" if partitioned else f"/topics/{topic}"
    resp = client.post(path, json=body, headers={"Content-Type": JSON_V2})
    assert_error(resp, 422, 42200, "INVALID_REQUEST")
    assert client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"] == 0


def test_records_of_the_wrong_shape_stay_400(client, topic):
    # the same peer test: "records": "should be an array" and ["object with value"] are 400
    for body in ({"records": "should be an array"}, {"records": ["object with value"]}):
        resp = client.post(f"/topics/{topic}", json=body, headers={"Content-Type": BINARY_V2})
        assert_error(resp, 400, 40002, "INVALID_REQUEST")


def test_application_json_takes_binary_values_and_says_which_type_takes_json(client, topic):
    # Confluent's rule: a content type without an embedded format means binary
    resp = client.post(f"/topics/{topic}", json={"records": [{"value": "plain text"}]},
                       headers={"Content-Type": "application/json"})
    body = assert_error(resp, 422, 42206, "INVALID_RECORD")
    assert "application/json" in body["message"] and JSON_V2 in body["message"], body


@pytest.mark.parametrize("path", ["/topics/{t}/partitions/foo/offsets", "/topics/{t}/partitions/foo",
                                  "/topics/{t}/partitions/1.5/offsets"])
def test_a_partition_that_is_not_an_integer_matches_no_route(client, topic, path):
    # Jersey cannot convert the @PathParam int: 404, the route does not match
    resp = client.get(path.format(t=topic))
    assert_error(resp, 404, 404, "HTTP 404 Not Found")


def _consumer(client, group: str) -> str:
    resp = client.post(f"/consumers/{group}", json={"name": "c"}, headers={"Content-Type": V2})
    assert resp.status_code == 200, resp.text
    return f"/consumers/{group}/instances/c"


@pytest.mark.parametrize("body", [{"topics": "a-topic"}, {"topic_pattern": ["a", "b"]}],
                         ids=["topics-as-a-string", "pattern-as-a-list"])
def test_a_subscription_field_of_the_wrong_type_is_422(client, body):
    # the peer consumer suite: topics as a string / topic_pattern as a list -> 422
    path = _consumer(client, f"g-{uuid.uuid4().hex[:8]}")
    resp = client.post(path + "/subscription", json=body, headers={"Content-Type": V2})
    assert_error(resp, 422, 42200, "INVALID_REQUEST")
