"""``laketail`` for Spark SQL without any Python call: Spark 4 registers, at startup,
the ``DefaultSource`` of every importable ``pyspark_*`` module (static Python data
source registration). With laketail installed in the Python that Spark's workers use
(``spark.pyspark.python``), ``spark-sql`` and ``spark.sql`` know ``USING laketail``::

    CREATE TEMPORARY VIEW clicks USING laketail
      OPTIONS ('laketail.servers' 'http://127.0.0.1:8082', subscribe 'clicks');
"""

from laketail.spark.datasource import LaketailDataSource as DefaultSource

__all__ = ["DefaultSource"]
