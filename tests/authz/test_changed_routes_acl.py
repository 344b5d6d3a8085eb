"""The routes changed since 22b62ef, over a real SASL listener with ACLs on: each needs
the permission its Kafka request needs, answers 403/40301 with Kafka's error name
(TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED) without it, and 2xx with exactly it.

One broker (the set-up of :mod:`test_over_sasl`: SCRAM users over HTTP Basic,
``User:admin`` the super user, nothing allowed without an ACL). Every case gets its own
topic (with records), group (with committed offsets) and v2 consumer instance, made by
admin, so the grants of one case allow nothing in another. ``alice`` never holds an ACL;
``bob`` is granted a case's permissions one at a time: with all but the last he is
still refused, by the last one's error; with all of them the route answers its 2xx.
"""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest
from security.support import PASSWORD

from tests.transactions.support import arrow_body

from .test_over_sasl import Secured, secured_broker

pytestmark = pytest.mark.integration

V2 = {"Content-Type": "application/vnd.kafka.v2+json"}
BINARY_V2 = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
ARROW = {"Content-Type": "application/vnd.apache.arrow.stream"}
JSON = {"Content-Type": "application/json"}
ERRORS = {"TOPIC": "TOPIC_AUTHORIZATION_FAILED", "GROUP": "GROUP_AUTHORIZATION_FAILED",
          "CLUSTER": "CLUSTER_AUTHORIZATION_FAILED"}


_RECORD = {"records": [{"value": "AA=="}]}
_TP = '{{"topic": "{T}", "partition": 0}}'

# (id, method, path, request kwargs, needs as (operation, resource type, T|G|CG|None), 2xx)
# T is the case's topic, G its group (with committed offsets), CG the group of its v2
# consumer instance I (assigned T-0 when the case asks "assign").
CASES: list[tuple[str, str, str, dict[str, Any], list[tuple[str, str, str | None]], int]] = [
    ("v2 produce", "POST", "/topics/{T}", {"json": _RECORD, "headers": BINARY_V2}, [("WRITE", "TOPIC", "T")], 200),
    ("v2 produce to a partition", "POST", "/topics/{T}/partitions/0", {"json": _RECORD, "headers": BINARY_V2},
     [("WRITE", "TOPIC", "T")], 200),
    ("v1 arrow produce", "POST", "/v1/topics/{T}/records", {"content": arrow_body([b"x"]), "headers": ARROW},
     [("WRITE", "TOPIC", "T")], 200),
    ("v1 arrow produce to a partition", "POST", "/v1/topics/{T}/partitions/0/records",
     {"content": arrow_body([b"x"]), "headers": ARROW}, [("WRITE", "TOPIC", "T")], 200),
    ("v2 fetch", "GET", "/topics/{T}/partitions/0/records?offset=0", {}, [("READ", "TOPIC", "T")], 200),
    ("v1 arrow fetch", "GET", "/v1/topics/{T}/partitions/0/records?offset=0", {}, [("READ", "TOPIC", "T")], 200),
    ("v2 topic", "GET", "/topics/{T}", {}, [("DESCRIBE", "TOPIC", "T"), ("DESCRIBE_CONFIGS", "TOPIC", "T")], 200),
    ("v2 partitions", "GET", "/topics/{T}/partitions", {}, [("DESCRIBE", "TOPIC", "T")], 200),
    ("v2 partition", "GET", "/topics/{T}/partitions/0", {}, [("DESCRIBE", "TOPIC", "T")], 200),
    ("v2 partition offsets", "GET", "/topics/{T}/partitions/0/offsets", {}, [("DESCRIBE", "TOPIC", "T")], 200),
    ("v2 create instance", "POST", "/consumers/{CG}", {"json": {"name": "other"}, "headers": V2},
     [("READ", "GROUP", "CG")], 200),
    ("v2 delete instance", "DELETE", "{I}", {}, [("READ", "GROUP", "CG")], 204),
    ("v2 subscribe", "POST", "{I}/subscription", {"json": {"topics": ["{T}"]}, "headers": V2},
     [("READ", "GROUP", "CG")], 204),
    ("v2 subscription", "GET", "{I}/subscription", {}, [("READ", "GROUP", "CG")], 200),
    ("v2 unsubscribe", "DELETE", "{I}/subscription", {}, [("READ", "GROUP", "CG")], 204),
    ("v2 assign", "POST", "{I}/assignments", {"content": '{{"partitions": [' + _TP + "]}}", "headers": V2},
     [("READ", "GROUP", "CG"), ("DESCRIBE", "TOPIC", "T")], 204),
    ("v2 assignments", "GET", "{I}/assignments", {}, [("READ", "GROUP", "CG")], 200),
    ("v2 seek", "POST", "{I}/positions",
     {"content": '{{"offsets": [{{"topic": "{T}", "partition": 0, "offset": 0}}]}}', "headers": V2, "assign": True},
     [("READ", "GROUP", "CG")], 204),
    ("v2 seek to beginning", "POST", "{I}/positions/beginning",
     {"content": '{{"partitions": [' + _TP + "]}}", "headers": V2, "assign": True},
     [("READ", "GROUP", "CG"), ("DESCRIBE", "TOPIC", "T")], 204),
    ("v2 seek to end", "POST", "{I}/positions/end",
     {"content": '{{"partitions": [' + _TP + "]}}", "headers": V2, "assign": True},
     [("READ", "GROUP", "CG"), ("DESCRIBE", "TOPIC", "T")], 204),
    ("v2 seek by timestamp", "POST", "{I}/positions",
     {"content": '{{"timestamps": [{{"topic": "{T}", "partition": 0, "timestamp": 0}}]}}', "headers": V2,
      "assign": True}, [("READ", "GROUP", "CG"), ("DESCRIBE", "TOPIC", "T")], 204),
    ("v2 poll", "GET", "{I}/records?timeout=0", {"assign": True}, [("READ", "GROUP", "CG"), ("READ", "TOPIC", "T")],
     200),
    ("v2 commit", "POST", "{I}/offsets",
     {"content": '{{"offsets": [{{"topic": "{T}", "partition": 0, "offset": 0}}]}}', "headers": V2, "assign": True},
     [("READ", "GROUP", "CG"), ("READ", "TOPIC", "T")], 200),
    ("v2 committed", "GET", "{I}/offsets", {"content": '{{"partitions": [' + _TP + "]}}", "headers": V2},
     [("DESCRIBE", "GROUP", "CG"), ("DESCRIBE", "TOPIC", "T")], 200),
    ("v3 group", "GET", "/v3/clusters/{C}/consumer-groups/{G}", {}, [("DESCRIBE", "GROUP", "G")], 200),
    ("v3 group consumers", "GET", "/v3/clusters/{C}/consumer-groups/{G}/consumers", {},
     [("DESCRIBE", "GROUP", "G")], 200),
    ("v3 group consumer", "GET", "/v3/clusters/{C}/consumer-groups/{G}/consumers/{M}", {"member": True},
     [("DESCRIBE", "GROUP", "G")], 200),
    ("v3 group consumer assignments", "GET", "/v3/clusters/{C}/consumer-groups/{G}/consumers/{M}/assignments",
     {"member": True}, [("DESCRIBE", "GROUP", "G")], 200),
    ("v3 lags", "GET", "/v3/clusters/{C}/consumer-groups/{G}/lags", {}, [("DESCRIBE", "GROUP", "G")], 200),
    ("v3 lag of a partition", "GET", "/v3/clusters/{C}/consumer-groups/{G}/lags/{T}/partitions/0", {},
     [("DESCRIBE", "GROUP", "G"), ("DESCRIBE", "TOPIC", "T")], 200),
    ("v3 lag summary", "GET", "/v3/clusters/{C}/consumer-groups/{G}/lag-summary", {},
     [("DESCRIBE", "GROUP", "G")], 200),
    ("console partitions", "GET", "/v1/console/topics/{T}/partitions", {}, [("DESCRIBE", "TOPIC", "T")], 200),
    ("console table", "GET", "/v1/console/topics/{T}/table", {}, [("DESCRIBE", "TOPIC", "T")], 200),
    ("console group", "GET", "/v1/console/groups/{G}", {}, [("DESCRIBE", "GROUP", "G")], 200),
    ("console lag history", "GET", "/v1/console/groups/{G}/lag-history", {}, [("DESCRIBE", "GROUP", "G")], 200),
    ("console lag history of a topic", "GET", "/v1/console/groups/{G}/lag-history?topic={T}", {},
     [("DESCRIBE", "GROUP", "G"), ("DESCRIBE", "TOPIC", "T")], 200),
    ("console reset offsets", "POST", "/v1/console/groups/{G}/reset-offsets",
     {"content": '{{"topic": "{T}", "to": "earliest", "execute": true}}', "headers": JSON},
     [("READ", "GROUP", "G"), ("READ", "TOPIC", "T")], 200),
    ("console sql", "POST", "/v1/console/sql",
     {"content": '{{"query": "SELECT * FROM `{T}`"}}', "headers": JSON},
     [("READ", "TOPIC", "T")], 200),
    ("console overview", "GET", "/v1/console/overview", {}, [("DESCRIBE", "CLUSTER", None)], 200),
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("changed-routes-acl")
    for setup in secured_broker(base, ("admin", "alice", "bob", "lagbot"),
                                {"LAKETAIL_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}):
        setup.http["bob"] = httpx.Client(base_url=setup.url, auth=("bob", PASSWORD), timeout=30.0)
        yield setup


def _names(secured: Secured, i: int, assign: bool, member: bool) -> dict[str, str]:
    """The case's own topic (2 records), group (committed offset 1; with ``member`` a
    member M joined through /v1 and synced) and instance."""
    names = {"T": f"acl{i}-t", "G": f"acl{i}-g", "CG": f"acl{i}-cg", "C": secured.cluster_id}
    names["I"] = f"/consumers/{names['CG']}/instances/c"
    secured.create_topic(names["T"])
    secured.produce(names["T"], 0, 2)
    secured.commit(names["G"], names["T"], 0, 1)
    # the instance is bob's (an instance answers only its creator, issue 36): bob makes it
    # (and assigns it) under ACLs taken back before the case grants its own
    temporary = [("READ", "GROUP", names["CG"]), ("DESCRIBE", "TOPIC", names["T"])]
    for operation, resource_type, name in temporary:
        secured.grant("bob", operation, resource_type, name)
    made = secured.as_("bob", "POST", f"/consumers/{names['CG']}",
                       json={"name": "c", "format": "binary", "auto.offset.reset": "earliest"}, headers=V2)
    assert made.status_code == 200, made.text
    if member:
        joined = secured.as_("admin", "POST", f"/v1/groups/{names['G']}/join", json={"topics": [names["T"]]})
        assert joined.status_code == 200, joined.text
        names["M"] = joined.json()["member_id"]
        synced = secured.as_("admin", "POST", f"/v1/groups/{names['G']}/sync", json={
            "generation_id": joined.json()["generation_id"], "member_id": names["M"]})
        assert synced.status_code == 200, synced.text
    if assign:
        resp = secured.as_("bob", "POST", names["I"] + "/assignments",
                           json={"partitions": [{"topic": names["T"], "partition": 0}]}, headers=V2)
        assert resp.status_code == 204, resp.text
    for operation, resource_type, name in temporary:
        gone = secured.as_("admin", "DELETE", f"/v3/clusters/{secured.cluster_id}/acls", params={
            "resource_type": resource_type, "resource_name": name, "pattern_type": "LITERAL",
            "principal": "User:bob", "host": "*", "operation": operation, "permission": "ALLOW"})
        assert gone.status_code == 200 and len(gone.json()["data"]) == 1, gone.text
    return names


def _refusal(resp: httpx.Response) -> str:
    assert resp.status_code == 403, resp.text
    assert resp.json()["error_code"] == 40301, resp.text
    return resp.json()["message"].split(":")[0]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[c[0] for c in CASES])
def test_each_changed_route_needs_its_kafka_permission(secured, i):
    _, method, path, kwargs, needs, ok = CASES[i]
    kwargs = dict(kwargs)
    names = _names(secured, i, kwargs.pop("assign", False), kwargs.pop("member", False))
    if "content" in kwargs and isinstance(kwargs["content"], str):
        kwargs["content"] = kwargs["content"].format(**names)
    if "json" in kwargs:
        kwargs["json"] = {k: [t.format(**names) if isinstance(t, str) else t for t in v] if isinstance(v, list) else v
                          for k, v in kwargs["json"].items()}
    url = path.format(**names)

    assert _refusal(secured.as_("alice", method, url, **kwargs)) == ERRORS[needs[0][1]]
    for n, (operation, resource_type, which) in enumerate(needs):
        if n == len(needs) - 1:
            assert _refusal(secured.as_("bob", method, url, **kwargs)) == ERRORS[resource_type], \
                f"granted {needs[:n]}, {url} did not ask for {operation} on the {resource_type.lower()}"
        secured.grant("bob", operation, resource_type, "kafka-cluster" if which is None else names[which])
    resp = secured.as_("bob", method, url, **kwargs)
    assert resp.status_code == ok, f"granted {needs}: {resp.status_code} {resp.text}"


def test_a_produce_that_would_create_its_topic_also_needs_create(secured):
    secured.grant("bob", "WRITE", "TOPIC", "acl-new")
    resp = secured.as_("bob", "POST", "/topics/acl-new", json=_RECORD, headers=BINARY_V2)
    assert _refusal(resp) == "TOPIC_AUTHORIZATION_FAILED"
    assert not secured.exists("acl-new")
    secured.grant("bob", "CREATE", "TOPIC", "acl-new")
    resp = secured.as_("bob", "POST", "/topics/acl-new", json=_RECORD, headers=BINARY_V2)
    assert resp.status_code == 200, resp.text
    assert secured.exists("acl-new")


def test_listings_answer_everyone_but_show_only_what_each_may_describe(secured):
    """ListTopics / ListGroups: no 403, the names the principal may Describe."""
    secured.create_topic("acl-listed")
    secured.commit("acl-listed-g", "acl-listed", 0, 0)

    def listed(user: str) -> dict[str, set[str]]:
        topics = secured.as_(user, "GET", "/topics")
        groups = secured.as_(user, "GET", f"/v3/clusters/{secured.cluster_id}/consumer-groups")
        console_topics = secured.as_(user, "GET", "/v1/console/topics")
        console_groups = secured.as_(user, "GET", "/v1/console/groups")
        for resp in (topics, groups, console_topics, console_groups):
            assert resp.status_code == 200, resp.text
        return {"topics": set(topics.json()) & {"acl-listed"},
                "groups": {g["consumer_group_id"] for g in groups.json()["data"]} & {"acl-listed-g"},
                "console topics": {r["topic_name"] for r in console_topics.json()["data"]} & {"acl-listed"},
                "console groups": {r["group_id"] for r in console_groups.json()["data"]} & {"acl-listed-g"}}

    assert listed("alice") == {"topics": set(), "groups": set(), "console topics": set(), "console groups": set()}
    secured.grant("bob", "DESCRIBE", "TOPIC", "acl-listed")
    secured.grant("bob", "DESCRIBE", "GROUP", "acl-listed-g")
    assert listed("bob") == {"topics": {"acl-listed"}, "groups": {"acl-listed-g"},
                             "console topics": {"acl-listed"}, "console groups": {"acl-listed-g"}}


def test_an_assignment_does_not_tell_whether_a_hidden_topic_exists(secured):
    """Kafka answers a topic the principal may not Describe with TOPIC_AUTHORIZATION_FAILED
    whether it exists or not; before, an assignment answered 204 for one that exists and
    404 for one that does not."""
    secured.create_topic("acl-hidden")
    secured.grant("bob", "READ", "GROUP", "acl-hidden-cg")
    made = secured.as_("bob", "POST", "/consumers/acl-hidden-cg", json={"name": "c"}, headers=V2)  # bob's own
    assert made.status_code == 200, made.text
    path = "/consumers/acl-hidden-cg/instances/c/assignments"
    answers = [secured.as_("bob", "POST", path, json={"partitions": [{"topic": topic, "partition": 0}]}, headers=V2)
               for topic in ("acl-hidden", "acl-absent")]
    assert [_refusal(resp) for resp in answers] == ["TOPIC_AUTHORIZATION_FAILED"] * 2
    assert [resp.json() for resp in answers][0]["message"].replace("acl-hidden", "X") == \
        answers[1].json()["message"].replace("acl-absent", "X")
