# laketail: `make run` starts one broker, `make test` runs the tests.
# Both check for Java 17+ (PySpark needs it), create .venv (Python 3.11+) when it is
# missing and install laketail into it (again only when pyproject.toml changed).
# PYTEST_ARGS passes options to pytest: make test PYTEST_ARGS='-k cli -x'.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.laketail-installed
SPARK_LOOKUP := $(VENV)/.laketail-spark-lookup
PYTEST_ARGS ?=
JAR := platform/laketail/spark/jvm/laketail-spark.jar
JAVA_SOURCES := $(shell find platform/laketail/spark/jvm/java -type f)

KAFKAJS := tests/kafka_listener/kafkajs/node_modules/kafkajs/package.json

.PHONY: run test test-fast bench soak outage-soak check-python check-java check-compose check-chromium check-kcat check-node install

# HTTP on 8082, Kafka's protocol on 9092 (docs/architecture.md §11.6)
run: check-java install
	LAKETAIL_LISTENERS=KAFKA://127.0.0.1:9092 LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP=KAFKA:PLAINTEXT \
	$(VENV)/bin/laketail serve --data ./laketail-data --host 127.0.0.1 --port 8082

# ruff (lint, import order) over the repository and mypy over every package (pyproject.toml
# [tool.mypy]: platform, api and jobs; the Broker checked against each port) run before the tests.
test: check-java check-compose check-chromium check-kcat $(KAFKAJS) install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VPY) -m pytest $(PYTEST_ARGS)

# The inner loop: ruff, mypy and every test that starts no broker or CLI process, no JVM and
# kills nothing (markers set in tests/conftest.py, see tests/README.md); under two minutes.
# PYTHONDONTWRITEBYTECODE is emptied for pytest: with it set, pytest rewrites the asserts
# of every test module at every run (collection took 57 s instead of 24 s here).
FAST_MARKERS := not integration and not spark and not fault and not subprocess
test-fast: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	PYTHONDONTWRITEBYTECODE= $(VPY) -m pytest -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

bench: check-java install
	$(VPY) -m bench

# The Jepsen-style run of tests/jepsen for SOAK_MINUTES (seed SOAK_SEED): three brokers,
# kill -9s and pauses under producers, a consumer group and transactions; writes
# report.md, findings.json and history.json under results/jepsen/<time>/ (not committed)
# and fails when the checker finds something. make test runs its short form.
SOAK_MINUTES ?= 30
SOAK_SEED ?= 35
soak: install
	PYTHONPATH=tests $(VPY) -m jepsen.runner --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --out results/jepsen

# The object store down for a minute under steady produce (issue 40; bench/outage.py): about 3 minutes.
outage-soak: install
	$(VPY) -m bench.outage

install: $(STAMP) $(SPARK_LOOKUP) $(JAR)

$(STAMP): pyproject.toml | check-python
	$(VPY) -m pip install -e '.[dev]'
	touch $@

# Spark 4 registers the Python data sources it finds by listing the top-level modules
# of its workers' sys.path (pkgutil.iter_modules over pyspark_*), and an editable
# install's import hook is invisible to that listing: `USING laketail` from SQL alone
# failed with DATA_SOURCE_NOT_FOUND. A directory in the venv that holds only a link to
# platform/pyspark_laketail, named in a .pth, puts the module where the listing looks
# (edits stay live; laketail itself still comes from the editable install).
$(SPARK_LOOKUP): | $(STAMP)
	mkdir -p $(VENV)/spark-lookup
	ln -sfn $(CURDIR)/platform/pyspark_laketail $(VENV)/spark-lookup/pyspark_laketail
	echo $(abspath $(VENV))/spark-lookup > "$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/laketail-spark-lookup.pth"
	touch $@

# laketail's Spark classes (format("laketail_table"), SQL views fresh at every query): one
# javac call against PySpark's jars. Without a JDK it prints why and builds nothing, and
# register_topics falls back to follower views (docs/spark-and-sql.md, "Live SQL over topics").
$(JAR): $(JAVA_SOURCES) platform/laketail/spark/columns.py platform/laketail/spark/jvm/__init__.py | $(STAMP)
	$(VPY) -m laketail.spark.jvm build

# Creates .venv when it is missing; fails plainly when the Python there (or, before
# it exists, $(PYTHON)) is older than 3.11.
check-python:
	@if [ ! -x $(VPY) ]; then \
	  if ! command -v $(PYTHON) >/dev/null 2>&1; then \
	    echo "Python 3.11+ is required: $(PYTHON) was not found (install python3.11, or run make PYTHON=/path/to/python3.11)" >&2; exit 1; \
	  fi; \
	  if ! $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
	    echo "Python 3.11+ is required: $(PYTHON) is $$($(PYTHON) -V 2>&1) (run make PYTHON=/path/to/python3.11)" >&2; exit 1; \
	  fi; \
	  echo "$(PYTHON) -m venv $(VENV)"; \
	  $(PYTHON) -m venv $(VENV) || exit 1; \
	fi
	@$(VPY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "Python 3.11+ is required: $(VENV) has $$($(VPY) -V 2>&1); remove $(VENV) and run make PYTHON=/path/to/python3.11" >&2; exit 1; }

check-java:
	@version=$$(java -version 2>&1 | awk -F'"' '/version/ { print $$2; exit }'); \
	major=$${version%%.*}; \
	if [ "$$major" = 1 ]; then major=$$(echo "$$version" | cut -d. -f2); fi; \
	case "$$major" in ''|*[!0-9]*) major=0 ;; esac; \
	if [ "$$major" -lt 17 ]; then \
	  echo 'Java 17 is required by PySpark: install it with `apt-get install openjdk-17-jre-headless`' >&2; \
	  if [ -n "$$version" ]; then echo "(found Java $$version)" >&2; else echo "(no java on PATH)" >&2; fi; \
	  exit 1; \
	fi

# tests/test_docker_compose.py validates docker-compose.yml with Debian's docker-compose
# (`docker-compose config`; no Docker engine needed): install it when it is missing.
check-compose:
	@command -v docker-compose >/dev/null 2>&1 || { \
	  echo "installing Debian's docker-compose (tests validate docker-compose.yml with it)"; \
	  apt-get install -y -q docker-compose >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q docker-compose >/dev/null 2>&1; } || \
	  echo "could not install docker-compose: tests/test_docker_compose.py will fail" >&2; }

# tests/kafka_listener/test_kcat.py runs Debian's kcat against the Kafka listener:
# install it when it is missing.
check-kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing Debian's kcat (tests/kafka_listener/test_kcat.py drives the Kafka listener with it)"; \
	  apt-get install -y -q kcat >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q kcat >/dev/null 2>&1; } || \
	  echo "could not install kcat: tests/kafka_listener/test_kcat.py will fail" >&2; }

# tests/kafka_listener/test_kafkajs.py runs kafkajs (npm) under Node.js: Debian's nodejs
# and npm when missing, then kafkajs into tests/kafka_listener/kafkajs/node_modules
# (its package.json pins the version).
check-node:
	@{ command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } || { \
	  echo "installing Debian's nodejs and npm (tests/kafka_listener/test_kafkajs.py runs kafkajs)"; \
	  apt-get install -y -q nodejs npm >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nodejs npm >/dev/null 2>&1; } || \
	  echo "could not install nodejs and npm: tests/kafka_listener/test_kafkajs.py will fail" >&2; }

$(KAFKAJS): tests/kafka_listener/kafkajs/package.json | check-node
	cd tests/kafka_listener/kafkajs && npm install --no-package-lock --no-audit --no-fund --loglevel=error
	touch $@

# tests/console drive the web console in Debian's headless chromium through
# chromium-driver (selenium): install both when either is missing.
check-chromium:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
	  echo "installing Debian's chromium and chromium-driver (tests/console drive the web console with them)"; \
	  apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } || \
	  echo "could not install chromium and chromium-driver: tests/console will fail" >&2; }
