"""Brokers with listeners, TLS and credentials, for the security tests.

:class:`Pki` makes a throw-away CA with ``trustme`` and writes PEM files: the brokers'
certificate (for 127.0.0.1 and localhost) and a client certificate for ``CN=alice``.
:class:`SecureBroker` is a :class:`conftest.BrokerProcess` whose listeners come from
``LAKETAIL_*`` settings; it is ready once its first listener answers ``GET
/v3/clusters`` to a client with the right credentials. ``--access-log`` is on, so tests
read which principal a request had from the broker's stderr.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import trustme
from conftest import BrokerProcess, BrokerStartError, free_port

PASSWORD = "alice-s3cret"
SECRET = "cluster-secret-for-tests"


class Pki:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.ca_pem = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_chain = directory / "server-chain.pem"
        self.server_key = directory / "server-key.pem"
        for i, blob in enumerate(server.cert_chain_pems):
            blob.write_to_path(str(self.server_chain), append=i > 0)
        server.private_key_pem.write_to_path(str(self.server_key))
        alice = self.ca.issue_cert("alice@example.com", common_name="alice", organization_name="Acme",
                                   organization_unit_name="Eng")
        self.alice_cert = directory / "alice-cert.pem"
        self.alice_key = directory / "alice-key.pem"
        alice.cert_chain_pems[0].write_to_path(str(self.alice_cert))
        alice.private_key_pem.write_to_path(str(self.alice_key))

    def broker_env(self) -> dict[str, str]:
        return {
            "LAKETAIL_SSL_KEYSTORE_CERTIFICATE_CHAIN": str(self.server_chain),
            "LAKETAIL_SSL_KEYSTORE_KEY": str(self.server_key),
            "LAKETAIL_SSL_TRUSTSTORE_LOCATION": str(self.ca_pem),
        }


def add_user(data: Path, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> str:
    """``laketail users add`` as an operator runs it; returns its stderr (the audit line)."""
    done = subprocess.run(
        [sys.executable, "-m", "laketail.cli", "users", "add", user, "--mechanism", mechanism, "--data", str(data)],
        env={**os.environ, "LAKETAIL_USER_PASSWORD": password}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


class SecureBroker(BrokerProcess):
    """A broker whose listeners are ``listeners`` (``{name: (protocol, port)}``)."""

    def __init__(self, data_dir: Path, listeners: dict[str, tuple[str, int]], env: dict[str, str], *,
                 broker_id: int = 0, inter_broker: str = "BROKER", ready_auth: Any = None,
                 ca: Path | None = None, run_dir: Path | None = None, log_dir: Path | None = None) -> None:
        self.protocols = {name: protocol for name, (protocol, _) in listeners.items()}
        self.inter_broker = inter_broker
        self.base_env = dict(env)
        super().__init__(data_dir, broker_id=broker_id)
        self._listen_on({name: port for name, (_, port) in listeners.items()})
        if run_dir is not None:
            self.run_dir = run_dir
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.ready_auth = ready_auth
        self.ca = ca

    def _listen_on(self, listener_ports: dict[str, int]) -> None:
        self.listener_ports = listener_ports
        self.extra_env = {
            "LAKETAIL_LISTENERS": ",".join(f"{n}://127.0.0.1:{p}" for n, p in listener_ports.items()),
            "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": ",".join(f"{n}:{pr}" for n, pr in self.protocols.items()),
            "LAKETAIL_INTER_BROKER_LISTENER_NAME": self.inter_broker,
            **self.base_env,
        }
        first = next(iter(listener_ports))
        self.port = listener_ports[first]
        scheme = "https" if self.protocols[first] in ("SSL", "SASL_SSL") else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> "SecureBroker":
        """Start and wait until ready; ports someone grabbed meanwhile are swapped (first start only)."""
        for attempt in range(3):
            try:
                self._start_once()
                return self
            except BrokerStartError:
                if self.starts > 1 + attempt or "address already in use" not in self.output().lower() or attempt == 2:
                    raise
                self._listen_on(dict(zip(self.listener_ports, ports(len(self.listener_ports)))))
        raise AssertionError("unreachable")

    def listener_url(self, name: str, scheme: str) -> str:
        return f"{scheme}://127.0.0.1:{self.listener_ports[name]}"

    @property
    def argv(self) -> list[str]:
        out = super().argv + ["--access-log"]
        if self.log_dir is not None:
            out += ["--log-dir", str(self.log_dir)]
        return out

    def client(self, cert: tuple[str, str] | None = None, **kwargs: Any) -> httpx.Client:
        """An httpx client trusting the test CA (and showing ``cert``, a (chain, key) pair)."""
        options: dict[str, Any] = {"timeout": 30.0}
        if self.ca is not None:
            context = ssl.create_default_context(cafile=str(self.ca))
            if cert is not None:
                context.load_cert_chain(*cert)
            options["verify"] = context
        return httpx.Client(**{**options, **kwargs})

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        with self.client(auth=self.ready_auth, timeout=5.0) as http:
            while True:
                if self.proc.poll() is not None:
                    raise BrokerStartError(f"broker exited with {self.proc.returncode}\n{self.output()}")
                try:
                    resp = http.get(f"{self.url}/v3/clusters")
                    if resp.status_code == 200:
                        return
                    last = f"HTTP {resp.status_code} {resp.text[:300]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                if time.monotonic() > deadline:
                    self.kill9()
                    raise BrokerStartError(f"broker not ready within {timeout_s}s (last: {last})\n{self.output()}")
                time.sleep(0.05)

    def access_lines(self, needle: str) -> list[str]:
        """The access log lines (stderr) that contain ``needle``."""
        text = self.stderr_path.read_text(errors="replace")
        return [line for line in text.splitlines() if "laketail.access" in line and needle in line]


def ports(n: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        p = free_port()
        if p not in out:
            out.append(p)
    return out
