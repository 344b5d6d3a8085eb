"""Confluent's ``Subject`` resource as laketail's Subject ACL type: Write registers,
Read reads, a prefixed ACL covers a family of subjects, ``/subjects`` lists only what the
principal may Describe, and a schema id answers only a principal that may Read one of
its subjects. ACLs are made through Confluent v3's ``/acls`` as any other."""

from __future__ import annotations

import json

from tests.authz.acting_as import authz_gateway

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})


def test_subject_acls(tmp_path) -> None:
    with authz_gateway(tmp_path) as gw:
        acls = f"/v3/clusters/{gw.cluster_id}/acls"
        for op in ("WRITE", "READ"):
            resp = gw.admin("POST", acls, json={
                "resource_type": "SUBJECT", "resource_name": "orders-", "pattern_type": "PREFIXED",
                "principal": "User:alice", "host": "*", "operation": op, "permission": "ALLOW"})
            assert resp.status_code == 201, resp.text
        refused = gw.as_("User:bob", "POST", "/subjects/orders-value/versions", json={"schema": SCHEMA})
        assert refused.status_code == 403 and refused.json()["error_code"] == 40301, refused.text
        assert refused.json()["message"].startswith("SUBJECT_AUTHORIZATION_FAILED")
        ok = gw.as_("User:alice", "POST", "/subjects/orders-value/versions", json={"schema": SCHEMA})
        assert ok.status_code == 200, ok.text
        schema_id = ok.json()["id"]
        assert gw.as_("User:alice", "POST", "/subjects/payments-value/versions",
                      json={"schema": SCHEMA}).status_code == 403
        assert gw.admin("POST", "/subjects/payments-value/versions", json={"schema": SCHEMA}).status_code == 200

        assert gw.as_("User:alice", "GET", "/subjects").json() == ["orders-value"]
        assert gw.as_("User:bob", "GET", "/subjects").json() == []
        assert gw.as_("User:alice", "GET", f"/schemas/ids/{schema_id}").status_code == 200
        assert gw.as_("User:alice", "GET", f"/schemas/ids/{schema_id}/subjects").json() == ["orders-value"]
        denied = gw.as_("User:bob", "GET", f"/schemas/ids/{schema_id}")
        assert denied.status_code == 403 and denied.json()["error_code"] == 40301, denied.text
        # the global config is the cluster's
        assert gw.as_("User:alice", "PUT", "/config", json={"compatibility": "NONE"}).status_code == 403
        # clients cannot append to the registry's topic
        body = {"records": [{"value": "AA=="}]}
        resp = gw.admin("POST", "/topics/__schemas", json=body,
                        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
        assert resp.status_code >= 400, resp.text


def test_a_schemad_produce_needs_write_on_the_subject_to_register(tmp_path) -> None:
    """The proxy's avro produce registers as the client: Write on the topic is not enough."""
    avro = {"Content-Type": "application/vnd.kafka.avro.v2+json"}
    body = json.dumps({"value_schema": SCHEMA, "records": [{"value": {"a": "x"}}]})
    with authz_gateway(tmp_path) as gw:
        acls = f"/v3/clusters/{gw.cluster_id}/acls"
        created = gw.admin("POST", f"/v3/clusters/{gw.cluster_id}/topics",
                           json={"topic_name": "orders", "partitions_count": 1})
        assert created.status_code in (200, 201), created.text
        for resource, name, op in (("TOPIC", "orders", "WRITE"), ("SUBJECT", "orders-value", "READ")):
            resp = gw.admin("POST", acls, json={
                "resource_type": resource, "resource_name": name, "pattern_type": "LITERAL",
                "principal": "User:carol", "host": "*", "operation": op, "permission": "ALLOW"})
            assert resp.status_code == 201, resp.text
        refused = gw.as_("User:carol", "POST", "/topics/orders", content=body, headers=avro)
        assert (refused.status_code, refused.json()["error_code"]) == (403, 40301), refused.text
        assert gw.admin("GET", "/subjects").json() == []
        # registered by someone who may: carol's Read now finds it, and her produce goes through
        assert gw.admin("POST", "/subjects/orders-value/versions", json={"schema": SCHEMA}).status_code == 200
        ok = gw.as_("User:carol", "POST", "/topics/orders", content=body, headers=avro)
        assert ok.status_code == 200, ok.text
        assert ok.json()["offsets"][0]["offset"] == 0
