"""mypy checks every package under the name it is installed as.

pyproject.toml maps packages to directories (``[tool.setuptools] package-dir``); mypy
finds a module by its directories, through ``mypy_path``. A package whose directory is
not ``<base>/<its dotted name>`` for a base on ``mypy_path`` is checked through the
``typecheck/`` view, a symlink at its dotted name (typecheck/README.md). A new mapping
without its link, or a link left pointing elsewhere, fails here rather than as dozens of
unresolved imports (or, worse, a package mypy silently skips)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_mapped_package_is_checked_under_its_installed_name():
    pyproject = _pyproject()
    mapping = pyproject["tool"]["setuptools"]["package-dir"]
    mypy = pyproject["tool"]["mypy"]
    bases, files = mypy["mypy_path"], mypy["files"]
    for package, directory in mapping.items():
        dotted = Path(*package.split("."))
        found = [base for base in bases if (ROOT / base / dotted).resolve() == (ROOT / directory).resolve()]
        assert found, f"{package} ({directory}) is under no mypy_path base as {dotted}: link typecheck/{dotted}"
        checked = [f for f in files if (ROOT / directory).resolve().is_relative_to((ROOT / f).resolve())
                   and (ROOT / f).resolve() != ROOT]
        assert checked, f"{package} ({directory}) is in no [tool.mypy] files entry"


def test_the_view_holds_only_links_to_mapped_packages():
    mapping = _pyproject()["tool"]["setuptools"]["package-dir"]
    mapped = {(ROOT / d).resolve() for d in mapping.values()}
    links = [p for p in (ROOT / "typecheck").rglob("*") if p.is_symlink()]
    assert links, "typecheck/ holds no links"
    for link in links:
        assert link.resolve() in mapped, f"{link.relative_to(ROOT)} -> {link.resolve()} is no mapped package"
