"""The documents are in the repository, and what they and the code cite of them exists.

Code, tests and the guides cite ``docs/architecture.md`` by section (``docs/architecture.md
§8.3``, ``... §9.5 and §10.2``). These tests fail when a cited section is not a heading of
the document, and when anything still cites the design document that lived outside the
repository (the bare upper-case file name), which a reader of the repository cannot open.

The users' documents (README.md, CONTRIBUTING.md and every ``docs/*.md``) link to each
other: every relative link must name a file that exists and, with ``#anchor``, a heading
of it. The README stays a short front page that links every guide, and
``docs/configuration.md`` is exactly what :mod:`laketail.config_reference` generates from
the settings table, so the reference cannot drift from the code. Every class of five or
more methods in the packages has a docstring.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"
#: The documents whose links are checked: the front page, the contributors' page, the guides.
DOCUMENTS = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

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


def test_the_documents_own_section_references_exist() -> None:
    """Inside docs/architecture.md a bare ``§N`` means its own section N."""
    text = DOC.read_text(encoding="utf-8")
    missing = sorted(set(SECTION.findall(text)) - sections(text))
    assert not missing, f"docs/architecture.md refers to sections it does not have: {missing}"


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


# -- links between the documents ------------------------------------------------------------

#: ``[text](target)`` outside code; images too (``![alt](path)``).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
MD_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.MULTILINE)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of every heading of a Markdown text (code blocks left out); a repeated
    heading gets ``-1``, ``-2``, ... as on GitHub."""
    out: set[str] = set()
    for heading in MD_HEADING.findall(FENCE.sub("", text)):
        base = anchor(heading)
        name, n = base, 0
        while name in out:
            n += 1
            name = f"{base}-{n}"
        out.add(name)
    return out


def relative_links(text: str) -> list[str]:
    """Every link target of a Markdown text that is not a URL (code blocks left out)."""
    return [t for t in LINK.findall(FENCE.sub("", text)) if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_names_a_file_and_heading_that_exist() -> None:
    broken = []
    for doc in DOCUMENTS:
        for target in relative_links(doc.read_text(encoding="utf-8")):
            path, _, fragment = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            where = f"{doc.relative_to(ROOT)}: ({target})"
            if not file.exists():
                broken.append(f"{where}: no such file")
            elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{where}: no heading #{fragment} in {file.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_short_front_page_that_links_every_guide() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "the README is the front page: move details into a guide"
    first_block = FENCE.search(text)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(0).splitlines()[1:-1]]
    assert commands[:2] == ["make run", "make test"], commands
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    assert {"run", "test"} <= targets
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(text)}
    orphans = [d.relative_to(ROOT) for d in DOCUMENTS if d != README and d.resolve() not in linked]
    assert not orphans, f"guides the README does not link: {orphans}"


def test_the_configuration_reference_is_generated_from_the_settings_table() -> None:
    from laketail.config import _BROKER_KEYS, TOPIC_CONFIGS
    from laketail.config_reference import missing_docs, render

    undocumented, unknown = missing_docs()
    assert not undocumented, f"describe these broker keys in laketail/config_reference.py: {undocumented}"
    assert not unknown, f"descriptions of keys laketail/config.py no longer has: {unknown}"
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/configuration.md is stale: run python -m laketail.config_reference"
    for key in [*TOPIC_CONFIGS, *_BROKER_KEYS]:
        assert f"| `{key}` |" in committed, key


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Error codes (Confluent REST Proxy conformance)", "error-codes-confluent-rest-proxy-conformance"),
        ("Request processes: a broker on every core", "request-processes-a-broker-on-every-core"),
        ("The `laketail` data source", "the-laketail-data-source"),
        ("Internal topics, and a broker that always starts", "internal-topics-and-a-broker-that-always-starts"),
    ],
)
def test_anchors_are_githubs(heading: str, expected: str) -> None:
    assert anchor(heading) == expected


def test_links_in_code_are_not_links() -> None:
    text = "[a](x.md) and `code`\n```\n[b](y.md)\n```\n![c](img/c.png) [d](https://e.org/f)\n"
    assert relative_links(text) == ["x.md", "img/c.png"]


# -- class docstrings ---------------------------------------------------------------------------

#: A class with this many methods is a part a reader needs introduced (STYLE: each class
#: docstring opens with its role, then its invariants and thread-safety).
MANY_METHODS = 5


def undocumented_classes(source: str) -> list[str]:
    """Classes of ``source`` with :data:`MANY_METHODS` or more methods and no docstring."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None:
            methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if len(methods) >= MANY_METHODS:
                found.append(f"{node.lineno}: {node.name}")
    return found


def test_every_class_of_many_methods_has_a_docstring() -> None:
    offenders = {
        str(path.relative_to(ROOT)): hits
        for folder in (ROOT / "platform" / "laketail", ROOT / "api", ROOT / "jobs")
        for path in sorted(folder.rglob("*.py"))
        if (hits := undocumented_classes(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "give these classes a docstring (role, invariants, thread-safety)"


def test_undocumented_classes_are_found() -> None:
    methods = "".join(f"    def m{i}(self): ...\n" for i in range(MANY_METHODS))
    assert undocumented_classes("class A:\n" + methods) == ["1: A"]
    assert undocumented_classes('class A:\n    """Role."""\n' + methods) == []
    assert undocumented_classes("class A:\n" + methods.split("\n", 1)[1]) == []
