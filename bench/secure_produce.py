"""Benchmark 11: REST produce over TLS with SCRAM credentials (and ACLs) against the
same broker without them, in the same run.

Two brokers from the same code, each on a fresh data root: the plain one (one
PLAINTEXT listener, as ``make run``) and the secure one (one ``SASL_SSL`` listener with
a throw-away CA's certificate made by ``trustme``, SCRAM-SHA-512 users made with
``laketail users add``, Kafka's ACL authorizer on with ``allow.everyone.if.no.acl.found``
false, and an ACL allowing the writer, who is no super user, to write the topic: see
``details.acls``). wrk sends the same v2 binary bodies
(batches of 1, 100, 1000 values of 100 bytes, acks=1) to both over 8 kept-alive
connections, the two alternating ``repeats`` times (medians kept); to the secure one
over TLS with ``Authorization: Basic``. records/s = requests/s x batch; the target is
the issue's: at least 0.8x at batch 100.

What the secure broker pays per request: the TLS record layer (the handshake only once
per kept-alive connection) and a cached SCRAM check (PBKDF2 runs once per user and
password, then a SHA-256 of the presented password and a dict look-up) and an ACL
decision (cached per principal, host, operation and resource until the ACLs change).
"""

from __future__ import annotations

import base64
import subprocess
import sys

import httpx

from bench import bodies, wrk
from bench.context import Context
from bench.figures import AT_LEAST, Figure
from bench.procs import LaketailServer

BENCH = "11 secure produce"
TOPIC = "bench-secure"
USER, PASSWORD = "bench-writer", "bench-password-0123456789"
ADMIN = "bench-admin"  # the super user that creates the topic and the writer's ACL


class SecureLaketailServer(LaketailServer):
    """A laketail broker whose only listener is SASL_SSL (certificate from ``trustme``)."""

    name = "laketail-secure"

    def __init__(self, workdir, port=None) -> None:
        import trustme

        super().__init__(workdir, port)
        self.url = f"https://127.0.0.1:{self.port}"
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        self.ca_path = workdir / "ca.pem"
        self.chain_path = workdir / "chain.pem"
        self.key_path = workdir / "key.pem"
        ca.cert_pem.write_to_path(str(self.ca_path))
        for i, blob in enumerate(cert.cert_chain_pems):
            blob.write_to_path(str(self.chain_path), append=i > 0)
        cert.private_key_pem.write_to_path(str(self.key_path))
        self.auth = httpx.BasicAuth(USER, PASSWORD)
        self.admin_auth = httpx.BasicAuth(ADMIN, PASSWORD)
        self.acls = "not attempted"

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.update({
            "LAKETAIL_LISTENERS": f"SASL_SSL://127.0.0.1:{self.port}",
            "LAKETAIL_SSL_KEYSTORE_CERTIFICATE_CHAIN": str(self.chain_path),
            "LAKETAIL_SSL_KEYSTORE_KEY": str(self.key_path),
            "LAKETAIL_AUTHORIZER_CLASS_NAME": "laketail.security.authorizer.AclAuthorizer",
            "LAKETAIL_SUPER_USERS": f"User:{ADMIN}",
            "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "false",
        })
        return env

    def _client(self, auth: httpx.Auth | None = None) -> httpx.Client:
        import ssl

        return httpx.Client(verify=ssl.create_default_context(cafile=str(self.ca_path)), auth=auth or self.auth,
                            timeout=60)

    def ready(self) -> bool:
        try:
            with self._client() as http:
                return http.get(self.url + self.ready_path, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def start(self, timeout_s: float = 60.0) -> "SecureLaketailServer":
        for user in (USER, ADMIN):
            done = subprocess.run(
                [sys.executable, "-m", "laketail.cli", "users", "add", user, "--mechanism", "SCRAM-SHA-512",
                 "--data", str(self.data), "--password-stdin"],
                input=PASSWORD + "\n", capture_output=True, text=True, env=self.environment(), timeout=120,
            )
            if done.returncode != 0:
                raise RuntimeError(f"laketail users add: {done.stderr}")
        super(LaketailServer, self).start(timeout_s)
        with self._client(self.admin_auth) as http:
            self.cluster_id = http.get(self.url + "/v3/clusters").json()["data"][0]["cluster_id"]
        return self

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        body = {"topic_name": name, "partitions_count": partitions, "replication_factor": 1}
        with self._client(self.admin_auth) as http:
            self._check(http.post(f"{self.url}/v3/clusters/{self.cluster_id}/topics", json=body), "create topic")
            # Confluent v3's ACL API: the writer may write this topic, and nothing else
            acl = {"resource_type": "TOPIC", "resource_name": name, "pattern_type": "LITERAL",
                   "principal": f"User:{USER}", "host": "*", "operation": "WRITE", "permission": "ALLOW"}
            resp = http.post(f"{self.url}/v3/clusters/{self.cluster_id}/acls", json=acl)
            self._check(resp, "create the writer's ACL")
            self.acls = "in force: authorizer on, no allow-everyone, the writer allowed Write on the topic"


def run(ctx: Context) -> list[Figure]:
    p = ctx.params
    plain = ctx.laketail("plain")
    secure = SecureLaketailServer(ctx.workdir / "laketail-secure")
    ctx.status("starting laketail (TLS + SCRAM)")
    secure.start()
    try:
        plain.create_topic(TOPIC, 4)
        secure.create_topic(TOPIC, 4)
        basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        with secure._client() as http:  # the one PBKDF2 check, before anything is measured
            secure._check(http.get(f"{secure.url}/topics/{TOPIC}/partitions"), "list the partitions")
        figures = []
        for batch in p.batches:
            body = bodies.v2_binary(bodies.values(batch, p.value_bytes))
            ctx.status(f"plain and secure laketail, acks=1, batch {batch} (x{p.repeats})")

            def drive(server, headers, body=body):
                return wrk.run(f"{server.url}/topics/{TOPIC}?acks=1", duration_s=p.seconds, warmup_s=p.warmup_s,
                               workdir=ctx.workdir, method="POST", body=body, content_type=bodies.V2_BINARY,
                               headers=headers, connections=p.connections, server_pid=server.pid)

            b, r, spread = wrk.interleaved(lambda: drive(plain, {}), lambda: drive(secure, {"Authorization": basic}),
                                           p.repeats)
            figures.append(Figure(
                BENCH, f"TLS + SCRAM-SHA-512 + ACLs, acks=1, batch {batch}", r.requests_per_s * batch, "records/s",
                f"the same broker without TLS or authentication (batch {batch})", b.requests_per_s * batch,
                AT_LEAST(0.8) if batch == 100 else None,
                details={"secure": r.as_dict(), "plain": b.as_dict(), "runs": spread, "body_bytes": len(body),
                         "acls": secure.acls},
            ))
        return figures
    finally:
        secure.stop()
        ctx.stop(plain)
