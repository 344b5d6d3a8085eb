"""The layering rules, checked on the source (ast: nothing is imported).

* coordinator/, storage/ and cluster/ depend on ports of their own (their ``ports.py``)
  and never on :mod:`laketail.broker`, not even for typing: the Broker is the
  composition root that builds them and passes itself for each port.
* The engine (``laketail``) imports the gateway and the jobs (``laketail.api``,
  ``laketail.jobs``) only in the modules of :data:`EDGES` (docs/architecture.md §1.1).
* No module uses another module's private members: ``x._name`` where ``x`` is not
  ``self``/``cls`` is allowed only when ``_name`` is defined in the same module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "platform" / "laketail"
PORT_USERS = ("coordinator", "storage", "cluster", "schemas")
FORBIDDEN = "laketail.broker"
#: Underscored names that are other projects' public spelling: PySpark's handles on its JVM
#: (the JavaSparkContext, the py4j gateway view and the Java SparkSession, which PySpark's
#: own docs and every JVM-side extension use), and ``os._exit``, the standard library's public
#: way to end a process without interpreter shutdown (laketail.cli ends commands with it).
#: (Upper-case ones, librdkafka's ``KafkaError._TIMED_OUT`` family that the client
#: mirrors, are constants, not private members: allowed too.)
PUBLIC_UNDERSCORED = {"_jsc", "_jvm", "_jsparkSession", "_exit"}
#: The outer packages, which import the engine and must not be imported by it...
OUTER = ("laketail.api", "laketail.jobs")
#: ...except at these edges: the commands that serve the app and run the jobs, the locator
#: of the job scripts, and ``errors.code_table`` (which loads the gateway's error classes to
#: list them; an import cycle issue 38 names).
EDGES = {"cli/serve.py", "cli/jobs.py", "maintenance/spark_submit.py", "errors.py"}


def _modules(*dirs: Path) -> list[Path]:
    return sorted(p for d in dirs for p in d.rglob("*.py"))


def broker_imports(source: str) -> list[str]:
    """Every import of ``laketail.broker`` in ``source`` (any form, any depth: under
    ``if TYPE_CHECKING`` and inside functions too), as ``line: statement``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        if any(n == FORBIDDEN or n.startswith(FORBIDDEN + ".") for n in names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def outer_imports(source: str) -> list[str]:
    """Every import of ``laketail.api`` or ``laketail.jobs`` in ``source`` (any form, any
    depth), as ``line: statement``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        if any(n == o or n.startswith(o + ".") for n in names for o in OUTER):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def foreign_private_uses(source: str) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls`` and no ``_name`` is defined in
    the module (as a function, class, assigned name or ``self._name`` attribute);
    upper-case constants and :data:`PUBLIC_UNDERSCORED` excepted."""
    tree = ast.parse(source)
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in defined:
            continue
        if name in PUBLIC_UNDERSCORED or name[1:].isupper():
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("package", PORT_USERS)
def test_ports_users_never_import_the_broker(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): hits
        for path in _modules(PACKAGE / package)
        if (hits := broker_imports(path.read_text()))
    }
    assert offenders == {}


def test_the_engine_imports_the_api_and_jobs_only_at_its_edges() -> None:
    offenders = {
        rel: hits
        for path in _modules(PACKAGE)
        if (rel := str(path.relative_to(PACKAGE))) not in EDGES and (hits := outer_imports(path.read_text()))
    }
    assert offenders == {}
    assert outer_imports("from laketail import api\nimport laketail.jobs.lag\nimport laketail.apis") == [
        "1: from laketail import api", "2: import laketail.jobs.lag"]


def test_no_module_uses_another_modules_private_members() -> None:
    offenders = {
        str(path.relative_to(ROOT)): hits
        for path in _modules(PACKAGE, ROOT / "api")
        if (hits := foreign_private_uses(path.read_text()))
    }
    assert offenders == {}


def test_the_checks_catch_what_they_forbid() -> None:
    """The walkers themselves: each form of the forbidden import, and a private member
    of another module, are found; a module's own private members are not."""
    forms = [
        "from laketail.broker import Broker",
        "import laketail.broker",
        "from laketail import broker",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from laketail.broker import Broker",
        "def f():\n    from laketail.broker import PartitionState",
    ]
    for source in forms:
        assert broker_imports(source), source
    assert broker_imports("from laketail.brokers import x\nimport laketail.catalog") == []
    assert foreign_private_uses("def f(broker):\n    return broker._topics") == ["2: broker._topics"]
    own = "class A:\n    def __init__(self):\n        self._x = 1\n\ndef f(a):\n    return a._x"
    assert foreign_private_uses(own) == []


#: The Broker's parts that the gateway reaches only as the services of
#: ``laketail.api.services`` (docs/architecture.md §3.3).
BROKER_PARTS = frozenset({
    "groups", "offsets", "transactions", "cluster", "tables", "tierer", "catalog", "schemas", "logs",
    "replicas", "produce_path", "fetch_path", "sibling_logs", "forwarded", "tier_child",
})


def broker_part_uses(source: str) -> list[str]:
    """``<broker expression>.<part>`` reads: any attribute in BROKER_PARTS taken from an
    expression that names the broker (``broker``, ``self.broker``, ``broker_of(request)``,
    ``app.state.broker`` ...)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in BROKER_PARTS:
            base = ast.unparse(node.value)
            if "broker" in base.lower():
                found.append(f"{node.lineno}: {base}.{node.attr}")
    return sorted(found)


def test_the_gateway_reaches_the_brokers_parts_only_through_its_services() -> None:
    """Routes, middleware, the console, the metrics and the consumer instances use public
    Broker methods and the narrow services the composition root hands them; only
    ``Services.of`` (the composition) takes the parts from the Broker."""
    api = ROOT / "api"
    offenders = {
        str(path.relative_to(ROOT)): hits
        for path in _modules(api)
        if path != api / "services.py" and (hits := broker_part_uses(path.read_text()))
    }
    assert offenders == {}


def test_the_services_check_catches_a_reach_into_the_broker() -> None:
    assert broker_part_uses("def f(request):\n    return broker_of(request).groups.describe('g')") == [
        "2: broker_of(request).groups"]
    assert broker_part_uses("def f(self):\n    return self._broker.cluster.image") == ["2: self._broker.cluster"]
    assert broker_part_uses("def f(request):\n    return groups_of(request).describe('g')") == []
