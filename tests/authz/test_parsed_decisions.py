"""Authorization decides on the request the route executes (issue 36, findings 1 and 2).

A produce's producer parameters are read once, decoded, by
:func:`laketail.api.deps.producer_params`; the middleware decides on that parse and the
route executes it. No decision is remembered past its request: a plain produce to a
path does not let a later idempotent or transactional one through, and a topic deleted
after a produce needs Create again to be re-created by the next one.

The property test walks every registered route with spellings of its query
(percent-escapes, case, repeats, order) and asserts the decision is the canonical
spelling's, or, for a spelling that could be read two ways, a refusal.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pyarrow as pa
import pytest
from api_inprocess import ARROW, BINARY_V2, b64
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laketail.api.acl_rules import RULES
from laketail.api.authz import Authorization
from laketail.api.deps import PRODUCER_STATE_KEY
from laketail.errors import LaketailError
from laketail.security.principal import KafkaPrincipal

from .acting_as import allow, authz_gateway
from .test_route_walk import PARAMS, registered

ATTACKER = "User:mallory"
RECORDS = {"records": [{"value": b64(b"INJECTED")}]}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with authz_gateway(tmp_path_factory.mktemp("parsed")) as client:
        yield client


def _create(gw, topic: str) -> None:
    resp = gw.admin("POST", f"/v3/clusters/{gw.cluster_id}/topics", json={"topic_name": topic, "partitions_count": 1})
    assert resp.status_code == 201, resp.text


def _victim(gw, tid: str) -> dict:
    """An admin's transactional producer with an open transaction on ``shared``."""
    producer = gw.admin("POST", "/v1/producers", json={"transactional_id": tid})
    assert producer.status_code == 200, producer.text
    return producer.json()


def _raw_produce(gw, who: str, path: str, query: str, **kwargs):
    """A produce whose query goes on the wire exactly as written (escapes kept)."""
    return gw.as_(who, "POST", f"{path}?{query}", **kwargs)


def _error(resp) -> str:
    return resp.json()["message"].split(":")[0]


def test_an_escaped_producer_id_is_checked_as_the_transactional_batch_it_is(gw):
    _create(gw, "shared")
    gw.grant(allow(ATTACKER, "WRITE", "TOPIC", "shared"))
    victim = _victim(gw, "owner-tx")
    pid, epoch = victim["producer_id"], victim["producer_epoch"]
    for query in (f"producer%5Fid={pid}&producer_epoch={epoch}&sequence=1&transactional=true",
                  f"producer_id={pid}&producer_epoch={epoch}&sequence=1&%74ransactional=true"):
        resp = _raw_produce(gw, ATTACKER, "/topics/shared/partitions/0", query,
                            json=RECORDS, headers={"Content-Type": BINARY_V2})
        assert resp.status_code == 403, resp.text
        assert _error(resp) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    arrow = pa.ipc.new_stream  # the v1 Arrow route reads the same query
    sink = pa.BufferOutputStream()
    with arrow(sink, pa.schema([("value", pa.binary())])) as writer:
        writer.write_table(pa.table({"value": [b"INJECTED"]}))
    resp = _raw_produce(gw, ATTACKER, "/v1/topics/shared/partitions/0/records",
                        f"producer%5Fid={pid}&producer_epoch={epoch}&sequence=1&transactional=true",
                        content=sink.getvalue().to_pybytes(), headers={"Content-Type": ARROW})
    assert resp.status_code == 403, resp.text
    assert gw.admin("GET", "/v1/transactions/owner-tx").json()["partitions"] == []


def test_an_escaped_transactional_value_is_checked_as_transactional(gw):
    _create(gw, "shared-2")
    gw.grant(allow(ATTACKER, "WRITE", "TOPIC", "shared-2"), allow(ATTACKER, "IDEMPOTENT_WRITE", "CLUSTER"))
    victim = _victim(gw, "owner-tx-2")
    query = (f"producer_id={victim['producer_id']}&producer_epoch={victim['producer_epoch']}"
             "&sequence=0&transactional=tru%65")
    resp = _raw_produce(gw, ATTACKER, "/topics/shared-2/partitions/0", query,
                        json=RECORDS, headers={"Content-Type": BINARY_V2})
    assert resp.status_code == 403, resp.text
    assert _error(resp) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert gw.admin("GET", "/v1/transactions/owner-tx-2").json()["partitions"] == []


@pytest.mark.parametrize("query", [
    "producer_id=1&producer_id=2&producer_epoch=0&sequence=0",
    "producer_id=1&producer%5Fid=2&producer_epoch=0&sequence=0",
    "producer_id=1&producer_epoch=0&sequence=0&transactional=false&transactional=true",
    "Producer_ID=1&producer_epoch=0&sequence=0",
    "producer_id=1&producer_epoch=0&sequence=0&TRANSACTIONAL=true",
])
def test_an_ambiguous_producer_spelling_is_refused(gw, query):
    _create(gw, f"amb-{abs(hash(query)) % 10**8}")
    topic = f"amb-{abs(hash(query)) % 10**8}"
    resp = gw.admin("POST", f"/topics/{topic}/partitions/0?{query}", json=RECORDS, headers={"Content-Type": BINARY_V2})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error_code"] == 40002  # INVALID_REQUEST
    records = gw.admin("GET", f"/topics/{topic}/partitions/0/records", params={"offset": 0},
                       headers={"Accept": BINARY_V2})
    assert records.status_code == 200 and records.json() == []  # nothing written


def test_a_plain_produce_lets_no_later_idempotent_one_through(gw):
    _create(gw, "cache-path")
    gw.grant(allow("User:carl", "WRITE", "TOPIC", "cache-path"))
    plain = gw.as_("User:carl", "POST", "/topics/cache-path/partitions/0", json=RECORDS,
                   headers={"Content-Type": BINARY_V2})
    assert plain.status_code == 200, plain.text
    idem = gw.as_("User:carl", "POST", "/topics/cache-path/partitions/0", json=RECORDS,
                  headers={"Content-Type": BINARY_V2},
                  params={"producer_id": 0, "producer_epoch": 0, "sequence": 0})
    assert idem.status_code == 403, idem.text
    assert _error(idem) == "CLUSTER_AUTHORIZATION_FAILED"


def test_a_deleted_topic_is_not_recreated_by_a_writer_without_create(gw):
    _create(gw, "gone")
    gw.grant(allow("User:dora", "WRITE", "TOPIC", "gone"))
    first = gw.as_("User:dora", "POST", "/topics/gone/partitions/0", json=RECORDS, headers={"Content-Type": BINARY_V2})
    assert first.status_code == 200, first.text
    assert gw.admin("DELETE", f"/v3/clusters/{gw.cluster_id}/topics/gone").status_code == 204
    again = gw.as_("User:dora", "POST", "/topics/gone/partitions/0", json=RECORDS, headers={"Content-Type": BINARY_V2})
    assert again.status_code == 403, again.text
    assert _error(again) == "TOPIC_AUTHORIZATION_FAILED"
    assert "gone" not in gw.broker.list_topics(include_internal=False)


# -- the property: every route, every spelling of its query -----------------------------------------

_PRODUCER_NAMES = ("producer_id", "producer_epoch", "sequence", "transactional")
PRINCIPALS = ("User:admin", "User:prop-writer", "User:prop-idem", "User:prop-txn", "User:prop-nobody")


@pytest.fixture(scope="module")
def prop(gw):
    """The gateway, a decider on its app, the routes with their paths, and two producers."""
    _create(gw, PARAMS["topic"])
    gw.grant(*(allow(p, "WRITE", "TOPIC", PARAMS["topic"]) for p in PRINCIPALS[1:4]),
             allow("User:prop-idem", "IDEMPOTENT_WRITE", "CLUSTER"),
             allow("User:prop-txn", "WRITE", "TRANSACTIONAL_ID", "prop-tx"),
             allow("User:prop-writer", "READ", "GROUP", PARAMS["group"]))
    txn = _victim(gw, "prop-tx")
    decider = Authorization(None, gw.app, gw.app.state.authorizer)  # type: ignore[arg-type]
    routes = []
    for key, method, route in registered(gw.app):
        if key.startswith("MOUNT"):
            continue
        path = re.sub(r"{([^}]+)}", lambda m: gw.cluster_id if m.group(1) == "cluster_id"
                      else PARAMS[m.group(1).split(":")[0]], route.path)
        routes.append((key, method, path))
    return gw, decider, routes, txn


def _decide(gw, decider, method: str, path: str, query: bytes, principal: str):
    scope = {"type": "http", "method": method, "path": path, "query_string": query, "state": {},
             "client": ("10.0.0.9", 1)}

    async def run():
        try:
            decider.decide(scope, KafkaPrincipal.parse(principal), "10.0.0.9")
        except LaketailError as err:
            return type(err).__name__, scope["state"].get(PRODUCER_STATE_KEY, "-")
        return "allowed", scope["state"].get(PRODUCER_STATE_KEY, "-")

    return gw.run(run())


def _escape(text: str, which: list[bool]) -> str:
    return "".join(f"%{ord(c):02X}" if i < len(which) and which[i] else quote(c, safe="")
                   for i, c in enumerate(text))


@st.composite
def spellings(draw, pairs: list[tuple[str, str]]):
    """A spelling of ``pairs`` and whether it may be read two ways (a producer name repeated
    or in another case)."""
    order = draw(st.permutations(range(len(pairs)))) if pairs else []
    spelled, ambiguous = [], False
    for i in order:
        name, value = pairs[i]
        if draw(st.booleans()) and name != name.upper():
            name = draw(st.sampled_from([name.upper(), name.capitalize(), name.swapcase()]))
            ambiguous = ambiguous or name.lower() in _PRODUCER_NAMES
        name = _escape(name, draw(st.lists(st.booleans(), max_size=len(name))))
        value = _escape(value, draw(st.lists(st.booleans(), max_size=len(value))))
        spelled.append(f"{name}={value}")
    if pairs and draw(st.booleans()):
        name, value = pairs[draw(st.integers(0, len(pairs) - 1))]
        spelled.insert(draw(st.integers(0, len(spelled))), f"{_escape(name, [True])}={value}")
        ambiguous = ambiguous or name in _PRODUCER_NAMES
    return "&".join(spelled).encode(), ambiguous


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_spelling_of_a_query_is_decided_as_its_canonical_spelling(prop, data):
    gw, decider, routes, txn = prop
    key, method, path = data.draw(st.sampled_from(routes))
    principal = data.draw(st.sampled_from(PRINCIPALS))
    pairs = data.draw(st.sampled_from([
        [],
        [("acks", "1")],
        [("producer_id", "7"), ("producer_epoch", "0"), ("sequence", "3")],
        [("producer_id", str(txn["producer_id"])), ("producer_epoch", str(txn["producer_epoch"])),
         ("sequence", "1"), ("transactional", "true")],
        [("offset", "0"), ("transactional", "false")],
    ]))
    canonical = _decide(gw, decider, method, path, "&".join(f"{k}={v}" for k, v in pairs).encode(), principal)
    query, ambiguous = data.draw(spellings(pairs))
    got = _decide(gw, decider, method, path, query, principal)
    if ambiguous and RULES[key].produce:
        assert got[0] != "allowed", (key, query, got)  # refused: 400, or 403 before the query is read
        assert got[0] == "InvalidRequest" or got[0] == canonical[0], (key, query, got, canonical)
    else:
        assert got == canonical, (key, query, got, canonical)


@pytest.mark.parametrize("query, proxied", [
    (b"producer_id=1&producer_epoch=0&sequence=0", True),
    (b"producer%5Fid=1&producer_epoch=0&sequence=0&transactional=true", True),  # was answered locally
    (b"%70roducer_id=1&producer_epoch=0&sequence=0", True),
    (b"acks=1", False),
    (b"producer_id=1&producer_id=2&producer_epoch=0&sequence=0", False),  # refused here, 400
])
def test_the_coordinator_proxy_reads_the_producer_as_the_route_does(query, proxied):
    """A produce naming a producer goes to the controller, whose coordinator knows its
    epochs; an escaped name was kept on a broker whose coordinator does not."""
    from laketail.api.coordinator_proxy import is_coordinator_request

    assert is_coordinator_request("/topics/t/partitions/0", query) is proxied
