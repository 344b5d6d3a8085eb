"""laketail for Spark: the ``laketail`` data source and SQL views over topics.

::

    from laketail.spark import register, register_topics
    register(spark)                          # format("laketail"): source and sink
    df = (spark.readStream.format("laketail")
          .option("laketail.servers", "http://127.0.0.1:8082")
          .option("subscribe", "orders").load())
    register_topics(spark, "http://127.0.0.1:8082")
    spark.sql("SELECT partition, count(*) FROM orders GROUP BY partition")

Modules: :mod:`~laketail.spark.datasource` (the data source), :mod:`~laketail.spark.options`,
:mod:`~laketail.spark.planning` (driver), :mod:`~laketail.spark.scan` (executors),
:mod:`~laketail.spark.isolation` (read_committed over table rows),
:mod:`~laketail.spark.sink` (exactly-once writes), :mod:`~laketail.spark.sql` (views),
:mod:`~laketail.spark.session` (a local session), :mod:`~laketail.spark.gateway`.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from laketail.spark import jvm
from laketail.spark.datasource import LaketailDataSource
from laketail.spark.session import local_session
from laketail.spark.sql import register_topics, stop_following

__all__ = ["LaketailDataSource", "local_session", "register", "register_topics", "stop_following"]


class PythonLaketailSource(LaketailDataSource):
    """The Python source under the name it has where laketail's jar is loaded: the jar's
    ``laketail.DefaultSource`` answers to ``format("laketail")`` there (Spark refuses a
    Python source of a name a JVM class answers to) and hands this one everything but
    batch scans of fully tiered ranges (docs/architecture.md §10.1)."""

    @classmethod
    def name(cls) -> str:
        return "laketail_python"


def register(spark: SparkSession) -> None:
    """Make ``format("laketail")`` available in ``spark`` (read, readStream, write, writeStream):
    the jar's source over the Python one where the jar is built (it is added to the session
    then), else the Python source alone."""
    if jvm.attach(spark):
        spark.dataSource.register(PythonLaketailSource)
    else:
        spark.dataSource.register(LaketailDataSource)
