"""``register_topics`` on a SparkSession its user built without laketail's jar: it adds the
jar (``ADD JAR``) and the class loader that sees it, on the calling thread and on the view
follower's (which, with the jar, runs only when following every topic). The suite's
shared session has the jar from the start, so this runs in a fresh process
(tests/spark/own_session_job.py) with its own JVM, against the shared broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laketail.spark import jvm
from tests.jobs.test_eos_kill import SUBMIT_ARGS

pytestmark = pytest.mark.skipif(jvm.jar() is None, reason="the laketail jar is not built (no javac)")

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("own_session_job.py")


def test_a_session_built_without_the_jar_gets_the_live_views(
    few_topics_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    broker = few_topics_broker  # the job registers every topic: a broker with few of them
    topic = make_topic(broker=broker)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKETAIL_", "PYSPARK_"))}
    env["PYSPARK_SUBMIT_ARGS"] = SUBMIT_ARGS.replace("local[2]", "local[1]")
    env["SPARK_LOCAL_DIRS"] = str(tmp_path / "spark-local")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(JOB), broker.url, topic], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "laketail" not in seen["jars_conf"]  # the session really started without the jar
    assert seen["registered"] == {topic: topic}
    assert seen["followers"] == 0
    assert seen["first"] == ["before"]
    # No follower ran for these: the JVM relation read the log at the query.
    assert seen["after_txn"] == ["before", "in-txn"]
    assert seen["later"] == ["before", "in-txn", "later-1", "later-2"]
    assert seen["later_all"] == 5  # the four records and the transaction's commit marker
    assert seen["created_count"] == 0
    for plan in (seen["plan"], seen["plan_all"], seen["created_plan"]):
        assert "TopicFileIndex" in plan or "laketail_table" in plan, plan
