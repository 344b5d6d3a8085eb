# laketail's image: the broker (`laketail serve`), its Spark jobs, and -- from the same
# pyspark -- a standalone Spark master and worker. One image for all of them, so the
# executors of a job import the same laketail, Python and Spark as its driver.
# docker-compose.yml builds it; by hand: docker build -t laketail .
FROM python:3.11-slim-bookworm

# Java for PySpark (the maintenance jobs, laketail sql, the Spark services); procps
# for Spark's launch scripts.
RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/laketail
COPY pyproject.toml README.md ./
COPY platform platform
COPY api api
COPY jobs jobs
COPY conf conf
# A regular (not editable) install: every package must be listed in pyproject.toml,
# which the import check below verifies at build time.
RUN pip install --no-cache-dir . \
 && python -c "import laketail.api.app, laketail.broker, laketail.jobs.compaction"

# The SQL views' JVM relation (docs/architecture.md §10.3): compiled here with a JDK that
# is removed again, into the installed package, where register_topics and the Spark
# services find it. Without it the views fall back to the follower's pinned snapshots.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
 && python -m laketail.spark.jvm build \
 && python -c "from laketail.spark.jvm import JAR; assert JAR.is_file(), JAR" \
 && apt-get purge -y openjdk-17-jdk-headless && apt-get autoremove -y \
 && rm -rf /var/lib/apt/lists/*

# conf/laketail.toml is read from the working directory; the jobs' spark-defaults.conf
# and log4j2.properties from here (an installed, not editable, laketail has no conf/).
ENV LAKETAIL_CONF_DIR=/opt/laketail/conf \
    PYTHONUNBUFFERED=1

EXPOSE 8082
# Beyond loopback, serve wants authentication (listeners with SASL_SSL, see
# docs/security.md) or an explicit --allow-anonymous; docker-compose.yml configures TLS and SCRAM.
CMD ["laketail", "serve", "--data", "/data", "--host", "0.0.0.0", "--port", "8082"]
