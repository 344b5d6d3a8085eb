"""Request processes behind TLS and SASL: ``laketail.request.processes=2`` with explicit
listeners (a SASL_SSL client listener and an SSL inter-broker one).

Every configured listener is bound by both processes (``SO_REUSEPORT``); the processes
reach each other on loopback listeners of their own with the cluster secret. Each
request here goes on a fresh TLS connection, so the kernel picks the process. To
clients the two are broker 0; which process leads what is read from the cluster's
``_system`` tables.
"""

from __future__ import annotations

import base64

import httpx
import pytest

from laketail.cluster.store import ClusterStore
from laketail.request_processes import PROCESS_ID_STRIDE
from tests.integration.support import child_processes, wait_until
from tests.security.support import PASSWORD, SECRET, Pki, SecureBroker, add_user, ports

BINARY = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
ALICE = httpx.BasicAuth("alice", PASSWORD)


@pytest.mark.integration
def test_two_request_processes_serve_sasl_ssl_and_keep_refusing_strangers(tmp_path):
    pki = Pki(tmp_path / "pki")
    data = tmp_path / "data"
    add_user(data, "alice", PASSWORD)
    client_port, broker_port = ports(2)
    broker = SecureBroker(
        data, {"CLIENT": ("SASL_SSL", client_port), "BROKER": ("SSL", broker_port)},
        {**pki.broker_env(), "LAKETAIL_INTER_BROKER_SECRET": SECRET, "LAKETAIL_REQUEST_PROCESSES": "2"},
        ready_auth=ALICE, ca=pki.ca_pem,
    ).start()
    try:
        def get(path: str, auth=ALICE, **kwargs) -> httpx.Response:
            with broker.client(auth=auth) as http:  # a connection of its own: either process
                return http.get(f"{broker.url}{path}", **kwargs)

        store = ClusterStore(str(data))
        wait_until(lambda: {b for b, r in store.brokers().items() if r.alive} == {0, PROCESS_ID_STRIDE}
                   and all(get("/brokers").json().get("brokers") == [0] for _ in range(6)),
                   "both request processes to be live members, listed as broker 0 once on the TLS listener")
        assert len(child_processes(broker.proc.pid, b"--request-process")) == 1
        for _ in range(6):  # whichever process a stranger reaches, it is refused and nothing is read
            assert get("/topics", auth=None).status_code == 401
            assert get("/topics", auth=httpx.BasicAuth("alice", "wrong")).status_code == 401

        with broker.client(auth=ALICE) as http:
            resp = http.post(f"{broker.url}/v3/clusters/{get('/v3/clusters').json()['data'][0]['cluster_id']}"
                             "/topics", json={"topic_name": "tls-split", "partitions_count": 2})
            assert resp.status_code in (200, 201), resp.text
        wait_until(lambda: [p["leader"] for p in get("/topics/tls-split/partitions", headers={"Accept": V2}).json()]
                   == [0, 0], "leaders for tls-split, shown as broker 0")
        leaders = {p: reg.leader for (t, p), reg in store.partitions().items() if t == "tls-split"}
        assert sorted(leaders.values()) == [0, PROCESS_ID_STRIDE], leaders  # one partition on each process
        for p in (0, 1):
            for i in range(3):
                with broker.client(auth=ALICE) as http:
                    value = base64.b64encode(f"p{p}-{i}".encode()).decode()
                    resp = http.post(f"{broker.url}/topics/tls-split/partitions/{p}", headers={"Content-Type": BINARY},
                                     json={"records": [{"value": value}]})
                assert resp.status_code == 200 and resp.json()["offsets"][0].get("error_code") is None, resp.text
        for p in (0, 1):
            for _ in range(4):  # read where it is led and where it is not
                resp = get(f"/topics/tls-split/partitions/{p}/records", params={"offset": 0},
                           headers={"Accept": BINARY})
                assert resp.status_code == 200, resp.text
                assert [base64.b64decode(r["value"]) for r in resp.json()] == [f"p{p}-{i}".encode() for i in range(3)]
    finally:
        broker.stop()
