"""ACLs in a real two-broker cluster: an ACL created through one broker is enforced by
the other (it reloads ``_system/acls`` when the table moves), on its hot produce path and
on the coordinator requests it proxies to the controller.

No authentication runs here, so every request is ``User:ANONYMOUS``; the brokers run
with ``allow.everyone.if.no.acl.found=true`` and the test's ACLs name only topics and
groups, so the brokers' own calls to each other (no ACL on the cluster) stay allowed.
"""

from __future__ import annotations

import pytest
from replication.support import Cluster, wait_until

pytestmark = pytest.mark.integration

BINARY_V2 = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
ENV = {"LAKETAIL_AUTHORIZER_CLASS_NAME": "laketail.security.authorizer.AclAuthorizer",
       "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true", "LAKETAIL_ACL_REFRESH_MS": "200",
       "LAKETAIL_OFFSETS_TOPIC_REPLICATION_FACTOR": "2", "LAKETAIL_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "2"}


def deny(name: str, rtype: str, operation: str) -> dict:
    return {"resource_type": rtype, "resource_name": name, "pattern_type": "LITERAL", "principal": "User:ANONYMOUS",
            "host": "*", "operation": operation, "permission": "DENY"}


def test_an_acl_made_through_one_broker_is_enforced_by_the_other(tmp_path):
    cluster = Cluster(tmp_path, size=2, env=ENV).start()
    try:
        http = cluster.http
        first = cluster[0]
        cid = http.get(f"{first.url}/v3/clusters").json()["data"][0]["cluster_id"]
        controller = int(http.get(f"{first.url}/v3/clusters/{cid}").json()["controller"]["related"].rsplit("/", 1)[1])
        ctrl, other = cluster[controller], cluster[1 - controller]
        for topic in ("locked-t", "open-t"):
            resp = http.post(f"{other.url}/v3/clusters/{cid}/topics",
                             json={"topic_name": topic, "partitions_count": 1, "replication_factor": 2})
            assert resp.status_code == 201, resp.text
        record = {"records": [{"value": "dg==", "partition": 0}]}
        wait_until(lambda: http.post(f"{other.url}/topics/locked-t", json=record, headers=BINARY_V2).status_code
                   == 200, "the other broker serves the new topic")

        resp = http.post(f"{ctrl.url}/v3/clusters/{cid}/acls:batch",
                         json={"data": [deny("locked-t", "TOPIC", "WRITE"), deny("locked-g", "GROUP", "READ")]})
        assert resp.status_code == 204, resp.text

        def refused() -> bool:
            resp = http.post(f"{other.url}/topics/locked-t", json=record, headers=BINARY_V2)
            return resp.status_code == 403 and resp.json()["message"].startswith("TOPIC_AUTHORIZATION_FAILED")

        wait_until(refused, "the other broker reloads the ACLs and refuses the produce", timeout_s=60)
        commit = {"offsets": [{"topic": "open-t", "partition": 0, "offset": 0}]}
        locked = http.post(f"{other.url}/v1/groups/locked-g/commit", json=commit)  # proxied to the controller
        assert locked.status_code == 403, locked.text
        assert locked.json()["message"].startswith("GROUP_AUTHORIZATION_FAILED")
        opened = http.post(f"{other.url}/v1/groups/open-g/commit", json=commit)
        assert opened.status_code == 200, opened.text
        assert http.post(f"{other.url}/topics/open-t", json=record, headers=BINARY_V2).status_code == 200
    finally:
        cluster.close()
