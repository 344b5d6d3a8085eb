"""v2 consumer instances under ACLs (issue 36, findings 4, 6 and 8): commits need Read
on every topic they commit, a body or not; a seek moves only assigned partitions; an
instance is its creator's (others get 404 as if it did not exist); a pattern matches
only topics the principal may Describe."""

from __future__ import annotations

import pytest

from .acting_as import allow, authz_gateway

V2 = {"Content-Type": "application/vnd.kafka.v2+json"}
ACCEPT = {"Accept": "application/vnd.kafka.binary.v2+json"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with authz_gateway(tmp_path_factory.mktemp("instances")) as client:
        for topic in ("ci-mine", "ci-theirs", "pat-a", "pat-b"):
            resp = client.admin("POST", f"/v3/clusters/{client.cluster_id}/topics",
                                json={"topic_name": topic, "partitions_count": 1})
            assert resp.status_code == 201, resp.text
        yield client


def _instance(gw, who: str, group: str, name: str) -> str:
    made = gw.as_(who, "POST", f"/consumers/{group}", json={"name": name, "format": "binary"}, headers=V2)
    assert made.status_code == 200, made.text
    return f"/consumers/{group}/instances/{name}"


def _committed(gw, group: str, topic: str) -> list:
    resp = gw.admin("POST", f"/v1/groups/{group}/committed", json={"partitions": [{"topic": topic, "partition": 0}]})
    assert resp.status_code == 200, resp.text
    return [p for p in resp.json()["offsets"] if p["offset"] >= 0]


def test_a_commit_without_offsets_needs_read_on_every_topic_it_commits(gw):
    gw.grant(allow("User:lena", "READ", "GROUP", "ci-g"), allow("User:lena", "READ", "TOPIC", "ci-mine"),
             allow("User:lena", "DESCRIBE", "TOPIC", "ci-theirs"))
    base = _instance(gw, "User:lena", "ci-g", "c1")
    assign = gw.as_("User:lena", "POST", base + "/assignments", headers=V2,
                    json={"partitions": [{"topic": "ci-theirs", "partition": 0}]})
    assert assign.status_code == 204, assign.text
    seek = gw.as_("User:lena", "POST", base + "/positions", headers=V2,
                  json={"offsets": [{"topic": "ci-theirs", "partition": 0, "offset": 999}]})
    assert seek.status_code == 204, seek.text
    commit = gw.as_("User:lena", "POST", base + "/offsets", headers=V2)
    assert commit.status_code == 403, commit.text
    assert commit.json()["message"].startswith("TOPIC_AUTHORIZATION_FAILED")
    assert _committed(gw, "ci-g", "ci-theirs") == []  # nothing committed


def test_a_seek_moves_only_assigned_partitions(gw):
    gw.grant(allow("User:lena", "READ", "GROUP", "ci-g2"))
    base = _instance(gw, "User:lena", "ci-g2", "c1")
    assert gw.as_("User:lena", "POST", base + "/assignments", headers=V2,
                  json={"partitions": [{"topic": "ci-mine", "partition": 0}]}).status_code == 204
    seek = gw.as_("User:lena", "POST", base + "/positions", headers=V2,
                  json={"offsets": [{"topic": "ci-theirs", "partition": 0, "offset": 999}]})
    assert seek.status_code == 409, seek.text
    assert gw.as_("User:lena", "POST", base + "/offsets", headers=V2).status_code == 200
    assert _committed(gw, "ci-g2", "ci-theirs") == []


def test_an_instance_is_its_creators_only(gw):
    gw.grant(allow("User:lena", "READ", "GROUP", "ci-shared"), allow("User:bob", "READ", "GROUP", "ci-shared"),
             allow("User:lena", "READ", "TOPIC", "ci-mine"))
    base = _instance(gw, "User:lena", "ci-shared", "lenas")
    assert gw.as_("User:lena", "POST", base + "/assignments", headers=V2,
                  json={"partitions": [{"topic": "ci-mine", "partition": 0}]}).status_code == 204
    for method, path, body in (("GET", "/assignments", None), ("GET", "/subscription", None),
                               ("POST", "/positions", {"offsets": [{"topic": "ci-mine", "partition": 0,
                                                                    "offset": 5}]}),
                               ("POST", "/offsets", None), ("GET", "/records", None), ("DELETE", "", None)):
        resp = gw.as_("User:bob", method, base + path, json=body, headers={**V2, **ACCEPT})
        assert resp.status_code == 404, (method, path, resp.text)
        assert resp.json()["error_code"] == 40403
    mine = gw.as_("User:lena", "GET", base + "/assignments", headers=V2)
    assert mine.status_code == 200 and mine.json()["partitions"] == [{"topic": "ci-mine", "partition": 0}]
    assert gw.as_("User:lena", "DELETE", base).status_code == 204


def test_a_pattern_matches_only_topics_the_principal_may_describe(gw):
    gw.grant(allow("User:pat", "READ", "GROUP", "ci-pat"), allow("User:pat", "READ", "TOPIC", "pat-a"))
    base = _instance(gw, "User:pat", "ci-pat", "p1")
    sub = gw.as_("User:pat", "POST", base + "/subscription", json={"topic_pattern": "pat-.*"}, headers=V2)
    assert sub.status_code == 204, sub.text
    assert gw.as_("User:pat", "GET", base + "/subscription", headers=V2).json()["topics"] == ["pat-a"]
    poll = gw.as_("User:pat", "GET", base + "/records", params={"timeout": 0}, headers=ACCEPT)
    assert poll.status_code == 200, poll.text
