"""The short form of the Jepsen-style run (tests/jepsen/runner.py): a fixed seed, a few
minutes of kill -9s and pauses against three brokers under plain, idempotent and
transactional producers and a committing consumer group; the checker must find nothing.

``make soak SOAK_MINUTES=30`` runs the long form and writes a report instead.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from conftest import WITH_TIER_CHILD
from replication.support import Cluster

from .history import check, summary
from .runner import Plan, run_to_history, write_report

pytestmark = [pytest.mark.fault, pytest.mark.integration]

#: The short form: seed 35 (the issue), 150 s of faults every 15-25 s.
SHORT = Plan(seed=35, seconds=150.0)


@pytest.mark.timeout(1200)
def test_a_short_run_under_the_nemesis_keeps_every_guarantee(tmp_path: Path):
    cluster = Cluster(tmp_path / "cluster", env=WITH_TIER_CHILD)  # the production layout
    try:
        history, broke = run_to_history(cluster.start(), SHORT)
        if broke:
            print(broke, cluster.output(), sep="\n")
    finally:
        cluster.close()
    findings = check(history, finished=not broke)
    # results/ (not committed) outlives pytest's temporary directories
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(__file__).resolve().parents[2] / "results" / "jepsen" / f"short-{stamp}"
    report = write_report(out, SHORT, history, findings)
    if findings:  # the brokers' logs, next to the report (pytest's temporary directories rotate)
        for run_dir in (tmp_path / "cluster").glob("run-*"):
            shutil.copytree(run_dir, out / "brokers" / run_dir.name)
    faults = [e for e in history.nemesis if e["action"] not in ("resume", "restart")]
    assert faults, "the nemesis did nothing"
    assert any(isinstance(a, int) for p in history.produces for ans in p.answers for a in ans), "nothing acknowledged"
    assert not findings, f"{summary(findings)}\n" + "\n".join(map(str, findings[:40])) + f"\nreport: {report}"
