"""A local SparkSession for laketail's command line (``laketail sql``) and tests.

Role: one place that knows what a laketail Spark session needs: Python workers on
this interpreter (executors import ``laketail``), UTC session time (timestamps are UTC
in the tables), few shuffle partitions (topics are read per partition, not shuffled),
no UI, quiet logs, and the ``laketail`` data source registered.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
}


def local_session(
    app_name: str = "laketail", master: str = "local[*]", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create a session on ``master`` with laketail's defaults under ``conf``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in {**DEFAULTS, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from laketail.spark import register

    register(spark)
    return spark
