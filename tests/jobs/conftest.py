"""Fixtures for the jobs' tests.

``spark`` -- the test session's one SparkSession (local[2]), built by
:func:`laketail.spark.session.local_session` like the Spark tests' own fixture: both
get the same session from ``getOrCreate``, so a run of the whole suite starts one JVM.
"""

from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session_mod = pytest.importorskip("laketail.spark.session")
    session = session_mod.local_session(
        "laketail-tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}
    )
    try:
        yield session
    finally:
        session.stop()
