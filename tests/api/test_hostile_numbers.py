"""Numbers a client may not send, in every path, query and body field of the routes
changed since 22b62ef: each is a 4xx in the gateway's error shape (a Confluent code,
Kafka's error name), never a 500, and changes nothing (topics, log start and end
offsets, committed offsets, consumer instances: :func:`hostile.snapshot`).

The table is per field, not per value: every field gets the values that are wrong for
its type (not decimal digits at all, past int32 for a partition, past int64 for the
rest, negative where Kafka forbids it), so a route that stops checking a field fails
here whichever value slips through.
"""

from __future__ import annotations

from typing import Iterator
from urllib.parse import quote

import orjson
import pytest
from conftest import running_broker

from tests.transactions.support import arrow_body

from .hostile import (
    ARROW,
    BINARY_V2,
    ENV,
    GROUP,
    INSTANCE,
    JSON,
    TOPIC,
    V2,
    World,
    assert_kafka_error,
    seed,
    snapshot,
)

pytestmark = pytest.mark.integration

#: Not a decimal integer: what Python's int() or pydantic would read anyway included.
NOT_DECIMAL = ["1.5", "1e309", "NaN", "1_000", " 5", "5 ", "+5", "0x10", "\u0665", "five", "--1"]
PAST_INT64 = [str(2**63), str(-(2**63) - 1), "9" * 5000]
PAST_INT32 = [str(2**31), str(-(2**31) - 1), *PAST_INT64]
#: kafka-rest's answer when no route matches, a path parameter it cannot convert included.
ROUTE_NOT_FOUND = {"error_code": 404, "message": "HTTP 404 Not Found"}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    for broker in running_broker(tmp_path_factory, "hostile-numbers", ENV):
        yield seed(broker)


_RECORD = {"records": [{"value": "AA=="}]}
_FETCH_QUERY = {"offset": "0", "max_records": "5", "max_bytes": "100000", "timeout": "0"}

# -- each field: (id, request template, the values wrong for it) -------------------------------
#
# A template is (method, path, query, kwargs); "{v}" in the path or a query value is the
# value under test (quoted for the URL).

PARTITION_IN_PATH = [
    ("v2 partition", ("GET", "/topics/{t}/partitions/{v}", {}, {})),
    ("v2 partition offsets", ("GET", "/topics/{t}/partitions/{v}/offsets", {}, {})),
    ("v2 fetch", ("GET", "/topics/{t}/partitions/{v}/records", {"offset": "0"}, {})),
    ("v1 arrow fetch", ("GET", "/v1/topics/{t}/partitions/{v}/records", {"offset": "0"}, {})),
    ("v2 produce to a partition", ("POST", "/topics/{t}/partitions/{v}", {}, {"json": _RECORD, "headers": BINARY_V2})),
    ("v1 arrow produce to a partition", ("POST", "/v1/topics/{t}/partitions/{v}/records", {},
                                         {"content": arrow_body([b"x"]), "headers": ARROW})),
    ("v3 lag of a partition", ("GET", "/v3/clusters/{c}/consumer-groups/{g}/lags/{t}/partitions/{v}", {}, {})),
]

FETCH_QUERY = [
    (f"{route} {name}", ("GET", path, {**_FETCH_QUERY, name: "{v}"}, {}))
    for route, path in (("v2 fetch", "/topics/{t}/partitions/0/records"),
                        ("v1 arrow fetch", "/v1/topics/{t}/partitions/0/records"))
    for name in _FETCH_QUERY
]
#: Fields at least 1 (max_records, max_bytes) or 0 (timeout): Kafka forbids what is below.
FETCH_BELOW = [
    (f"{route} {name}={low}", ("GET", path, {**_FETCH_QUERY, name: low}, {}))
    for route, path in (("v2 fetch", "/topics/{t}/partitions/0/records"),
                        ("v1 arrow fetch", "/v1/topics/{t}/partitions/0/records"))
    for name, low in (("max_records", "0"), ("max_bytes", "0"), ("max_bytes", "-1"), ("timeout", "-1"))
]

_PRODUCER = {"producer_id": "1", "producer_epoch": "0", "sequence": "0"}
PRODUCER_QUERY = [
    (f"{route} {name}", ("POST", path, {**_PRODUCER, name: "{v}"}, kwargs))
    for route, path, kwargs in (
        ("v2 produce", "/topics/{t}/partitions/0", {"json": _RECORD, "headers": BINARY_V2}),
        ("v1 arrow produce", "/v1/topics/{t}/partitions/0/records", {"content": arrow_body([b"x"]), "headers": ARROW}),
    )
    for name in _PRODUCER
]
PRODUCER_OUT = {"producer_id": ["-1", *PAST_INT64], "producer_epoch": ["-1", "32768"],
                "sequence": ["-1", *PAST_INT32]}

POLL_QUERY = [(f"v2 consumer poll {name}", ("GET", INSTANCE + "/records", {name: "{v}"}, {}))
              for name in ("timeout", "max_bytes")]

CONSOLE_PAGES = [
    (f"console {path} {name}", ("GET", path, {name: "{v}"}, {}))
    for path in ("/v1/console/topics", "/v1/console/groups", "/v1/console/transactions",
                 "/v1/console/topics/{t}/partitions", "/v1/console/groups/{g}")
    for name in ("limit", "offset")
]
CONSOLE_OUT = {"limit": ["0", "-1", "1001"], "offset": ["-1"]}
MAX_POINTS = [("console lag-history max_points", ("GET", "/v1/console/groups/{g}/lag-history",
                                                   {"max_points": "{v}"}, {}))]

CASES = (
    [(name, template, value) for name, template in PARTITION_IN_PATH for value in NOT_DECIMAL + PAST_INT32]
    + [(name, template, value) for name, template in FETCH_QUERY for value in ["", *NOT_DECIMAL, *PAST_INT64]]
    + [(name, template, None) for name, template in FETCH_BELOW]
    + [(name, template, value) for name, template in PRODUCER_QUERY
       for value in NOT_DECIMAL + PRODUCER_OUT[name.rsplit(" ", 1)[1]]]
    + [(name, template, value) for name, template in POLL_QUERY for value in ["", *NOT_DECIMAL, *PAST_INT64]]
    + [(name, template, value) for name, template in CONSOLE_PAGES
       for value in ["", *NOT_DECIMAL, *PAST_INT64, *CONSOLE_OUT[name.rsplit(" ", 1)[1]]]]
    + [(name, template, value) for name, template in MAX_POINTS
       for value in ["", *NOT_DECIMAL, "0", "5001", *PAST_INT64]]
)


def _send(world: World, template: tuple, value: str | None):
    method, path, query, kwargs = template
    names = {"t": TOPIC, "g": GROUP, "c": world.cluster_id}
    if value is not None:
        names["v"] = quote(value, safe="")
    url = path.format(**names)
    parts = [f"{quote(k)}={quote(v, safe='') if v != '{v}' else names['v']}" for k, v in query.items()]
    return world.http.request(method, url + ("?" + "&".join(parts) if parts else ""), **kwargs)


def test_every_case_is_a_4xx_with_a_kafka_error_and_changes_nothing(world):
    """One test over the whole table (hundreds of requests on one broker): the state is
    compared once per field, and every failing case is listed, not only the first."""
    failures = []
    before = snapshot(world)
    for name, template, value in CASES:
        resp = _send(world, template, value)
        try:
            if "{v}" in template[1] and resp.status_code == 404 and resp.json() == ROUTE_NOT_FOUND:
                continue  # a path segment its route cannot take: no route matches (kafka-rest's 404)
            assert_kafka_error(resp, (400, 404, 413, 422))
            assert resp.status_code != 404 or value is not None and value.lstrip("-").isdigit(), resp.text
        except AssertionError as exc:
            failures.append(f"{name} = {value!r}: {exc}")
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures[:40])
    assert snapshot(world) == before, "a refused request changed the broker's state"


@pytest.mark.parametrize("field,value", [(f, v) for f in PRODUCER_OUT for v in PRODUCER_OUT[f][:2]])
def test_producer_numbers_out_of_their_kafka_type_are_40002(world, field, value):
    resp = _send(world, ("POST", "/topics/{t}/partitions/0", {**_PRODUCER, field: "{v}"},
                         {"json": _RECORD, "headers": BINARY_V2}), value)
    assert_kafka_error(resp, 400, 40002)


@pytest.mark.parametrize("value", [" 0", "+0", "0.0", "0_0", str(2**31)])
def test_a_partition_spelled_oddly_is_not_read_as_a_partition(world, value):
    """Before: FastAPI's int parameters read ' 0' and '+0' as partition 0 and answered 200.
    Now no route matches such a segment: kafka-rest's (Jersey's) 404 for a @PathParam it
    cannot convert, as issue 37 asks for ``/partitions/foo/offsets``."""
    for path in ("/topics/{t}/partitions/{v}", "/topics/{t}/partitions/{v}/offsets"):
        resp = _send(world, ("GET", path, {}, {}), value)
        assert resp.status_code == 404 and resp.json() == ROUTE_NOT_FOUND, resp.text


REPEATED = [
    ("GET", "/topics/{t}/partitions/0/records", "offset=0&offset=1"),
    ("GET", "/topics/{t}/partitions/0/records", "offset=1&offset=0&max_records=1"),
    ("GET", "/topics/{t}/partitions/0/records", "offset=0&timeout=%200&timeout=0"),
    ("GET", "/v1/topics/{t}/partitions/0/records", "offset=0&max_records=1&max_records=2"),
    ("GET", INSTANCE + "/records", "timeout=0&timeout=0"),
    ("GET", "/topics/{t}/partitions/0/offsets", "isolation_level=read_uncommitted&isolation_level=read_committed"),
    ("GET", "/topics/{t}/partitions", "allow_auto_topic_creation=false&allow_auto_topic_creation=true"),
    ("GET", "/v1/console/topics", "limit=abc&limit=5"),
    ("GET", "/v1/console/groups/{g}/lag-history", "max_points=5&max%5Fpoints=6"),
    ("POST", "/topics/{t}", "acks=0&acks=all"),
    ("POST", "/topics/{t}/partitions/0", "producer_id=1&producer_epoch=0&sequence=0&sequence=1"),
]


@pytest.mark.parametrize("method,path,query", REPEATED, ids=[f"{m} {p} {q}" for m, p, q in REPEATED])
def test_a_query_parameter_given_twice_is_40002(world, method, path, query):
    """Starlette keeps the last value, Jersey the first: neither is guessed, on any route."""
    before = snapshot(world)
    kwargs = {"json": _RECORD, "headers": BINARY_V2} if method == "POST" else {}
    resp = world.http.request(method, path.format(t=TOPIC, g=GROUP) + "?" + query, **kwargs)
    assert_kafka_error(resp, 400, 40002)
    assert "more than once" in resp.json()["message"]
    assert snapshot(world) == before


# -- bodies -------------------------------------------------------------------------------------

JSON_V2 = {"Content-Type": "application/vnd.kafka.json.v2+json"}

#: JSON numbers for an int field: too large for int64 (orjson reads 2**64 as a float),
#: fractional, a string or a boolean that lax parsing would turn into a number.
BODY_NOT_INT64 = ["9223372036854775808", "18446744073709551616", "-9223372036854775809", "1.5", '"5"', "true"]
BODY_NOT_INT32 = ["2147483648", "-2147483649", *BODY_NOT_INT64]

BODY_CASES = [
    ("v2 create instance fetch.min.bytes", "POST", "/consumers/hostile-new", '{{"name": "n1", "fetch.min.bytes": {v}}}',
     V2, ["2147483648", "9223372036854775808", "1.5", '" 5 5"', '"1_000"', '"-2"']),
    ("v2 create instance consumer.request.timeout.ms", "POST", "/consumers/hostile-new",
     '{{"name": "n2", "consumer.request.timeout.ms": {v}}}', V2, ["2147483648", "-1", "1.5", '"1_000"']),
    ("v2 assign partition", "POST", INSTANCE + "/assignments",
     '{{"partitions": [{{"topic": "{t}", "partition": {v}}}]}}', V2, BODY_NOT_INT32),
    ("v2 seek offset", "POST", INSTANCE + "/positions",
     '{{"offsets": [{{"topic": "{t}", "partition": 0, "offset": {v}}}]}}', V2, BODY_NOT_INT64),
    ("v2 seek partition", "POST", INSTANCE + "/positions",
     '{{"offsets": [{{"topic": "{t}", "partition": {v}, "offset": 0}}]}}', V2, BODY_NOT_INT32),
    ("v2 seek timestamp", "POST", INSTANCE + "/positions",
     '{{"timestamps": [{{"topic": "{t}", "partition": 0, "timestamp": {v}}}]}}', V2,
     ["-1", "1e13", "true", '"yesterday"', '"1969-12-31T23:59:59Z"', '"0001-01-01T00:00:00Z"']),
    ("v2 seek to beginning partition", "POST", INSTANCE + "/positions/beginning",
     '{{"partitions": [{{"topic": "{t}", "partition": {v}}}]}}', V2, BODY_NOT_INT32),
    ("v2 seek to end partition", "POST", INSTANCE + "/positions/end",
     '{{"partitions": [{{"topic": "{t}", "partition": {v}}}]}}', V2, BODY_NOT_INT32),
    ("v2 commit offset", "POST", INSTANCE + "/offsets",
     '{{"offsets": [{{"topic": "{t}", "partition": 0, "offset": {v}}}]}}', V2, ["-5", *BODY_NOT_INT64]),
    ("v2 commit partition", "POST", INSTANCE + "/offsets",
     '{{"offsets": [{{"topic": "{t}", "partition": {v}, "offset": 0}}]}}', V2, BODY_NOT_INT32),
    ("v2 committed partition", "GET", INSTANCE + "/offsets", '{{"partitions": [{{"topic": "{t}", "partition": {v}}}]}}',
     V2, BODY_NOT_INT32),
    ("v2 produce record partition", "POST", "/topics/{t}", '{{"records": [{{"value": "AA==", "partition": {v}}}]}}',
     BINARY_V2, BODY_NOT_INT32),
    ("v2 produce json value past 64 bits", "POST", "/topics/{t}", '{{"records": [{{"value": {v}}}]}}', JSON_V2,
     ["18446744073709551616", "-9223372036854775809", "1" + "0" * 40, '{"a": [1, 100000000000000000000000]}']),
    ("console reset offset", "POST", "/v1/console/groups/{g}/reset-offsets",
     '{{"topic": "{t}", "to": "offset", "offset": {v}, "execute": true}}', JSON, ["-1", *BODY_NOT_INT64]),
    ("console reset datetime_ms", "POST", "/v1/console/groups/{g}/reset-offsets",
     '{{"topic": "{t}", "to": "datetime", "datetime_ms": {v}, "execute": true}}', JSON, ["-1", *BODY_NOT_INT64]),
    ("console reset partitions", "POST", "/v1/console/groups/{g}/reset-offsets",
     '{{"topic": "{t}", "partitions": [{v}], "to": "earliest", "execute": true}}', JSON, BODY_NOT_INT32),
    ("console reset execute", "POST", "/v1/console/groups/{g}/reset-offsets",
     '{{"topic": "{t}", "to": "earliest", "execute": {v}}}', JSON, ["1", '"true"']),
    ("console sql max_rows", "POST", "/v1/console/sql", '{{"query": "SELECT * FROM {t}", "max_rows": {v}}}', JSON,
     ["0", "1001", *BODY_NOT_INT64]),
]


@pytest.mark.parametrize("case", BODY_CASES, ids=[c[0] for c in BODY_CASES])
def test_bad_numbers_in_bodies_are_refused_and_change_nothing(world, case):
    _, method, path, template, headers, values = case
    before = snapshot(world)
    for value in values:
        body = template.format(t=TOPIC, v=value)
        resp = world.http.request(method, path.format(t=TOPIC, g=GROUP), content=body, headers=headers)
        assert_kafka_error(resp, (400, 404, 422))
        assert resp.status_code != 404 or value.lstrip("-").isdigit(), resp.text
    assert snapshot(world) == before
    assert world.http.get("/consumers/hostile-new/instances/n1/subscription").status_code == 404


@pytest.mark.parametrize("value", ["18446744073709551616", "-9223372036854775809",
                                   '{"a": [1, 100000000000000000000000]}'])
def test_a_json_embedded_integer_past_64_bits_is_invalid_record(world, value):
    """orjson reads it as a float: stored, it would not be what was sent."""
    before = snapshot(world)
    resp = world.http.post(f"/topics/{TOPIC}", content='{"records": [{"value": %s}]}' % value, headers=JSON_V2)
    assert_kafka_error(resp, 422, 42206)
    assert snapshot(world) == before


def test_json_embedded_integers_up_to_64_bits_are_stored_exactly(world):
    """The other side of the 64-bit refusal: int64's least and uint64's greatest
    value (and a 19-digit string) go through and come back as sent."""
    values = [-(2**63), 2**64 - 1, "1234567890123456789012"]
    resp = world.http.post(f"/topics/{TOPIC}/partitions/1", json={"records": [{"value": v} for v in values]},
                           headers=JSON_V2)
    assert resp.status_code == 200, resp.text
    first = resp.json()["offsets"][0]["offset"]
    fetched = world.http.get(f"/topics/{TOPIC}/partitions/1/records", params={"offset": first},
                             headers={"Accept": JSON_V2["Content-Type"]})
    assert fetched.status_code == 200, fetched.text
    assert [r["value"] for r in fetched.json()] == values


def _v3_records_url(world: World) -> str:
    cluster = world.http.get("/v3/clusters").json()["data"][0]["cluster_id"]
    return f"/v3/clusters/{cluster}/topics/{TOPIC}/records"


@pytest.mark.parametrize("data", ["18446744073709551616", "-9223372036854775809", "[1, 100000000000000000000000]"])
def test_a_v3_json_integer_past_64_bits_is_invalid_record(world, data):
    """v3's JSON-typed data: refused as v2's embedded JSON is, not stored as a float
    (one record) nor a 500 (orjson could not write it back, several records)."""
    url = _v3_records_url(world)
    before = snapshot(world)
    one = world.http.post(url, content='{"value": {"type": "JSON", "data": %s}}' % data, headers=JSON)
    assert_kafka_error(one, 422, 42206)
    many = world.http.post(url, content='{"value": {"type": "JSON", "data": %s}}' % data * 2, headers=JSON)
    assert many.status_code == 200, many.text
    assert [orjson.loads(line)["error_code"] for line in many.content.splitlines()] == [42206, 42206]
    assert snapshot(world) == before


def test_v3_json_integers_up_to_64_bits_are_stored_exactly_and_deep_ones_refused(world):
    url = _v3_records_url(world)
    sent = [2**64 - 1, -(2**63)]
    resp = world.http.post(url, json=[{"partition_id": 1, "value": {"type": "JSON", "data": v}} for v in sent],
                           headers=JSON)
    assert resp.status_code == 200, resp.text
    offsets = [orjson.loads(line)["offset"] for line in resp.content.splitlines()]
    fetched = world.http.get(f"/topics/{TOPIC}/partitions/1/records", params={"offset": offsets[0]},
                             headers={"Accept": "application/vnd.kafka.json.v2+json"})
    assert fetched.status_code == 200, fetched.text
    assert [r["value"] for r in fetched.json()][:2] == sent
    before = snapshot(world)
    deep = '{"value": {"type": "JSON", "data": %s1234567890123456789%s}}' % ("[" * 50_000, "]" * 50_000)
    assert_kafka_error(world.http.post(url, content=deep, headers=JSON), 400, 40002)
    assert snapshot(world) == before
