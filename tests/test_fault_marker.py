"""The ``fault`` marker is on every test that kills or freezes a process, and
tests/README.md lists exactly those tests.

Read statically (``ast``), so the check costs milliseconds and sees every file without
importing or collecting it. A test *kills* when its body -- or a function of its module
that it calls, transitively -- calls ``kill9()`` (the fixtures' crash) or ``pause()`` on
a cluster broker (SIGSTOP), or names ``SIGKILL``, ``SIGSTOP`` or ``SIGTERM``. A test
that only ends a helper subprocess in a ``finally`` (``proc.kill()``) proves nothing
about a crash and is not a kill test. A test *is marked* when ``pytest.mark.fault`` is
in its module's ``pytestmark``, on its class or among its decorators.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
README = TESTS / "README.md"
KILL_CALLS = {"kill9", "_kill9", "killpg"}
KILL_SIGNALS = {"SIGKILL", "SIGSTOP", "SIGTERM"}
#: Marked tests whose kills happen in another module the scan does not follow.
KILLS_ELSEWHERE = {
    "tests/jepsen/test_jepsen.py::test_a_short_run_under_the_nemesis_keeps_every_guarantee",  # jepsen.runner's nemesis
}
LIST_START = "<!-- fault tests: start -->"
LIST_END = "<!-- fault tests: end -->"


def _has_fault(node: ast.AST | None) -> bool:
    if node is None:
        return False
    return any(isinstance(n, ast.Attribute) and n.attr == "fault" for n in ast.walk(node))


def _called(node: ast.AST) -> set[str]:
    """Names the code calls, plus ``kill9`` where it hands ``x.kill9`` on uncalled."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in KILL_CALLS:
            out.add(n.attr)
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute):
                out.add(f.attr)
                # cluster[i].pause(): SIGSTOP (a consumer's pause([partitions]) is not)
                if f.attr == "pause" and isinstance(f.value, ast.Subscript):
                    out.add("kill9")
            elif isinstance(f, ast.Name):
                out.add(f.id)
    return out


def _names_signal(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in KILL_SIGNALS) or (isinstance(n, ast.Name) and n.id in KILL_SIGNALS)
        for n in ast.walk(node)
    )


def _tests(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """(id, function, marked) of each test of a module."""
    module_marked = any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
        and _has_fault(n.value)
        for n in tree.body
    )
    # a decorator may be an alias: ``fault = pytest.mark.fault`` then ``@fault``
    aliases = {
        t.id for n in tree.body if isinstance(n, ast.Assign) and _has_fault(n.value)
        for t in n.targets if isinstance(t, ast.Name) and t.id != "pytestmark"
    }

    def marked(decorators: list[ast.expr]) -> bool:
        return any(_has_fault(d) or (isinstance(d, ast.Name) and d.id in aliases) for d in decorators)

    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            out.append((node.name, node, module_marked or marked(node.decorator_list)))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    is_marked = module_marked or marked(node.decorator_list) or marked(item.decorator_list)
                    out.append((f"{node.name}::{item.name}", item, is_marked))
    return out


def _killers(tree: ast.Module) -> set[str]:
    """Names of the module's top-level functions that kill, directly or through each other."""
    funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    killers: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, fn in funcs.items():
            if name not in killers and (_names_signal(fn) or _called(fn) & (KILL_CALLS | killers)):
                killers.add(name)
                grew = True
    return killers


@functools.cache
def scan() -> tuple[frozenset[str], frozenset[str]]:
    """(tests that kill, tests marked ``fault``) as ``path::name`` ids."""
    killing, marked = set(), set()
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        killers = _killers(tree)
        rel = path.relative_to(TESTS.parent).as_posix()
        for name, fn, is_marked in _tests(tree):
            test_id = f"{rel}::{name}"
            if is_marked:
                marked.add(test_id)
            if _names_signal(fn) or _called(fn) & (KILL_CALLS | killers):
                killing.add(test_id)
    return frozenset(killing), frozenset(marked)


def listed() -> set[str]:
    text = README.read_text()
    assert LIST_START in text and LIST_END in text, f"{README} has no list between {LIST_START} and {LIST_END}"
    block = text.split(LIST_START, 1)[1].split(LIST_END, 1)[0]
    return set(re.findall(r"^- `([^`]+)`", block, re.M))


def test_every_test_that_kills_a_process_is_marked_fault():
    killing, marked = scan()
    assert killing, "the scan found no kill test at all: it is broken"
    assert not killing - marked, f"kill tests without the fault marker: {sorted(killing - marked)}"


def test_only_tests_that_kill_carry_the_fault_marker():
    """So that ``-m fault`` and the README's list name the kill tests, nothing else."""
    killing, marked = scan()
    idle = marked - killing - KILLS_ELSEWHERE
    assert not idle, f"marked fault but kill nothing: {sorted(idle)}"


def test_the_readme_lists_exactly_the_fault_tests():
    _, marked = scan()
    have = listed()
    expected = "\n".join(f"- `{t}`" for t in sorted(marked))
    assert have == marked, (
        f"tests/README.md's list is out of date (missing {sorted(marked - have)}, stale {sorted(have - marked)}); "
        f"the list between the markers should read:\n{expected}"
    )


def test_the_scan_tells_a_crash_from_a_cleanup_and_a_consumer_pause():
    crash = ast.parse("def helper(b):\n    b.kill9()\n\ndef test_a(b):\n    helper(b)\n")
    cleanup = ast.parse("def test_b(p):\n    try:\n        pass\n    finally:\n        p.kill()\n")
    consumer = ast.parse("def test_c(consumer):\n    consumer.pause([1])\n")
    frozen = ast.parse("def test_d(cluster):\n    cluster[1].pause()\n")
    handed_on = ast.parse("def test_e(proc):\n    for crash in (proc.kill9, proc.stop):\n        crash()\n")
    assert _killers(crash) == {"helper", "test_a"}
    assert not _killers(cleanup) and not _killers(consumer)
    assert _killers(frozen) == {"test_d"}
    assert _killers(handed_on) == {"test_e"}
