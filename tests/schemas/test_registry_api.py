"""Confluent Schema Registry's REST API on an in-process gateway: paths, bodies,
status codes and error codes as Confluent's (Errors.java of confluentinc/schema-registry)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from tests.api_inprocess import InProcess, gateway

SR = "application/vnd.schemaregistry.v1+json"


def avro(fields: list[dict], name: str = "Order") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "acme", "fields": fields})


V1 = avro([{"name": "id", "type": "long"}])
V2_OPTIONAL = avro([{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}])
V2_REQUIRED = avro([{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}])


@pytest.fixture(scope="module")
def sr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with gateway(tmp_path_factory.mktemp("sr")) as client:
        yield client


def post(sr: InProcess, path: str, body: Any, content_type: str = SR):
    return sr.post(path, content=json.dumps(body), headers={"Content-Type": content_type})


def error(resp, status: int, code: int) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code, body
    return body["message"]


def test_register_evolve_and_read_back(sr: InProcess) -> None:
    resp = post(sr, "/subjects/orders-value/versions", {"schema": V1})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith(SR)
    first = resp.json()["id"]
    # the same schema again (other whitespace, plain application/json): same id, no new version
    again = post(sr, "/subjects/orders-value/versions", {"schema": json.dumps(json.loads(V1), indent=2)},
                 "application/json")
    assert again.json() == {"id": first}
    second = post(sr, "/subjects/orders-value/versions", {"schema": V2_OPTIONAL}).json()["id"]
    assert second != first
    assert sr.get("/subjects/orders-value/versions").json() == [1, 2]
    latest = sr.get("/subjects/orders-value/versions/latest").json()
    assert latest == {"subject": "orders-value", "version": 2, "id": second,
                      "schema": json.dumps(json.loads(V2_OPTIONAL), separators=(",", ":"))}
    assert sr.get("/subjects/orders-value/versions/-1").json()["version"] == 2
    assert json.loads(sr.get("/subjects/orders-value/versions/1/schema").text) == json.loads(V1)
    assert json.loads(sr.get(f"/schemas/ids/{first}").json()["schema"]) == json.loads(V1)
    assert "schemaType" not in sr.get(f"/schemas/ids/{first}").json()  # AVRO is implied, as Confluent's
    assert json.loads(sr.get(f"/schemas/ids/{second}/schema").text) == json.loads(V2_OPTIONAL)
    assert sr.get(f"/schemas/ids/{second}/versions").json() == [{"subject": "orders-value", "version": 2}]
    looked = post(sr, "/subjects/orders-value", {"schema": V1}).json()
    assert (looked["version"], looked["id"]) == (1, first)
    assert "orders-value" in sr.get("/subjects").json()
    assert sr.get("/schemas/types").json() == ["JSON", "PROTOBUF", "AVRO"]


def test_same_schema_under_two_subjects_has_one_id(sr: InProcess) -> None:
    text = avro([{"name": "sku", "type": "string"}], name="Item")
    a = post(sr, "/subjects/items-a/versions", {"schema": text}).json()["id"]
    b = post(sr, "/subjects/items-b/versions", {"schema": text}).json()["id"]
    assert a == b
    assert sr.get(f"/schemas/ids/{a}/subjects").json() == ["items-a", "items-b"]


def test_incompatible_schema_is_refused_and_nothing_is_written(sr: InProcess) -> None:
    post(sr, "/subjects/pay-value/versions", {"schema": V1})
    resp = post(sr, "/subjects/pay-value/versions", {"schema": V2_REQUIRED})
    message = error(resp, 409, 40901)
    assert "incompatible" in message and "amount" in message
    assert sr.get("/subjects/pay-value/versions").json() == [1]
    check = post(sr, "/compatibility/subjects/pay-value/versions/latest?verbose=true", {"schema": V2_REQUIRED})
    assert check.json()["is_compatible"] is False and check.json()["messages"]
    ok = post(sr, "/compatibility/subjects/pay-value/versions/1", {"schema": V2_OPTIONAL})
    assert ok.json() == {"is_compatible": True}
    fresh = post(sr, "/compatibility/subjects/no-such-subject/versions/latest", {"schema": V1})
    assert fresh.json() == {"is_compatible": True}  # nothing to be incompatible with
    error(post(sr, "/compatibility/subjects/no-such-subject/versions/1", {"schema": V1}), 404, 40401)
    # with NONE on the subject it registers
    assert sr.put("/config/pay-value", json={"compatibility": "NONE"}).json() == {"compatibility": "NONE"}
    assert post(sr, "/subjects/pay-value/versions", {"schema": V2_REQUIRED}).status_code == 200


def test_levels_forward_full_and_transitive(sr: InProcess) -> None:
    s = "levels-value"
    sr.put(f"/config/{s}", json={"compatibility": "FORWARD"})
    post(sr, f"/subjects/{s}/versions", {"schema": V1})
    # FORWARD: the old schema must read the new one; a new required field is fine, a removed one not
    assert post(sr, f"/subjects/{s}/versions", {"schema": V2_REQUIRED}).status_code == 200
    narrower = avro([{"name": "amount", "type": "double"}])
    error(post(sr, f"/subjects/{s}/versions", {"schema": narrower}), 409, 40901)
    # FULL_TRANSITIVE compares with every version: v1 lacks "amount" with no default
    sr.put(f"/config/{s}", json={"compatibility": "FULL_TRANSITIVE"})
    assert sr.get(f"/config/{s}").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
    candidate = avro([{"name": "id", "type": "long"}, {"name": "amount", "type": "double"},
                      {"name": "x", "type": "int", "default": 0}])
    assert post(sr, f"/compatibility/subjects/{s}/versions", {"schema": candidate}).json()["is_compatible"] is False
    sr.put(f"/config/{s}", json={"compatibility": "FULL"})
    assert post(sr, f"/subjects/{s}/versions", {"schema": candidate}).status_code == 200


def test_avro_promotions_and_enums(sr: InProcess) -> None:
    s = "promote-value"
    post(sr, f"/subjects/{s}/versions", {"schema": avro([{"name": "n", "type": "int"}], "P")})
    widened = avro([{"name": "n", "type": "long"}], "P")
    assert post(sr, f"/subjects/{s}/versions", {"schema": widened}).status_code == 200
    # long back to int is no promotion (a schema already in the subject would just answer its id)
    narrowed = avro([{"name": "n", "type": "int"}, {"name": "m", "type": "int", "default": 0}], "P")
    error(post(sr, f"/subjects/{s}/versions", {"schema": narrowed}), 409, 40901)
    e = "enum-value"
    enum = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
    post(sr, f"/subjects/{e}/versions", {"schema": json.dumps(enum)})
    fewer = dict(enum, symbols=["RED"])
    error(post(sr, f"/subjects/{e}/versions", {"schema": json.dumps(fewer)}), 409, 40901)
    # names compare unqualified (Avro's SchemaCompatibility): a new namespace alone is compatible,
    # a new name is not
    moved = dict(enum, namespace="elsewhere", symbols=["RED", "GREEN", "BLUE"])
    assert post(sr, f"/subjects/{e}/versions", {"schema": json.dumps(moved)}).status_code == 200
    renamed = dict(moved, name="Colour", symbols=["RED", "GREEN", "BLUE", "PINK"])
    error(post(sr, f"/subjects/{e}/versions", {"schema": json.dumps(renamed)}), 409, 40901)


def test_json_schema_and_protobuf(sr: InProcess) -> None:
    base = {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": False}
    resp = post(sr, "/subjects/js-value/versions", {"schemaType": "JSON", "schema": json.dumps(base)})
    sid = resp.json()["id"]
    assert sr.get(f"/schemas/ids/{sid}").json()["schemaType"] == "JSON"
    wider = dict(base, properties={"id": {"type": "number"}, "note": {"type": "string"}})
    resp = post(sr, "/subjects/js-value/versions", {"schemaType": "JSON", "schema": json.dumps(wider)})
    assert resp.status_code == 200, resp.text
    required = dict(wider, required=["note"])
    error(post(sr, "/subjects/js-value/versions", {"schemaType": "JSON", "schema": json.dumps(required)}), 409, 40901)
    error(post(sr, "/subjects/js-value/versions", {"schemaType": "JSON", "schema": '{"type": 5}'}), 422, 42201)

    proto = 'syntax = "proto3";\npackage acme;\nmessage Order { int64 id = 1; string note = 2; }\n'
    pid = post(sr, "/subjects/pb-value/versions", {"schemaType": "PROTOBUF", "schema": proto}).json()["id"]
    assert sr.get(f"/schemas/ids/{pid}").json()["schemaType"] == "PROTOBUF"
    added = proto.replace("string note = 2;", "string note = 2; int32 qty = 3;")
    assert post(sr, "/subjects/pb-value/versions", {"schemaType": "PROTOBUF", "schema": added}).status_code == 200
    changed = added.replace("string note = 2;", "double note = 2;")
    error(post(sr, "/subjects/pb-value/versions", {"schemaType": "PROTOBUF", "schema": changed}), 409, 40901)
    error(post(sr, "/subjects/pb-value/versions", {"schemaType": "PROTOBUF", "schema": "message {"}), 422, 42201)


def test_references(sr: InProcess) -> None:
    address = json.dumps({"type": "record", "name": "Address", "namespace": "acme",
                          "fields": [{"name": "city", "type": "string"}]})
    post(sr, "/subjects/address/versions", {"schema": address})
    customer = json.dumps({"type": "record", "name": "Customer", "namespace": "acme",
                           "fields": [{"name": "home", "type": "acme.Address"}]})
    refs = [{"name": "acme.Address", "subject": "address", "version": 1}]
    error(post(sr, "/subjects/customer/versions", {"schema": customer}), 422, 42201)  # unresolved name
    cid = post(sr, "/subjects/customer/versions", {"schema": customer, "references": refs}).json()["id"]
    assert sr.get(f"/schemas/ids/{cid}").json()["references"] == refs
    assert sr.get("/subjects/address/versions/1/referencedby").json() == [cid]
    error(sr.delete("/subjects/address/versions/1"), 422, 42206)  # still referenced


def test_errors_as_confluent(sr: InProcess) -> None:
    assert "Subject 'nope' not found." == error(sr.get("/subjects/nope/versions"), 404, 40401)
    post(sr, "/subjects/errs/versions", {"schema": V1})
    assert "Version 7 not found." == error(sr.get("/subjects/errs/versions/7"), 404, 40402)
    error(sr.get("/subjects/errs/versions/zero"), 422, 42202)
    error(sr.get("/subjects/errs/versions/0"), 422, 42202)
    error(sr.get("/schemas/ids/999999"), 404, 40403)
    error(post(sr, "/subjects/errs", {"schema": V2_REQUIRED}), 404, 40403)
    error(post(sr, "/subjects/errs/versions", {"schema": "{not json"}), 422, 42201)
    error(post(sr, "/subjects/errs/versions", {"schema": '{"type": "nonsense"}'}), 422, 42201)
    error(post(sr, "/subjects/errs/versions", {"schema": V1, "schemaType": "XML"}), 422, 42201)
    error(sr.put("/config", json={"compatibility": "SIDEWAYS"}), 422, 42203)
    error(sr.put("/mode", json={"mode": "SOMETIMES"}), 422, 42204)
    error(sr.get("/config/errs"), 404, 40408)
    assert sr.get("/config/errs?defaultToGlobal=true").json() == {"compatibilityLevel": "BACKWARD"}
    error(sr.get("/mode/errs"), 404, 40409)
    assert sr.get("/subjects/errs/versions").json() == [1]  # nothing was written by the refusals


def test_soft_and_hard_delete(sr: InProcess) -> None:
    s = "del-value"
    post(sr, f"/subjects/{s}/versions", {"schema": V1})
    post(sr, f"/subjects/{s}/versions", {"schema": V2_OPTIONAL})
    error(sr.delete(f"/subjects/{s}/versions/1?permanent=true"), 404, 40407)
    assert sr.delete(f"/subjects/{s}/versions/1").json() == 1
    error(sr.delete(f"/subjects/{s}/versions/1"), 404, 40406)
    assert sr.get(f"/subjects/{s}/versions").json() == [2]
    assert sr.get(f"/subjects/{s}/versions?deleted=true").json() == [1, 2]
    assert sr.delete(f"/subjects/{s}/versions/1?permanent=true").json() == 1
    assert sr.get(f"/subjects/{s}/versions?deleted=true").json() == [2]
    error(sr.delete(f"/subjects/{s}?permanent=true"), 404, 40405)
    assert sr.delete(f"/subjects/{s}").json() == [2]
    error(sr.delete(f"/subjects/{s}"), 404, 40404)
    assert s not in sr.get("/subjects").json()
    assert s in sr.get("/subjects?deleted=true").json()
    error(sr.get(f"/subjects/{s}/versions"), 404, 40401)
    assert sr.delete(f"/subjects/{s}?permanent=true").json() == [2]
    assert s not in sr.get("/subjects?deleted=true").json()
    # versions continue after a soft delete
    post(sr, "/subjects/again/versions", {"schema": V1})
    sr.delete("/subjects/again")
    post(sr, "/subjects/again/versions", {"schema": V1})
    assert sr.get("/subjects/again/versions").json() == [2]


def test_config_and_mode(sr: InProcess) -> None:
    assert sr.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert sr.put("/config", json={"compatibility": "full"}).json() == {"compatibility": "FULL"}
    assert sr.get("/config").json() == {"compatibilityLevel": "FULL"}
    assert sr.delete("/config").json() == {"compatibilityLevel": "FULL"}
    assert sr.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    sr.put("/config/cfg", json={"compatibility": "NONE"})
    assert sr.delete("/config/cfg").json() == {"compatibilityLevel": "NONE"}
    error(sr.get("/config/cfg"), 404, 40408)

    assert sr.get("/mode").json() == {"mode": "READWRITE"}
    assert sr.put("/mode/ro", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}
    error(post(sr, "/subjects/ro/versions", {"schema": V1}), 422, 42205)
    assert sr.delete("/mode/ro").json() == {"mode": "READONLY"}
    assert post(sr, "/subjects/ro/versions", {"schema": V1}).status_code == 200
    # IMPORT: refused while subjects exist unless forced; then ids and versions come from the body
    error(sr.put("/mode", json={"mode": "IMPORT"}), 422, 42205)
    assert sr.put("/mode/imported", json={"mode": "IMPORT"}).json() == {"mode": "IMPORT"}
    text = avro([{"name": "k", "type": "string"}], "Imported")
    resp = post(sr, "/subjects/imported/versions", {"schema": text, "id": 5000, "version": 3})
    assert resp.json() == {"id": 5000}, resp.text
    assert sr.get("/subjects/imported/versions/3").json()["id"] == 5000
    sr.put("/mode/imported", json={"mode": "READWRITE"})
    fresh = post(sr, "/subjects/fresh/versions", {"schema": avro([{"name": "q", "type": "int"}], "Fresh")})
    assert fresh.json()["id"] > 5000  # an imported id is never handed out again


BAD_BODIES = [
    [], "schema", 5, None, {}, {"schema": 5}, {"schema": ""}, {"schema": V1, "references": 5},
    {"schema": V1, "references": ["x"]}, {"schema": V1, "references": [{"name": "n"}]},
    {"schema": V1, "references": [{"name": "n", "subject": "s", "version": "x"}]},
    {"schema": V1, "schemaType": 5}, {"schema": "[1, 2"}, {"schema": '{"type": "record"}'},
    {"schema": "{}", "schemaType": "JSON", "references": {}}, {"schema": "\u0000", "schemaType": "PROTOBUF"},
]
#: an id is the registry's to give outside IMPORT mode (compatibility tests and lookups ignore it)
BAD_REGISTRATIONS = [{"schema": V1, "id": "x"}, {"schema": V1, "id": 99999}]


@pytest.mark.parametrize("path", ["/subjects/bad/versions", "/subjects/bad", "/compatibility/subjects/bad/versions",
                                  "/compatibility/subjects/bad/versions/latest"])
def test_bad_bodies_answer_4xx_and_write_nothing(sr: InProcess, path: str) -> None:
    for body in BAD_BODIES + (BAD_REGISTRATIONS if path == "/subjects/bad/versions" else []):
        resp = post(sr, path, body)
        assert 400 <= resp.status_code < 500, (body, resp.status_code, resp.text)
    resp = sr.post(path, content=b"{not json", headers={"Content-Type": SR})
    assert 400 <= resp.status_code < 500, resp.text
    for method, where, body in [("PUT", "/config/bad", {"compatibility": 5}), ("PUT", "/config/bad", []),
                                ("PUT", "/mode/bad", {"mode": None}), ("PUT", "/mode", "x")]:
        resp = sr.request(method, where, content=json.dumps(body), headers={"Content-Type": SR})
        assert resp.status_code == 422, (where, body, resp.text)
    assert "bad" not in sr.get("/subjects?deleted=true").json()
