"""Every route the gateway registers is behind the permission its Kafka equivalent needs.

The walk takes ``app.routes`` (the hot produce/fetch routes and the coordinator routes
are among them: :mod:`laketail.api.hot_routes` serves them from the very same route
objects) and, for each route the table checks, sends the request as a principal with
no ACL (403 with the resource type's ``*_AUTHORIZATION_FAILED``) and as a principal
granted exactly the table's permissions (anything but 403). Resources in the paths do
not exist, so nothing is created, deleted or changed by the allowed requests. A route
missing from the table fails the completeness test.
"""

from __future__ import annotations

import re

import pytest

from laketail.api.acl_rules import RULES, Need, Rule
from laketail.api.authz import route_key, walk_routes
from laketail.security.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType

from .acting_as import authz_gateway

ERRORS = {
    ResourceType.TOPIC: "TOPIC_AUTHORIZATION_FAILED",
    ResourceType.GROUP: "GROUP_AUTHORIZATION_FAILED",
    ResourceType.CLUSTER: "CLUSTER_AUTHORIZATION_FAILED",
    ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    ResourceType.SUBJECT: "SUBJECT_AUTHORIZATION_FAILED",
}
PARAMS = {"topic": "walk-topic", "partition": "0", "group": "walk-group", "group_id": "walk-group",
          "instance": "walk-instance", "consumer_id": "walk-consumer", "transactional_id": "walk-txn",
          "sink_id": "walk-sink", "batch_id": "1", "broker_id": "0", "name": "retention.ms",
          "subject": "walk-subject", "version": "1", "schema_id": "1", "listener": "KAFKA"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with authz_gateway(tmp_path_factory.mktemp("route-walk")) as client:
        yield client


def registered(app) -> list[tuple[str, str, object]]:
    out = []
    for route in walk_routes(app.routes):
        methods = sorted(m for m in (getattr(route, "methods", None) or {"*"}) if m != "HEAD")
        for method in methods:
            out.append((route_key(route, method), method, route))
    return out


def url_of(path: str, cluster_id: str) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1).split(":")[0]
        return cluster_id if name == "cluster_id" else PARAMS[name]
    return re.sub(r"{([^}]+)}", value, path)


def needs_of(rule: Rule) -> tuple[Need, ...]:
    return rule.needs + ((Need(AclOperation.CREATE, ResourceType.TOPIC, "topic"),) if rule.produce else ())


def test_every_route_has_an_entry_and_every_entry_a_route(gw):
    keys = {key for key, _, _ in registered(gw.app)}
    assert keys - set(RULES) == set(), "routes with no entry in laketail.api.acl_rules.RULES"
    assert set(RULES) - keys == set(), "entries of laketail.api.acl_rules.RULES with no route"


def test_a_route_missing_from_the_table_is_refused_to_all_but_super_users(tmp_path):
    with authz_gateway(tmp_path) as client:
        @client.app.get("/v1/not-in-the-table")  # before the first request: the middleware reads routes then
        async def unlisted() -> dict:
            return {}

        denied = client.as_("User:alice", "GET", "/v1/not-in-the-table")
        assert denied.status_code == 403, denied.text
        assert denied.json()["message"].startswith("CLUSTER_AUTHORIZATION_FAILED")
        assert client.admin("GET", "/v1/not-in-the-table").status_code == 200


def test_every_checked_route_needs_its_permission(gw):
    checked = [(i, key, method, route) for i, (key, method, route) in enumerate(registered(gw.app))
               if RULES[key].kind == "checked"]
    assert len(checked) >= 80  # the table checks most routes; a broken walk would check none
    for i, key, method, route in checked:
        resp = gw.as_(f"User:nobody-{i}", method, url_of(route.path, gw.cluster_id))
        first = RULES[key].needs[0]
        assert resp.status_code == 403, f"{key} answered {resp.status_code} to a principal with no ACL: {resp.text}"
        assert resp.json()["error_code"] == 40301, key
        assert resp.json()["message"].startswith(ERRORS[first.resource_type]), (key, resp.text)
    # one principal per route, granted exactly that route's permissions (one ACL commit for all);
    # a produce to the (missing) topic would auto-create it, which needs Create too
    gw.grant(*(AclBinding.of(need.resource_type, CLUSTER_NAME if need.param is None else PARAMS[need.param],
                             "LITERAL", f"User:granted-{i}", "*", need.operation, "ALLOW")
               for i, key, _, _ in checked for need in needs_of(RULES[key])))
    for i, key, method, route in checked:
        resp = gw.as_(f"User:granted-{i}", method, url_of(route.path, gw.cluster_id))
        assert resp.status_code != 403, f"{key} refused a principal holding {RULES[key].needs}: {resp.text}"


def test_open_and_listing_routes_answer_a_principal_with_no_acl(gw):
    for key, method, route in registered(gw.app):
        rule = RULES[key]
        if rule.kind in ("open", "listing") and method == "GET" and "{" not in route.path.replace("{cluster_id}", ""):
            resp = gw.as_("User:stranger", method, url_of(route.path, gw.cluster_id))
            assert resp.status_code in ((307,) if route.path.endswith("/") else (200,)), (key, resp.text)
