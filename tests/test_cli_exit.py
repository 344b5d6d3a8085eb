"""A ``laketail`` command never crashes on its way out.

``laketail users list`` read the credentials table with an Arrow scan and then exited
134 ("terminate called without an active exception") in about one run of three: Arrow's
worker threads drop the scan's last file references a moment after the read returns,
and a file opened through delta-rs's Python filesystem needs the GIL for that; a thread
asking for the GIL after finalization began is ended by ``pthread_exit``, whose
unwinding through Arrow's ``noexcept`` destructor is ``std::terminate``. The CLI now ends
with ``os._exit`` after flushing (``laketail.cli.exit_now``). The race is a matter of
microseconds, so the commands run in a loop; on the old code 20 runs of ``list`` alone
aborted 3 to 8 times here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

RUNS = 20
COMMAND_TIMEOUT_S = 120.0


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
    env["LAKETAIL_USER_PASSWORD"] = "pencil-pencil"
    return subprocess.run([sys.executable, "-m", "laketail.cli", *args], capture_output=True,
                          env=env, timeout=COMMAND_TIMEOUT_S)


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (
        f"{result.args} exited {result.returncode}\nstderr: {result.stderr.decode(errors='replace')}"
    )
    return result.stdout.decode()


def test_users_commands_exit_zero_every_time(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    _ok(_run("users", "add", "alice", "--data", data))
    for i in range(RUNS):
        user = f"user-{i}"
        _ok(_run("users", "add", user, "--mechanism", "SCRAM-SHA-512", "--data", data))
        listed = _ok(_run("users", "list", "--data", data))
        assert listed.splitlines()[0].startswith("alice\t") and f"{user}\tSCRAM-SHA-512" in listed, listed
        assert "removed" in _ok(_run("users", "remove", user, "--data", data))
    assert [line.split("\t")[0] for line in _ok(_run("users", "list", "--data", data)).splitlines()] == ["alice"]


def test_exit_keeps_sys_exit_meaning(tmp_path: Path) -> None:
    """Errors still exit 1 with their message, usage errors 2, and output is flushed."""
    result = _run("users", "remove", "nobody", "--data", str(tmp_path / "data"))
    assert result.returncode == 1 and result.stderr.decode().startswith("error: user nobody"), result
    assert _run("users", "frobnicate").returncode == 2
    assert "laketail" in _ok(_run("--version"))
