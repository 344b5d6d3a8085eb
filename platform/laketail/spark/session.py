"""A local SparkSession for laketail's command line (``laketail sql``) and tests.

Role: one place that knows what a laketail Spark session needs: Python workers on
this interpreter (executors import ``laketail``), UTC session time (timestamps are UTC
in the tables), few shuffle partitions (topics are read per partition, not shuffled),
no UI, quiet logs, the ``laketail`` data source registered, and laketail's jar in
``spark.jars`` when it was built (``format("laketail_table")``, :mod:`laketail.spark.jvm`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from laketail.spark import jvm

DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
}


#: Spark's JVM logging for interactive use: errors only, on stderr.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def quiet_logging() -> str:
    """A log4j2 file that keeps Spark's JVM quiet (written once per machine)."""
    path = Path(tempfile.gettempdir()) / "laketail-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return str(path)


def local_session(
    app_name: str = "laketail", master: str = "local[*]", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create a session on ``master`` with laketail's defaults under ``conf``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master)
    quiet = {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{quiet_logging()}"}
    settings = {**DEFAULTS, **quiet, **(conf or {})}
    built = jvm.jar()
    if built is not None:
        settings["spark.jars"] = ",".join(j for j in (settings.get("spark.jars"), str(built)) if j)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from laketail.spark import register

    register(spark)
    return spark
