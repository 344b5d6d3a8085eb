"""``laketail acls`` (kafka-acls's flags) against a real broker with ACLs on.

The broker runs with ``allow.everyone.if.no.acl.found=true`` and no super user, so the
(unauthenticated, ``User:ANONYMOUS``) CLI may manage ACLs while no ACL names the
cluster; a DENY it adds then refuses the real produce path (the hot routes) over HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

pytestmark = pytest.mark.integration


def acls(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
    return subprocess.run([sys.executable, "-m", "laketail.cli", "acls", "--bootstrap-server", url, *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_add_list_remove_and_the_broker_enforces_them(broker_factory):
    broker = broker_factory(env={"LAKETAIL_AUTHORIZER_CLASS_NAME": "kafka.security.authorizer.AclAuthorizer",  # Kafka's
                                 "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"})
    record = {"records": [{"value": "dg=="}]}
    headers = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        assert http.post("/topics/locked-1", json=record, headers=headers).status_code == 200

        added = acls(broker.url, "--add", "--deny-principal", "User:ANONYMOUS", "--operation", "Write",
                     "--topic", "locked-", "--resource-pattern-type", "prefixed")
        assert added.returncode == 0, added.stderr
        assert "patternType=PREFIXED" in added.stdout and "operation=WRITE" in added.stdout

        listed = acls(broker.url, "--list", "--topic", "locked-", "--resource-pattern-type", "prefixed")
        assert listed.returncode == 0, listed.stderr
        assert ("(principal=User:ANONYMOUS, host=*, operation=WRITE, permissionType=DENY)" in listed.stdout), \
            listed.stdout
        matched = acls(broker.url, "--list", "--topic", "locked-1", "--resource-pattern-type", "match")
        assert "name=locked-, patternType=PREFIXED" in matched.stdout, matched.stdout

        denied = http.post("/topics/locked-1", json=record, headers=headers)
        assert denied.status_code == 403, denied.text
        assert denied.json()["message"].startswith("TOPIC_AUTHORIZATION_FAILED")
        assert http.post("/topics/open-1", json=record, headers=headers).status_code == 200

        removed = acls(broker.url, "--remove", "--deny-principal", "User:ANONYMOUS", "--topic", "locked-",
                       "--resource-pattern-type", "prefixed")
        assert removed.returncode == 0, removed.stderr
        assert "operation=WRITE" in removed.stdout
        assert http.post("/topics/locked-1", json=record, headers=headers).status_code == 200

        empty = acls(broker.url, "--list")
        assert empty.returncode == 0 and "Current ACLs" not in empty.stdout
        usage = acls(broker.url, "--add", "--allow-principal", "User:x")
        assert usage.returncode == 2 and "needs a resource" in usage.stderr


def test_a_client_cannot_choose_its_host_with_forwarding_headers(broker_factory):
    """Kafka's host ACLs match the connection's address. uvicorn by default trusts
    ``X-Forwarded-For`` from 127.0.0.1, which would let any local process name another
    host and escape a host DENY; the broker trusts no forwarding header (peer brokers
    speak for a client only with the cluster secret)."""
    broker = broker_factory(env={"LAKETAIL_AUTHORIZER_CLASS_NAME": "kafka.security.authorizer.AclAuthorizer",
                                 "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"})
    record = {"records": [{"value": "dg=="}]}
    headers = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        for permission, host in (("--allow-principal", "*"), ("--deny-principal", "127.0.0.1")):
            flag = "--allow-host" if permission == "--allow-principal" else "--deny-host"
            added = acls(broker.url, "--add", permission, "User:ANONYMOUS", flag, host, "--operation", "Write",
                         "--topic", "hosts-t")
            assert added.returncode == 0, added.stderr
        for spoof in ({}, {"X-Forwarded-For": "10.9.9.9"}, {"Forwarded": "for=10.9.9.9"},
                      {"X-Forwarded-For": "10.9.9.9", "X-Forwarded-Proto": "https"}):
            denied = http.post("/topics/hosts-t", json=record, headers={**headers, **spoof})
            assert denied.status_code == 403, (spoof, denied.text)
            assert denied.json()["message"].startswith("TOPIC_AUTHORIZATION_FAILED"), denied.text
        listed = http.get("/v3/clusters", headers={"X-Forwarded-Proto": "https"}).json()["data"][0]["metadata"]["self"]
        assert listed.startswith("http://"), listed  # nor its scheme
