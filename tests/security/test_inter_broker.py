"""The private channel between brokers, on a real two-broker cluster.

Each broker has a ``CLIENT`` listener (SASL_PLAINTEXT on loopback) and a ``BROKER``
listener (TLS with the test CA and ``ssl.client.auth=required``, plus the cluster
secret). The brokers replicate and forward to each other through the ``BROKER``
listeners; the issue's attacks are replayed against both listeners and refused, and
the cluster is shown unchanged after.
"""

from __future__ import annotations

import base64
import ssl
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest
from integration.support import wait_until

from .support import PASSWORD, SECRET, Pki, SecureBroker, add_user, ports

pytestmark = pytest.mark.integration

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
FAST_MEMBERSHIP = {"LAKETAIL_BROKER_SESSION_TIMEOUT_MS": "3000", "LAKETAIL_BROKER_HEARTBEAT_INTERVAL_MS": "500"}
ALICE = ("alice", PASSWORD)
BOB = ("bob", PASSWORD)
#: ACLs on, nothing allowed without one; alice is the super user. The brokers' own calls
#: (registration, replica fetches, forwarded appends) pass as the peer principal.
AUTHORIZATION = {"LAKETAIL_AUTHORIZER_CLASS_NAME": "laketail.security.authorizer.AclAuthorizer",
                 "LAKETAIL_SUPER_USERS": "User:alice", "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "false"}


class TwoBrokers:
    def __init__(self, brokers: list[SecureBroker], pki: Pki) -> None:
        self.brokers = brokers
        self.pki = pki
        self.http = httpx.Client(timeout=30.0, auth=ALICE)

    def client_url(self, i: int) -> str:
        return self.brokers[i].listener_url("CLIENT", "http")

    def peer_url(self, i: int) -> str:
        return self.brokers[i].listener_url("BROKER", "https")

    def trusting(self) -> ssl.SSLContext:
        """A TLS context that trusts the cluster's CA and shows a certificate it signed
        (alice's): more than an attacker on the network has. Refusing it shows the
        cluster secret is what makes a peer."""
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_pem))
        ctx.load_cert_chain(str(self.pki.alice_cert), str(self.pki.alice_key))
        return ctx

    def cluster_id(self) -> str:
        return self.http.get(f"{self.client_url(0)}/v3/clusters").json()["data"][0]["cluster_id"]

    def broker_ids(self, i: int) -> list[int]:
        return self.http.get(f"{self.client_url(i)}/brokers").json()["brokers"]

    def end_offset(self, i: int, topic: str, partition: int) -> int:
        resp = self.http.get(f"{self.client_url(i)}/topics/{topic}/partitions/{partition}/offsets")
        assert resp.status_code == 200, resp.text
        return resp.json()["end_offset"]

    def leader(self, topic: str, partition: int) -> int:
        resp = self.http.get(f"{self.client_url(0)}/topics/{topic}/partitions/{partition}")
        assert resp.status_code == 200, resp.text
        return resp.json()["leader"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoBrokers]:
    base = tmp_path_factory.mktemp("secure-pair")
    pki = Pki(base / "pki")
    data = base / "data"
    add_user(data, "alice", PASSWORD)
    add_user(data, "bob", PASSWORD)
    brokers = []
    for i in range(2):
        client_port, broker_port = ports(2)
        brokers.append(SecureBroker(
            data, {"CLIENT": ("SASL_PLAINTEXT", client_port), "BROKER": ("SSL", broker_port)},
            {**pki.broker_env(), **FAST_MEMBERSHIP, **AUTHORIZATION, "LAKETAIL_INTER_BROKER_SECRET": SECRET,
             "LAKETAIL_SSL_CLIENT_AUTH": "required"},  # peers show their certificates too
            broker_id=i, ready_auth=httpx.BasicAuth(*ALICE), ca=pki.ca_pem,
            run_dir=base / f"run-{i}", log_dir=base / f"log-{i}",
        ))
    cluster = TwoBrokers(brokers, pki)
    try:
        with ThreadPoolExecutor(2) as pool:
            for future in [pool.submit(b.start) for b in brokers]:
                future.result()
        for i in range(2):
            wait_until(lambda i=i: cluster.broker_ids(i) == [0, 1], f"broker {i} sees both brokers", 120)
        yield cluster
    finally:
        cluster.http.close()
        for b in brokers:
            b.stop()


def _produce(http: httpx.Client, url: str, topic: str, partition: int, values: list[str]) -> httpx.Response:
    body = {"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]}
    return http.post(f"{url}/topics/{topic}/partitions/{partition}", json=body, params={"acks": "all"},
                     headers={"Content-Type": BINARY_V2})


@pytest.fixture(scope="module")
def replicated(pair: TwoBrokers) -> tuple[str, int, int]:
    """A topic with a partition led by one broker and followed by the other; returns
    (topic, leader, follower) once the follower has caught up over the BROKER listener."""
    topic = f"replicated-{uuid.uuid4().hex[:8]}"
    resp = pair.http.post(f"{pair.client_url(0)}/v3/clusters/{pair.cluster_id()}/topics",
                          json={"topic_name": topic, "partitions_count": 1, "replication_factor": 2})
    assert resp.status_code in (200, 201), resp.text
    wait_until(lambda: pair.leader(topic, 0) in (0, 1), "a leader", 60)
    leader = pair.leader(topic, 0)
    return topic, leader, 1 - leader


def test_brokers_replicate_and_forward_through_the_authenticated_listener(pair, replicated):
    topic, leader, follower = replicated
    # sent to the follower: it forwards the append to the leader (secret + TLS); acks=all
    # then needs the follower's replica fetch from the leader (secret + TLS) as well
    resp = wait_until(lambda: (r := _produce(pair.http, pair.client_url(follower), topic, 0, ["a", "b", "c"]))
                      .status_code == 200 and r, "a forwarded acks=all produce", 60)
    assert [o["offset"] for o in resp.json()["offsets"]] == [0, 1, 2]
    assert pair.end_offset(follower, topic, 0) == 3


def test_clients_are_given_client_urls_and_peers_inter_broker_urls(pair):
    brokers = pair.http.get(f"{pair.client_url(0)}/v3/clusters/{pair.cluster_id()}/brokers").json()["data"]
    urls = sorted(b["url"] for b in brokers)
    assert urls == sorted(pair.client_url(i) for i in range(2))  # never the BROKER listener


def test_forged_registration_is_refused_and_no_fake_broker_joins(pair):
    fake = {"broker_id": 7, "url": "http://127.0.0.1:9", "incarnation": "evil", "leos": {}, "known_version": 0}
    with httpx.Client(verify=pair.trusting(), timeout=10) as http:
        for i in range(2):
            for headers in ({}, {"x-laketail-inter-broker-secret": "wrong"}):
                resp = http.post(f"{pair.peer_url(i)}/internal/v1/heartbeat", json=fake, headers=headers)
                assert resp.status_code == 401 and resp.json()["error_code"] == 40101
    with httpx.Client(timeout=10, auth=ALICE) as http:
        resp = http.post(f"{pair.client_url(0)}/internal/v1/heartbeat", json=fake)
        assert resp.status_code == 404  # not served to clients at all, whoever they are
    assert pair.broker_ids(0) == [0, 1] and pair.broker_ids(1) == [0, 1]


def test_forged_metadata_push_and_appends_are_refused_and_change_nothing(pair, replicated):
    topic, leader, follower = replicated
    before = wait_until(lambda: (e := pair.end_offset(leader, topic, 0)) > 0 and e, "the first produce", 60)
    forged_image = {"version": 10**9, "controller_id": 1, "controller_epoch": 10**6, "brokers": [], "topics": [],
                    "partitions": []}
    record = base64.b64encode(b"4111111111111111").decode()
    attacks = [
        ("POST", "/internal/v1/metadata", {"json": forged_image}),
        ("POST", f"/internal/v1/partitions/{topic}/0/append", {"content": b"\0" * 3_000_000}),
        ("POST", "/internal/v1/replica-fetch", {"json": {"broker_id": 1, "partitions": []}}),
        ("POST", "/internal/v1/topics", {"json": {"name": "__consumer_offsets", "partitions": 1}}),
        ("DELETE", f"/internal/v1/topics/{topic}", {}),
        ("GET", f"/internal/v1/partitions/{topic}/0/records", {"params": {"offset": 0}}),
    ]
    with httpx.Client(verify=pair.trusting(), timeout=30) as peerless, httpx.Client(timeout=30, auth=ALICE) as client:
        for method, path, kwargs in attacks:
            for i in range(2):
                resp = peerless.request(method, pair.peer_url(i) + path, **kwargs)
                assert resp.status_code == 401, (path, resp.text)
                resp = client.request(method, pair.client_url(i) + path, **kwargs)
                assert resp.status_code == 404, (path, resp.text)
        # a plaintext client reaching the TLS inter-broker port gets no HTTP answer at all,
        # nor does a TLS client without a certificate (ssl.client.auth=required)
        with pytest.raises(httpx.HTTPError):
            httpx.post(pair.peer_url(0).replace("https", "http") + "/internal/v1/metadata", json=forged_image,
                       timeout=10)
        with httpx.Client(verify=ssl.create_default_context(cafile=str(pair.pki.ca_pem)), timeout=10) as certless:
            with pytest.raises(httpx.HTTPError):
                certless.post(pair.peer_url(0) + "/internal/v1/metadata", json=forged_image)
    assert pair.end_offset(leader, topic, 0) == before
    assert pair.end_offset(follower, topic, 0) == before
    assert pair.broker_ids(0) == [0, 1]
    resp = _produce(pair.http, pair.client_url(leader), topic, 0, [record])
    assert resp.status_code == 200 and resp.json()["offsets"][0]["offset"] == before  # the cluster still works


def test_a_proxied_coordinator_request_carries_the_clients_principal(pair):
    controller = pair.http.get(f"{pair.client_url(0)}/v3/clusters").json()["data"][0]["controller"]["related"]
    controller_id = int(controller.rstrip("/").rsplit("/", 1)[1])
    other = 1 - controller_id
    marker = f"proxied-{uuid.uuid4().hex[:8]}"
    resp = pair.http.get(f"{pair.client_url(other)}/v3/clusters/{pair.cluster_id()}/consumer-groups/{marker}")
    assert resp.status_code == 404, resp.text  # answered by the controller: no such group
    lines = wait_until(lambda: pair.brokers[controller_id].access_lines(marker), "the controller's access line", 30)
    assert lines[-1].rsplit("principal=", 1)[1].strip() == "User:alice"


def test_broker_configs_come_through_the_peer_listener_and_never_show_the_secret(pair):
    cid = pair.cluster_id()
    for asked, about in ((0, 0), (0, 1), (1, 0)):  # (1, 0) and (0, 1): the answering broker asks its peer
        resp = pair.http.get(f"{pair.client_url(asked)}/v3/clusters/{cid}/brokers/{about}/configs")
        assert resp.status_code == 200, resp.text
        assert SECRET not in resp.text
        (entry,) = [c for c in resp.json()["data"] if c["name"] == "laketail.inter.broker.secret"]
        assert entry["value"] is None and entry["is_sensitive"] is True
        (listeners,) = [c for c in resp.json()["data"] if c["name"] == "listeners"]
        assert str(pair.brokers[about].listener_ports["BROKER"]) in listeners["value"]


def test_with_acls_on_peers_pass_as_brokers_and_a_client_needs_its_acl(pair, replicated):
    topic, leader, follower = replicated
    with httpx.Client(timeout=30.0, auth=BOB) as bob:
        refused = _produce(bob, pair.client_url(follower), topic, 0, ["from bob"])
        assert refused.status_code == 403, refused.text
        assert refused.json()["message"].startswith("TOPIC_AUTHORIZATION_FAILED")
        acl = {"resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL",
               "principal": "User:bob", "host": "*", "operation": "WRITE", "permission": "ALLOW"}
        made = pair.http.post(f"{pair.client_url(0)}/v3/clusters/{pair.cluster_id()}/acls", json=acl)
        assert made.status_code == 201, made.text
        before = pair.end_offset(leader, topic, 0)

        def bob_writes() -> bool:
            # sent to the follower: forwarded to the leader and replicated (acks=all) by the
            # brokers as themselves, which no ACL names
            return _produce(bob, pair.client_url(follower), topic, 0, ["from bob"]).status_code == 200

        wait_until(bob_writes, "both brokers see bob's ACL", 60)
        assert pair.end_offset(leader, topic, 0) == before + 1
