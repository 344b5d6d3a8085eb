"""Every laketail package is in the wheel: ``pip install .`` (the Dockerfile's way)
installs only the packages pyproject.toml lists, so a package missing there imports in
the editable checkout and fails in the image (the broker imports laketail.cluster)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = set()
    for package, directory in setuptools["package-dir"].items():
        base = ROOT / directory
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            on_disk.add(".".join([package, *rel.parts]))
    assert "laketail.cluster" in on_disk
    assert sorted(on_disk - listed) == []
