"""Authorization end to end on an in-process gateway: per resource type and pattern
type, allowed and denied; listings filtered; body resources; internal topics;
idempotent producers; cache invalidation; audit lines."""

from __future__ import annotations

import logging

import pytest
from api_inprocess import BINARY_V2, b64
from integration.support import wait_until

from laketail.security.authorizer import Authorizer

from .acting_as import AUTHORIZER, allow, authz_gateway, deny

ALICE, BOB = "User:alice", "User:bob"
RECORDS = {"records": [{"value": b64(b"v")}]}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with authz_gateway(tmp_path_factory.mktemp("authz")) as client:
        yield client


def produce(gw, who: str, topic: str, **params):
    return gw.as_(who, "POST", f"/topics/{topic}/partitions/0", json=RECORDS,
                  headers={"Content-Type": BINARY_V2}, params=params)


def fetch(gw, who: str, topic: str):
    return gw.as_(who, "GET", f"/topics/{topic}/partitions/0/records", params={"offset": 0})


def create(gw, who: str, topic: str):
    return gw.as_(who, "POST", f"/v3/clusters/{gw.cluster_id}/topics", json={"topic_name": topic,
                                                                             "partitions_count": 1})


def error_name(resp) -> str:
    assert resp.status_code == 403, resp.text
    assert resp.json()["error_code"] == 40301, resp.text
    return resp.json()["message"].split(":")[0]


def test_topic_acls_literal_prefixed_and_deny_wins(gw):
    for t in ("orders-eu", "orders-secret", "payments"):
        assert create(gw, "User:admin", t).status_code == 201
    gw.grant(allow(ALICE, "WRITE", "TOPIC", "orders-", "PREFIXED"),
             deny(ALICE, "WRITE", "TOPIC", "orders-secret"),
             allow(BOB, "READ", "TOPIC", "orders-eu"))
    assert produce(gw, ALICE, "orders-eu").status_code == 200
    assert error_name(produce(gw, ALICE, "orders-secret")) == "TOPIC_AUTHORIZATION_FAILED"
    assert error_name(produce(gw, ALICE, "payments")) == "TOPIC_AUTHORIZATION_FAILED"
    assert error_name(fetch(gw, ALICE, "orders-eu")) == "TOPIC_AUTHORIZATION_FAILED"  # Write is not Read
    resp = fetch(gw, BOB, "orders-eu")
    assert resp.status_code == 200 and len(resp.json()) == 1  # what alice wrote
    assert error_name(produce(gw, BOB, "orders-eu")) == "TOPIC_AUTHORIZATION_FAILED"
    # the Arrow and v3 produce paths are the same permission
    v3 = gw.as_(BOB, "POST", f"/v3/clusters/{gw.cluster_id}/topics/orders-eu/records", json={})
    assert error_name(v3) == "TOPIC_AUTHORIZATION_FAILED"


def test_auto_creating_a_topic_by_producing_needs_create(gw):
    gw.grant(allow("User:kim", "WRITE", "TOPIC", "kim-", "PREFIXED"))
    assert error_name(produce(gw, "User:kim", "kim-new")) == "TOPIC_AUTHORIZATION_FAILED"
    assert gw.admin("GET", "/topics/kim-new").status_code == 404  # nothing was created
    gw.grant(allow("User:kim", "CREATE", "TOPIC", "kim-", "PREFIXED"))
    assert produce(gw, "User:kim", "kim-new").status_code == 200
    assert gw.admin("GET", "/topics/kim-new").status_code == 200


def test_internal_topics_only_for_super_users(gw):
    gw.grant(allow("User:carol", "ALL", "TOPIC", "*"))
    for topic in ("__consumer_offsets", "__transaction_state"):
        assert error_name(fetch(gw, "User:carol", topic)) == "TOPIC_AUTHORIZATION_FAILED"
        assert error_name(produce(gw, "User:carol", topic)) == "TOPIC_AUTHORIZATION_FAILED"
    assert gw.admin("GET", "/topics/__consumer_offsets/partitions/0/records",
                    params={"offset": 0}).status_code != 403
    metrics = gw.admin("GET", "/metrics").text
    assert 'laketail_request_errors_total{error="TOPIC_AUTHORIZATION_FAILED"}' in metrics


def test_listings_show_only_what_the_principal_may_describe(gw):
    for t in ("list-visible", "list-hidden"):
        assert create(gw, "User:admin", t).status_code == 201
    for g in ("lg-visible", "lg-hidden"):
        resp = gw.admin("POST", f"/v1/groups/{g}/commit",
                        json={"offsets": [{"topic": "list-visible", "partition": 0, "offset": 0}]})
        assert resp.status_code == 200, resp.text
    gw.grant(allow("User:dave", "DESCRIBE", "TOPIC", "list-v", "PREFIXED"),
             allow("User:dave", "READ", "GROUP", "lg-visible"))
    v2 = gw.as_("User:dave", "GET", "/topics").json()
    assert "list-visible" in v2 and "list-hidden" not in v2
    assert "list-hidden" in gw.admin("GET", "/topics").json()
    v3 = [t["topic_name"] for t in gw.as_("User:dave", "GET", f"/v3/clusters/{gw.cluster_id}/topics").json()["data"]]
    assert v3 == ["list-visible"]
    groups = [g["group_id"] for g in gw.as_("User:dave", "GET", "/v1/groups").json()["groups"]]
    assert groups == ["lg-visible"]
    v3g = gw.as_("User:dave", "GET", f"/v3/clusters/{gw.cluster_id}/consumer-groups").json()["data"]
    assert [g["consumer_group_id"] for g in v3g] == ["lg-visible"]
    assert gw.as_("User:nobody", "GET", "/topics").json() == []
    console = gw.as_("User:dave", "GET", "/v1/console/topics?q=list-").json()
    assert [t["topic_name"] for t in console["data"]] == ["list-visible"] and console["total"] == 1
    console_groups = gw.as_("User:dave", "GET", "/v1/console/groups").json()["data"]
    assert [g["group_id"] for g in console_groups] == ["lg-visible"]


def test_the_consoles_sql_and_offset_reset_need_read_on_the_topic(gw):
    assert create(gw, "User:admin", "console-secret").status_code == 201
    gw.grant(allow("User:gina", "READ", "GROUP", "gina-group"))
    sql = gw.as_("User:gina", "POST", "/v1/console/sql", json={"query": "SELECT * FROM `console-secret`"})
    assert error_name(sql) == "TOPIC_AUTHORIZATION_FAILED"
    reset = gw.as_("User:gina", "POST", "/v1/console/groups/gina-group/reset-offsets",
                   json={"topic": "console-secret", "to": "earliest", "execute": True})
    assert error_name(reset) == "TOPIC_AUTHORIZATION_FAILED"
    gw.grant(allow("User:gina", "READ", "TOPIC", "console-secret"))
    again = gw.as_("User:gina", "POST", "/v1/console/groups/gina-group/reset-offsets",
                   json={"topic": "console-secret", "to": "earliest", "execute": True})
    assert again.status_code == 200, again.text


def test_commit_needs_read_on_the_group_and_on_every_topic_of_the_body(gw):
    assert create(gw, "User:admin", "commit-ok").status_code == 201
    gw.grant(allow("User:erin", "READ", "GROUP", "erin-", "PREFIXED"), allow("User:erin", "READ", "TOPIC", "commit-ok"))
    body = {"offsets": [{"topic": "commit-ok", "partition": 0, "offset": 0}]}
    assert gw.as_("User:erin", "POST", "/v1/groups/erin-1/commit", json=body).status_code == 200
    other = {"offsets": [{"topic": "commit-ok", "partition": 0, "offset": 0},
                         {"topic": "commit-forbidden", "partition": 0, "offset": 5}]}
    resp = gw.as_("User:erin", "POST", "/v1/groups/erin-2/commit", json=other)
    assert error_name(resp) == "TOPIC_AUTHORIZATION_FAILED"
    # nothing was committed for the refused request
    committed = gw.admin("POST", "/v1/groups/erin-2/committed",
                         json={"partitions": [{"topic": "commit-ok", "partition": 0}]}).json()["offsets"]
    assert committed[0]["offset"] == -1
    assert error_name(gw.as_("User:erin", "POST", "/v1/groups/other/commit", json=body)) == \
        "GROUP_AUTHORIZATION_FAILED"


def test_create_topics_needs_create_on_the_cluster_or_the_topic(gw):
    gw.grant(allow("User:frank", "CREATE", "TOPIC", "frank-", "PREFIXED"))
    assert create(gw, "User:frank", "frank-1").status_code == 201
    assert error_name(create(gw, "User:frank", "elsewhere-1")) == "TOPIC_AUTHORIZATION_FAILED"
    assert gw.admin("GET", "/topics/elsewhere-1").status_code == 404  # nothing was created
    gw.grant(allow("User:grace", "CREATE", "CLUSTER"))
    assert create(gw, "User:grace", "grace-anything").status_code == 201
    assert error_name(gw.as_("User:frank", "DELETE", f"/v3/clusters/{gw.cluster_id}/topics/frank-1")) == \
        "TOPIC_AUTHORIZATION_FAILED"


def test_idempotent_and_transactional_producers(gw):
    assert create(gw, "User:admin", "idem").status_code == 201
    gw.grant(allow("User:heidi", "WRITE", "TOPIC", "idem"))
    assert error_name(gw.as_("User:heidi", "POST", "/v1/producers", json={})) == "CLUSTER_AUTHORIZATION_FAILED"
    idem = {"producer_id": 0, "producer_epoch": 0, "sequence": 0}
    assert error_name(produce(gw, "User:heidi", "idem", **idem)) == "CLUSTER_AUTHORIZATION_FAILED"
    resp = gw.as_("User:heidi", "POST", "/v1/producers", json={"transactional_id": "heidi-tx"})
    assert error_name(resp) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    gw.grant(allow("User:heidi", "IDEMPOTENT_WRITE", "CLUSTER"),
             allow("User:heidi", "WRITE", "TRANSACTIONAL_ID", "heidi-", "PREFIXED"))
    producer = gw.as_("User:heidi", "POST", "/v1/producers", json={})
    assert producer.status_code == 200, producer.text
    pid = producer.json()
    resp = produce(gw, "User:heidi", "idem", producer_id=pid["producer_id"], producer_epoch=pid["producer_epoch"],
                   sequence=0)
    assert resp.status_code == 200, resp.text
    txn = gw.as_("User:heidi", "POST", "/v1/producers", json={"transactional_id": "heidi-tx"})
    assert txn.status_code == 200, txn.text
    session = {"producer_id": txn.json()["producer_id"], "producer_epoch": txn.json()["producer_epoch"]}
    add = gw.as_("User:heidi", "POST", "/v1/transactions/heidi-tx/partitions",
                 json={**session, "partitions": [{"topic": "not-heidis", "partition": 0}]})
    assert error_name(add) == "TOPIC_AUTHORIZATION_FAILED"
    offsets = gw.as_("User:heidi", "POST", "/v1/transactions/heidi-tx/offsets",
                     json={**session, "group_id": "not-heidis", "offsets": [{"topic": "idem", "partition": 0,
                                                                              "offset": 0}]})
    assert error_name(offsets) == "GROUP_AUTHORIZATION_FAILED"  # TxnOffsetCommit: Read on the group
    # a transactional batch joins the producer's transaction: Write on its transactional id
    own = produce(gw, "User:heidi", "idem", producer_id=session["producer_id"],
                  producer_epoch=session["producer_epoch"], sequence=0, transactional="true")
    assert own.status_code == 200, own.text
    victim = gw.admin("POST", "/v1/producers", json={"transactional_id": "victim-tx"}).json()
    forged = produce(gw, "User:heidi", "idem", producer_id=victim["producer_id"],
                     producer_epoch=victim["producer_epoch"], sequence=0, transactional="true")
    assert error_name(forged) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    state = gw.admin("GET", "/v1/transactions/victim-tx").json()
    assert state["partitions"] == []  # nothing joined the victim's transaction


def test_a_spark_sink_and_its_sessions_need_write_on_the_sink_id(gw):
    assert create(gw, "User:admin", "sink-out").status_code == 201
    gw.grant(allow("User:sam", "WRITE", "TRANSACTIONAL_ID", "sam-sink"),
             allow("User:sam", "WRITE", "TOPIC", "sink-out"))
    enlisted = gw.as_("User:sam", "POST", "/v1/sinks/sam-sink/batches/0/enlist", json={})
    assert enlisted.status_code == 200, enlisted.text
    session = enlisted.json()
    assert session["transactional_id"].startswith("__sink:sam-sink:")
    add = gw.as_("User:sam", "POST", f"/v1/transactions/{session['transactional_id']}/partitions",
                 json={"producer_id": session["producer_id"], "producer_epoch": session["producer_epoch"],
                       "partitions": [{"topic": "sink-out", "partition": 0}]})
    assert add.status_code == 200, add.text
    other = gw.as_("User:sam", "POST", "/v1/sinks/someone-elses/batches/0/enlist", json={})
    assert error_name(other) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    forged = gw.as_("User:sam", "POST", "/v1/transactions/__sink:someone-elses:0:abc/commit",
                    json={"producer_id": 1, "producer_epoch": 0})
    assert error_name(forged) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


def test_a_v2_consumer_polls_only_topics_it_may_read(gw):
    for t in ("poll-mine", "poll-theirs"):
        assert create(gw, "User:admin", t).status_code == 201
    gw.grant(allow("User:lena", "READ", "GROUP", "lena-g"), allow("User:lena", "READ", "TOPIC", "poll-mine"))
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    made = gw.as_("User:lena", "POST", "/consumers/lena-g", json={"name": "c1", "format": "binary"}, headers=v2)
    assert made.status_code == 200, made.text
    base = "/consumers/lena-g/instances/c1"
    resp = gw.as_("User:lena", "POST", base + "/subscription", json={"topics": ["poll-theirs"]}, headers=v2)
    assert resp.status_code == 204, resp.text
    poll = gw.as_("User:lena", "GET", base + "/records", params={"timeout": 0},
                  headers={"Accept": "application/vnd.kafka.binary.v2+json"})
    assert error_name(poll) == "TOPIC_AUTHORIZATION_FAILED"
    commit = gw.as_("User:lena", "POST", base + "/offsets", headers=v2,
                    json={"offsets": [{"topic": "poll-theirs", "partition": 0, "offset": 0}]})
    assert error_name(commit) == "TOPIC_AUTHORIZATION_FAILED"
    assert error_name(gw.as_("User:lena", "DELETE", "/consumers/other-g/instances/c1")) == \
        "GROUP_AUTHORIZATION_FAILED"
    assert gw.as_("User:lena", "DELETE", base).status_code == 204


def test_a_deleted_acl_stops_allowing_at_once(gw):
    assert create(gw, "User:admin", "revoked").status_code == 201
    gw.grant(allow("User:ivan", "READ", "TOPIC", "revoked"))
    assert fetch(gw, "User:ivan", "revoked").status_code == 200  # the decision is cached now
    resp = gw.admin("DELETE", f"/v3/clusters/{gw.cluster_id}/acls",
                    params={"resource_type": "TOPIC", "resource_name": "revoked", "principal": "User:ivan"})
    assert len(resp.json()["data"]) == 1
    assert error_name(fetch(gw, "User:ivan", "revoked")) == "TOPIC_AUTHORIZATION_FAILED"


def test_audit_lines_for_denials_and_changes(gw, caplog):
    caplog.set_level(logging.INFO, logger="laketail.authorizer")
    assert create(gw, "User:admin", "audited").status_code == 201
    fetch(gw, "User:mallory", "audited")
    gw.admin("POST", f"/v3/clusters/{gw.cluster_id}/acls", json={
        "resource_type": "TOPIC", "resource_name": "audited", "pattern_type": "LITERAL", "principal": "User:oscar",
        "host": "*", "operation": "READ", "permission": "ALLOW"})
    gw.admin("DELETE", f"/v3/clusters/{gw.cluster_id}/topics/audited")
    lines = [r.getMessage() for r in caplog.records if r.name == "laketail.authorizer"]
    assert ("principal=User:mallory host=127.0.0.1 operation=READ resource=TOPIC:audited decision=DENIED"
            in lines), lines
    assert any(line.startswith("principal=User:admin host=127.0.0.1 operation=CREATE_ACLS resource=(principal="
                               "User:oscar") and line.endswith("decision=ALLOWED") for line in lines), lines
    # a super user's changes are audited too
    assert ("principal=User:admin host=127.0.0.1 operation=DELETE resource=TOPIC:audited decision=ALLOWED"
            in lines), lines


def test_another_brokers_acl_change_is_seen_after_a_reload(gw):
    assert create(gw, "User:admin", "reloaded").status_code == 201
    assert error_name(fetch(gw, "User:peggy", "reloaded")) == "TOPIC_AUTHORIZATION_FAILED"
    other = Authorizer(gw.app.state.settings.data, AUTHORIZER)  # another broker on the same catalog
    gw.run(other.start())
    gw.run(other.create([allow("User:peggy", "READ", "TOPIC", "reloaded")], "User:admin", "test"))
    wait_until(lambda: fetch(gw, "User:peggy", "reloaded").status_code == 200, "the gateway reloads the ACLs",
               timeout_s=30)


def test_off_by_default_everything_allowed_and_acl_api_security_disabled(tmp_path):
    from api_inprocess import gateway

    with gateway(tmp_path, tier_enabled=False) as client:
        assert client.post("/topics/free/partitions/0", json=RECORDS,
                           headers={"Content-Type": BINARY_V2}).status_code == 200
        resp = client.get(f"/v3/clusters/{client.broker.cluster_id}/acls")
        assert resp.status_code == 400 and resp.json()["message"].startswith("SECURITY_DISABLED"), resp.text


def test_settings_keys_and_strict_values(tmp_path):
    from laketail.config import load_settings
    from laketail.errors import InvalidConfig, InvalidRequest

    settings = load_settings(env={"LAKETAIL_AUTHORIZER_CLASS_NAME": "org.apache.kafka.metadata.authorizer."
                                  "StandardAuthorizer", "LAKETAIL_SUPER_USERS": "User:admin; User:broker",
                                  "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"})
    authorizer = Authorizer.from_settings(settings)
    assert authorizer.enabled and authorizer.allow_if_no_acl
    assert authorizer.super_users == {"User:admin", "User:broker", "Broker:laketail"}  # peers are always super
    assert not Authorizer.from_settings(load_settings(env={})).enabled  # off unless named
    with pytest.raises(InvalidConfig, match="authorizer.class.name"):
        Authorizer(tmp_path, "com.example.MyAuthorizer")
    with pytest.raises(InvalidRequest, match="<type>:<name>"):
        Authorizer(tmp_path, AUTHORIZER, super_users="admin")
