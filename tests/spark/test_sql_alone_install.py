"""docs/spark-and-sql.md's "SQL alone" path after the Makefile's install: a fresh Spark session in its
own process, with no Python call to laketail, runs ``CREATE TEMPORARY VIEW ... USING
laketail`` and reads a topic.

Spark 4 registers the data sources it finds with ``pkgutil.iter_modules`` over its
workers' ``sys.path`` (``pyspark.sql.worker.lookup_data_sources``), and the editable
install ``make install`` makes is an import hook that listing never sees: the same SQL
failed with ``[DATA_SOURCE_NOT_FOUND] Failed to find the data source: laketail``.

The venv here is a new one on which ``make install`` runs for real (``VENV=`` names
it); only its ``pip install -e`` step is stood in for, by a ``.pth`` that adds this
interpreter's site directories (laketail's editable install and the dependencies), and
its stamp, so that nothing is downloaded.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.spark.support import produce

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
#: Failure bounds: make, and one JVM start plus two queries on a slow machine.
MAKE_TIMEOUT_S = 300.0
SPARK_TIMEOUT_S = 600.0

FRESH_SESSION = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    url, topic = sys.argv[1:3]
    spark = (SparkSession.builder.master("local[1]").appName("sql-alone")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        spark.sql(f"CREATE TEMPORARY VIEW clicks USING laketail "
                  f"OPTIONS ('laketail.servers' '{url}', subscribe '{topic}')")
        rows = spark.sql("SELECT partition, count(*) AS n FROM clicks GROUP BY partition ORDER BY partition")
        print("rows", [(r.partition, r.n) for r in rows.collect()])
        print("driver imported laketail:", any(m.split(".")[0] == "laketail" for m in sys.modules))
    finally:
        spark.stop()
""")


def _venv_after_make_install(root: Path) -> Path:
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=MAKE_TIMEOUT_S)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S,
    ).stdout.strip()
    dirs = [d for d in site.getsitepackages() if Path(d).is_dir()]
    (Path(purelib) / "dev_install.pth").write_text(f"import site; list(map(site.addsitedir, {dirs!r}))\n")
    (venv / ".laketail-installed").touch()  # pip install -e '.[dev]': stood in for above
    made = subprocess.run(
        ["make", "-C", str(REPO), "install", f"VENV={venv}"],
        capture_output=True, text=True, timeout=MAKE_TIMEOUT_S,
    )
    assert made.returncode == 0, f"make install failed\n{made.stdout}\n{made.stderr}"
    return python


def test_using_laketail_from_sql_alone_after_make_install(tmp_path: Path, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    produce(broker.url, topic, 0, [b"a", b"b"])
    produce(broker.url, topic, 1, [b"c"])
    python = _venv_after_make_install(tmp_path)
    script = tmp_path / "fresh_session.py"
    script.write_text(FRESH_SESSION)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = str(python)  # the workers' Python is the venv's, as docs/spark-and-sql.md says
    ran = subprocess.run(
        [str(python), str(script), broker.url, topic],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=SPARK_TIMEOUT_S,
    )
    assert ran.returncode == 0, f"exit {ran.returncode}\nstdout: {ran.stdout}\nstderr: {ran.stderr[-4000:]}"
    assert "rows [(0, 2), (1, 1)]" in ran.stdout, ran.stdout
    assert "driver imported laketail: False" in ran.stdout, ran.stdout
