"""The design document is in the repository, and what the code cites of it exists.

Code, tests and the README cite ``docs/architecture.md`` by section (``docs/architecture.md
§8.3``, ``... §9.5 and §10.2``). These tests fail when a cited section is not a heading of
the document, and when anything still cites the design document that lived outside the
repository (the bare upper-case file name), which a reader of the repository cannot open.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

#: Text files that may cite the document (the document itself cites its own sections too).
SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".properties", ".conf"}
NAMES = {"Makefile", "Dockerfile"}
#: Folders that hold no source: tools' caches, build output, benchmark results, data.
SKIPPED = {"build", "dist", "laketail-data", "spark-warehouse", "node_modules"}

#: ``docs/architecture.md`` followed by one or more section numbers: ``§4.2``,
#: ``§9.5 and §10.2``, ``§4.5, §8`` (a citation may wrap onto the next line).
CITATION = re.compile(r"docs/architecture\.md((?:[\s,]*(?:and\s+|or\s+)?§\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\.?\s+\S", re.MULTILINE)
#: The old, unreachable design document, spelled so that this file does not match itself.
OLD_NAME = "ARCHITECTURE" + ".md"


def _sources() -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = [
            d for d in dirs
            if not (d.startswith(".") or d in SKIPPED or d.endswith(".egg-info") or d == "__pycache__")
            and here / d != ROOT / "bench" / "results"
        ]
        out += [here / f for f in files if Path(f).suffix in SUFFIXES or f in NAMES]
    return out


def sections(text: str) -> set[str]:
    """The section numbers the document's headings define (``## 8.`` -> ``8``, ``### 8.3`` -> ``8.3``)."""
    return set(HEADING.findall(text))


def citations(text: str) -> list[str]:
    """Every section number ``text`` cites in the document."""
    return [number for match in CITATION.finditer(text) for number in SECTION.findall(match.group(1))]


def test_the_document_is_in_the_repository_with_numbered_sections() -> None:
    text = DOC.read_text(encoding="utf-8")
    found = sections(text)
    # the parts the code relies on: layers and ports, storage, produce, fetch, tiering,
    # replication, coordinators, Spark, gateway, configuration, how-to
    assert {"3", "3.2", "4", "4.2", "5", "6", "7", "7.1", "7.2", "8", "9", "10", "11", "13"} <= found, sorted(found)


def test_every_citation_names_a_section_that_exists() -> None:
    known = sections(DOC.read_text(encoding="utf-8"))
    cited: dict[str, list[str]] = {}
    for path in _sources():
        for number in citations(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(number, []).append(str(path.relative_to(ROOT)))
    assert len(cited) >= 8, f"the code should cite the document; found only {sorted(cited)}"
    missing = {number: files for number, files in cited.items() if number not in known}
    assert not missing, f"citations of sections docs/architecture.md does not have: {missing}"


def test_nothing_cites_the_design_document_outside_the_repository() -> None:
    stale = []
    for path in _sources():
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OLD_NAME in line:
                stale.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not stale, "cite docs/architecture.md §N instead:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("schema (docs/architecture.md §4.2): one row", ["4.2"]),
        ("Protocol (docs/architecture.md §9.5 and §10.2), per batch", ["9.5", "10.2"]),
        ("the record schema (docs/architecture.md\n§4.2) in Spark's types", ["4.2"]),
        ("see docs/architecture.md §8; §12 of something else", ["8"]),
        ("Offsets follow docs/architecture.md §2.2.", ["2.2"]),
        ("docs/architecture.md has no section here", []),
    ],
)
def test_citations_are_read_as_written(text: str, expected: list[str]) -> None:
    assert citations(text) == expected


def test_headings_define_sections() -> None:
    doc = "# Title\n## 1. First\ntext §9\n### 1.2 Second\n#### 1.2.3 Third\n## Not numbered\n"
    assert sections(doc) == {"1", "1.2", "1.2.3"}
