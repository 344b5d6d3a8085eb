"""The ACL API and the console's offset reset under hostile input, then a restart.

Bad numbers, deep JSON and huge bodies get a 4xx and write nothing; a broker killed
with ``kill -9`` and one stopped with SIGTERM start again with their ACLs in force.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ENV = {"LAKETAIL_AUTHORIZER_CLASS_NAME": "laketail.security.authorizer.AclAuthorizer",
       "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"}
BINARY_V2 = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
RECORD = {"records": [{"value": "dg==", "partition": 0}]}


def _deny_write(topic: str) -> dict:
    return {"resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL",
            "principal": "User:ANONYMOUS", "host": "*", "operation": "WRITE", "permission": "DENY"}


def test_hostile_acl_and_reset_requests_write_nothing_and_restarts_keep_the_acls(broker_factory):
    proc = broker_factory(env=ENV)
    rest = proc.rest
    for topic in ("acl-locked", "acl-open"):
        assert rest.create_topic(topic, 1).status_code == 201
    acls = rest.v3("/acls")
    assert rest.http.post(acls, json=_deny_write("acl-locked")).status_code == 201
    before = rest.http.get(acls).json()["data"]

    deep: object = "x"
    for _ in range(300):
        deep = {"a": deep}
    hostile = [
        rest.http.post(acls, json=deep),
        rest.http.post(acls, content=b"{" * 2_000_000, headers={"Content-Type": "application/json"}),
        rest.http.post(acls, json={**_deny_write("acl-open"), "operation": "WRITE" * 10_000}),
        rest.http.post(acls, json={**_deny_write("acl-open"), "pattern_type": 2**70}),
        rest.http.post(rest.v3("/acls:batch"), json={"data": [_deny_write("acl-open"), {"resource_type": 2**63}]}),
        rest.http.post("/v1/console/groups/g/reset-offsets",
                       json={"topic": "acl-open", "to": "offset", "offset": 2**70, "execute": True}),
        rest.http.post("/v1/console/groups/g/reset-offsets",
                       json={"topic": "acl-open", "to": "earliest", "partitions": [2**40], "execute": True}),
        rest.http.post("/v1/console/sql", json=deep),
    ]
    for resp in hostile:
        assert 400 <= resp.status_code < 500, (resp.request.url, resp.status_code, resp.text[:200])
    assert rest.http.get(acls).json()["data"] == before  # nothing written
    committed = rest.http.post("/v1/groups/g/committed", json={"partitions": [{"topic": "acl-open", "partition": 0}]})
    assert committed.json()["offsets"][0]["offset"] == -1

    for crash in (proc.kill9, proc.stop):
        crash()
        proc.restart()
        http = proc.rest.http
        assert http.get(acls).json()["data"] == before
        locked = http.post("/topics/acl-locked", json=RECORD, headers=BINARY_V2)
        assert locked.status_code == 403 and locked.json()["message"].startswith("TOPIC_AUTHORIZATION_FAILED")
        assert http.post("/topics/acl-open", json=RECORD, headers=BINARY_V2).status_code == 200
