"""How laketail starts its Spark jobs: one ``spark-submit`` command line, built here.

Used by ``laketail jobs run`` and by the broker's maintenance scheduler, so both run a
job the same way:

* the job script is ``jobs/<name>.py`` of the installed ``laketail.jobs`` package;
* ``spark-submit`` is pyspark's own (the venv's), and Python workers run this
  interpreter (``PYSPARK_PYTHON``), so executors import the same ``laketail``;
* Spark's settings come from ``conf/spark-defaults.conf`` and its logging from
  ``conf/log4j2.properties`` (warnings only), ``conf`` being the repository's (or
  ``$LAKETAIL_CONF_DIR``); ``--master`` defaults to ``local[2]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

DEFAULT_MASTER = "local[2]"
JOBS = ("compaction", "retention", "lag", "eos_pipeline", "maintenance")


def jobs_dir() -> Path:
    import laketail.jobs

    return Path(laketail.jobs.__file__).resolve().parent


def conf_dir() -> Path:
    override = os.environ.get("LAKETAIL_CONF_DIR")
    return Path(override) if override else jobs_dir().parent / "conf"


def job_script(name: str) -> Path:
    if name not in JOBS:
        raise ValueError(f"unknown job '{name}' (jobs: {', '.join(JOBS)})")
    return jobs_dir() / f"{name}.py"


def spark_submit_path() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


def spark_submit_argv(
    name: str,
    job_args: Sequence[str] = (),
    *,
    master: str = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
) -> list[str]:
    argv = [str(spark_submit_path()), "--master", master, "--name", f"laketail-{name}"]
    conf_path = conf_dir()
    defaults = conf_path / "spark-defaults.conf"
    if defaults.is_file():
        argv += ["--properties-file", str(defaults)]
    log4j = conf_path / "log4j2.properties"
    if log4j.is_file():
        argv += ["--driver-java-options", f"-Dlog4j2.configurationFile=file:{log4j}"]
        argv += ["--conf", f"spark.executor.extraJavaOptions=-Dlog4j2.configurationFile=file:{log4j}"]
    for key, value in (conf or {}).items():
        argv += ["--conf", f"{key}={value}"]
    return argv + [str(job_script(name)), *job_args]


def job_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a spark-submit child: this Python for driver and workers."""
    env = dict(os.environ if base is None else base)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYTHONUNBUFFERED"] = "1"
    return env
