"""laketail's JVM part: ``format("laketail_table")``, Spark's own Parquet reader over a topic
table's latest committed Delta version, read from the log at every query.

The Java sources under ``java/`` (``TopicTableSource``, a ``RelationProvider`` returning a
``HadoopFsRelation`` over ``TopicFileIndex``, whose ``listFiles`` replays the Delta log with
``TopicTableLog`` and ``CheckpointReader``) are compiled at install time -- ``make install``
runs ``python -m laketail.spark.jvm build``: one ``javac`` call against the jars PySpark
ships -- into ``laketail-spark.jar`` beside this file. The jar is built, never committed.
Without ``javac`` the build says so and ``register_topics`` makes the follower views of
:mod:`laketail.spark.sql` instead (bounded by the follower's interval, not fresh per query).

Spark finds the classes when the jar is on its classpath: :func:`laketail.spark.session.local_session`
puts it in ``spark.jars``; :func:`attach` adds it to a running session with ``ADD JAR``.
The classes run on the driver only (planning); executors read with Spark's Parquet reader.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

#: The built jar (absent until ``python -m laketail.spark.jvm build`` ran with a JDK).
JAR = Path(__file__).with_name("laketail-spark.jar")
SOURCES = Path(__file__).with_name("java")
SHORT_NAME = "laketail_table"
SOURCE_CLASS = "laketail.spark.jvm.TopicTableSource"
SCHEMA_RESOURCE = "laketail/spark/jvm/record-schema.ddl"
#: The Kafka source's columns, without and with ``headers``, for ``format("laketail")``'s schema.
SOURCE_RESOURCES = {False: "laketail/spark/jvm/source-schema.ddl", True: "laketail/spark/jvm/source-schema-headers.ddl"}


class BuildError(RuntimeError):
    """javac refused the sources (a bug here, or a PySpark whose API moved)."""


class JavacMissing(BuildError):
    """No JDK: the jar cannot be built on this machine."""


def jar() -> Path | None:
    """The built jar, or None when it was not built."""
    return JAR if JAR.is_file() else None


def find_javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def build(out: Path = JAR) -> Path:
    """Compile the Java sources against PySpark's jars into ``out`` (replaced atomically)."""
    import pyspark

    from laketail.spark.columns import TABLE_COLUMNS, source_ddl

    javac = find_javac()
    if javac is None:
        raise JavacMissing("javac was not found (install a JDK 17+, e.g. `apt-get install openjdk-17-jdk-headless`)")
    spark_jars = Path(pyspark.__file__).parent / "jars"
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    with tempfile.TemporaryDirectory(prefix="laketail-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run(
            [javac, "--release", "17", "-encoding", "UTF-8", "-nowarn", "-d", str(classes),
             "-cp", f"{spark_jars}/*", *sources],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise BuildError(f"javac failed:\n{done.stderr or done.stdout}")
        partial = out.with_suffix(".jar.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: laketail\n\n")
            for path in sorted(classes.rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
            for path in sorted((SOURCES / "META-INF").rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(SOURCES).as_posix())
            archive.writestr(SCHEMA_RESOURCE, TABLE_COLUMNS + "\n")
            for headers, resource in SOURCE_RESOURCES.items():
                archive.writestr(resource, source_ddl(headers) + "\n")
        os.replace(partial, out)
    return out


def attach(spark: SparkSession) -> bool:
    """Whether ``format("laketail_table")`` can be used in ``spark`` now, on this thread:
    the jar's classes are loadable (else it is added with ``ADD JAR`` when built). False
    for sessions without a local JVM (Spark Connect) and when the jar was not built."""
    if getattr(spark, "_jvm", None) is None:
        return False
    if _loadable(spark):
        return True
    if jar() is None:
        return False
    spark.sql(f"ADD JAR '{JAR}'")
    return _loadable(spark)


def _loadable(spark: SparkSession) -> bool:
    from py4j.protocol import Py4JError

    jvm = spark._jvm
    if jvm is None:  # a session without a JVM gateway (Spark Connect's) cannot load the jar
        return False
    # ADD JAR puts the jar in the session's class loader; Spark looks data sources up
    # through the calling thread's context class loader, so this thread gets that one.
    loader = spark._jsparkSession.sharedState().jarClassLoader()
    jvm.java.lang.Thread.currentThread().setContextClassLoader(loader)
    try:
        jvm.java.lang.Class.forName(SOURCE_CLASS, True, loader)
    except Py4JError:
        return False
    return True


def topic_table(spark: SparkSession, uri: str, rows: str = "all", typed: dict[str, str] | None = None) -> DataFrame:
    """The rows of the topic table at ``uri``, at its latest version at every query, in
    the files ``rows`` selects: ``all``; ``plain``, the files whose statistics prove they
    hold only records outside transactions; ``marked``, the others. ``typed``: the Spark
    DDL types of a typed table's ``value_struct`` / ``key_struct``, then read as well."""
    reader = spark.read.format(SHORT_NAME).option("rows", rows)
    for name, ddl in (typed or {}).items():
        reader = reader.option(name, ddl)
    return reader.load(uri)
