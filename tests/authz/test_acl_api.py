"""Confluent v3's ACL API (``/v3/clusters/{id}/acls``, ``acls:batch``) on an in-process gateway."""

from __future__ import annotations

import pytest

from .acting_as import authz_gateway


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with authz_gateway(tmp_path_factory.mktemp("acl-api")) as client:
        yield client


def acl(name="orders", principal="User:alice", operation="READ", pattern="LITERAL", permission="ALLOW",
        rtype="TOPIC", host="*") -> dict:
    return {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, "principal": principal,
            "host": host, "operation": operation, "permission": permission}


def listed(gw, **params) -> list[dict]:
    resp = gw.admin("GET", f"/v3/clusters/{gw.cluster_id}/acls", params=params)
    assert resp.status_code == 200, resp.text
    assert resp.json()["kind"] == "KafkaAclList"
    return [{k: d[k] for k in acl()} for d in resp.json()["data"]]


def test_create_list_match_and_delete(gw):
    url = f"/v3/clusters/{gw.cluster_id}/acls"
    resp = gw.admin("POST", url, json=acl("api-orders"))
    assert resp.status_code == 201, resp.text
    resp = gw.admin("POST", url + ":batch", json={"data": [acl("api-", pattern="PREFIXED", principal="User:bob"),
                                                          acl("*", operation="WRITE", principal="User:carol")]})
    assert resp.status_code == 204, resp.text
    assert listed(gw, resource_name="api-orders") == [acl("api-orders")]
    match = listed(gw, resource_type="TOPIC", resource_name="api-orders", pattern_type="MATCH")
    assert {a["resource_name"] for a in match} == {"api-orders", "api-", "*"}
    assert listed(gw, principal="User:bob") == [acl("api-", pattern="PREFIXED", principal="User:bob")]
    assert listed(gw, operation="WRITE", resource_name="*") == [acl("*", operation="WRITE", principal="User:carol")]
    doc = gw.admin("GET", url, params={"resource_name": "api-orders"}).json()["data"][0]
    assert doc["kind"] == "KafkaAcl" and doc["cluster_id"] == gw.cluster_id and doc["metadata"]["self"]
    # creating the same ACL twice keeps one
    assert gw.admin("POST", url, json=acl("api-orders")).status_code == 201
    assert len(listed(gw, resource_name="api-orders")) == 1
    resp = gw.admin("DELETE", url, params={"resource_type": "TOPIC", "resource_name": "api-", "pattern_type": "ANY"})
    assert resp.status_code == 200, resp.text
    assert [{k: d[k] for k in acl()} for d in resp.json()["data"]] == [
        acl("api-", pattern="PREFIXED", principal="User:bob")]
    assert listed(gw, principal="User:bob") == []


@pytest.mark.parametrize("body, message", [
    ({**acl(), "operation": "FLY"}, "operation must be one of"),
    ({**acl(), "pattern_type": "MATCH"}, "LITERAL or PREFIXED"),
    ({k: v for k, v in acl().items() if k != "host"}, "missing ['host']"),
    ({**acl(), "extra": 1}, "unknown ['extra']"),
    ({**acl(), "principal": "alice"}, "<type>:<name>"),
    (acl(rtype="GROUP", operation="WRITE"), "does not apply"),
    ([acl()], "JSON object"),
])
def test_bad_acls_are_refused_and_nothing_is_written(gw, body, message):
    url = f"/v3/clusters/{gw.cluster_id}/acls"
    before = listed(gw)
    resp = gw.admin("POST", url, json=body)
    assert resp.status_code == 400 and resp.json()["error_code"] == 40002, resp.text
    assert resp.json()["message"].startswith("INVALID_REQUEST") and message in resp.json()["message"], resp.text
    # one bad ACL in a batch refuses the whole batch
    resp = gw.admin("POST", url + ":batch", json={"data": [acl("batch-good"), body]})
    assert resp.status_code == 400, resp.text
    assert listed(gw) == before


def test_delete_needs_a_resource_type_and_known_parameters(gw):
    url = f"/v3/clusters/{gw.cluster_id}/acls"
    assert gw.admin("POST", url, json=acl("kept")).status_code == 201
    resp = gw.admin("DELETE", url)
    assert resp.status_code == 400 and "resource_type is required" in resp.json()["message"]
    resp = gw.admin("GET", url, params={"topic": "kept"})
    assert resp.status_code == 400 and "unknown query parameters" in resp.json()["message"]
    assert listed(gw, resource_name="kept") == [acl("kept")]


def test_acl_admin_needs_alter_and_describe_on_the_cluster(gw):
    url = f"/v3/clusters/{gw.cluster_id}/acls"
    for method, kwargs in (("GET", {}), ("POST", {"json": acl("x")}), ("DELETE", {"params": {"resource_type": "ANY"}})):
        resp = gw.as_("User:eve", method, url, **kwargs)
        assert resp.status_code == 403, resp.text
        assert resp.json() == {"error_code": 40301, "message": resp.json()["message"]}
        assert resp.json()["message"].startswith("CLUSTER_AUTHORIZATION_FAILED")
    assert listed(gw, resource_name="x") == []
    gw.admin("POST", url, json=acl("kafka-cluster", principal="User:eve", operation="ALTER", rtype="CLUSTER"))
    assert gw.as_("User:eve", "POST", url, json=acl("x")).status_code == 201
    assert gw.as_("User:eve", "GET", url).status_code == 200  # Alter implies Describe
