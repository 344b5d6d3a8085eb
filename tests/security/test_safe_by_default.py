"""``laketail serve`` is safe by default: beyond loopback only with authentication, or
when told ``--allow-anonymous``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import BrokerProcess, free_port

pytestmark = pytest.mark.integration


def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
    clean["LAKETAIL_REQUEST_PROCESSES"] = "1"  # not one per usable core
    return subprocess.run([sys.executable, "-m", "laketail.cli", "serve", "--data", str(tmp_path / "data"),
                           "--port", str(free_port()), "--no-maintenance", *args],
                          cwd=tmp_path, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, env", [
    (["--host", "0.0.0.0"], {}),
    ([], {"LAKETAIL_HOST": "192.0.2.10"}),
    ([], {"LAKETAIL_LISTENERS": "CLIENT://0.0.0.0:18099,BROKER://127.0.0.1:18098",
          "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "CLIENT:PLAINTEXT,BROKER:PLAINTEXT",
          "LAKETAIL_INTER_BROKER_LISTENER_NAME": "BROKER", "LAKETAIL_INTER_BROKER_SECRET": "s"}),
])
def test_serve_refuses_a_non_loopback_listener_without_authentication(tmp_path, args, env):
    done = _serve(tmp_path, *args, env=env)
    assert done.returncode == 1, done.stderr
    assert "refusing to listen beyond loopback without authentication" in done.stderr
    assert "--allow-anonymous" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was written


def test_serve_refuses_incomplete_listener_settings(tmp_path):
    done = _serve(tmp_path, env={"LAKETAIL_LISTENERS": "CLIENT://127.0.0.1:18097,BROKER://127.0.0.1:18096",
                                 "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "CLIENT:PLAINTEXT,BROKER:PLAINTEXT",
                                 "LAKETAIL_INTER_BROKER_LISTENER_NAME": "BROKER"})
    assert done.returncode == 1 and "laketail.inter.broker.secret" in done.stderr
    assert not (tmp_path / "data").exists()


class _AnyInterface(BrokerProcess):
    @property
    def argv(self) -> list[str]:
        argv = super().argv
        argv[argv.index("--host") + 1] = "0.0.0.0"
        return argv + ["--allow-anonymous"]


def test_allow_anonymous_serves_every_interface(tmp_path):
    broker = _AnyInterface(tmp_path / "data")
    try:
        broker.start()
        resp = httpx.get(f"{broker.url}/v3/clusters", timeout=30)
        assert resp.status_code == 200
    finally:
        broker.stop()
