"""A real S3 server on 127.0.0.1 for brokers whose data root is ``s3://bucket/prefix``.

``s3_server`` (session) runs moto's S3 server (``python -m moto.server``, the ``moto[server]``
package of the dev extra) on a free port and gives the environment every AWS tool takes:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``,
plus ``AWS_ALLOW_HTTP=true`` (delta-rs's object store refuses plain ``http://`` endpoints
without it). ``bucket`` makes a fresh bucket per test. ``s3_broker`` starts a broker on
``s3://<bucket>/<prefix>``, its working directory a local folder of its own (where its hot
logs go by default), so a test can check that nothing named ``s3:`` appears there.

moto honours ``If-None-Match: *`` and ``If-Match`` on PutObject one request at a time
(it checks, then writes, without a lock): it is the functional server, not a judge of
races between writers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.conftest import BrokerProcess, free_port
from tests.integration.support import TIER_DEADLINE_S, wait_until
from tests.object_store.fault_proxy import FaultProxy

#: How long moto may take to answer its first request (imports of boto and flask).
S3_READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.env["AWS_REGION"],
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )


@dataclass(frozen=True)
class Bucket:
    name: str
    server: S3Server

    def uri(self, prefix: str = "") -> str:
        return f"s3://{self.name}/{prefix}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        client = self.server.client()
        out: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix):
            out += [item["Key"] for item in page.get("Contents", [])]
        return out


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("s3-server") / "moto.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + S3_READY_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"moto exited with {proc.returncode}: {log_path.read_text()[-3000:]}"
            try:
                if httpx.get(f"{endpoint}/", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"moto did not answer within {S3_READY_TIMEOUT_S:.0f}s"
            time.sleep(0.1)
        yield S3Server(endpoint, {
            "AWS_ACCESS_KEY_ID": "laketail-test",
            "AWS_SECRET_ACCESS_KEY": "laketail-test-secret",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
        })
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A fresh bucket; this test's process sees the server's AWS environment too (for
    delta-rs and boto3 reads of the bucket)."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    name = f"lake-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    return Bucket(name, s3_server)


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` in front of the session's S3 server (give brokers its
    ``endpoint`` as ``AWS_ENDPOINT_URL``; the test reads the bucket directly)."""
    proxy = FaultProxy(s3_server.endpoint).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def table_rows(uri: str) -> dict[tuple[int, int], bytes]:
    """A topic table's rows as ``{(partition, offset): value}``; a row twice fails the test."""
    from deltalake import DeltaTable

    out: dict[tuple[int, int], bytes] = {}
    for row in DeltaTable(uri).to_pyarrow_table(columns=["partition", "offset", "value"]).to_pylist():
        key = (row["partition"], row["offset"])
        assert key not in out, f"row {key} twice in {uri}"
        out[key] = row["value"]
    return out


def wait_table(uri: str, expected: dict[tuple[int, int], bytes]) -> None:
    """Wait for the table to hold as many rows as ``expected``; they must be those."""
    rows = wait_until(lambda: (lambda r: r if len(r) >= len(expected) else None)(table_rows(uri)),
                      f"{len(expected)} records in {uri}", TIER_DEADLINE_S, 0.3)
    assert rows == expected


class S3BrokerProcess(BrokerProcess):
    """A :class:`BrokerProcess` whose data root is a bucket URI; ``data_dir`` is only the
    local folder beside its run directory (its working directory)."""

    def __init__(self, local_dir: Path, data_uri: str, server: S3Server, **kwargs: Any) -> None:
        super().__init__(local_dir, **kwargs)
        self.data_uri = data_uri
        self.extra_env = {**server.env, **self.extra_env}

    @property
    def argv(self) -> list[str]:
        argv = super().argv
        argv[argv.index("--data") + 1] = self.data_uri
        return argv

    def table_path(self, topic: str) -> Path:
        raise AssertionError(f"{self.data_uri} is not a local folder: use table_uri")

    def table_uri(self, topic: str) -> str:
        return f"{self.data_uri}/topics/{topic}"


@pytest.fixture
def s3_broker_factory(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[Any]:
    """``s3_broker_factory(data_uri, env=None, broker_id=0)``: a started broker on the bucket."""
    started: list[S3BrokerProcess] = []

    def make(data_uri: str, env: dict[str, str] | None = None, broker_id: int = 0) -> S3BrokerProcess:
        proc = S3BrokerProcess(tmp_path_factory.mktemp("s3-broker") / "local", data_uri, s3_server,
                               broker_id=broker_id, env=env)
        started.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in started:
            proc.stop()


def local_s3_folders(*roots: Path) -> list[str]:
    """Folders named ``s3:`` (a bucket URI taken for a local path) anywhere under ``roots``."""
    return [os.path.join(p, d) for root in roots for p, dirs, _ in os.walk(root) for d in dirs if d == "s3:"]
