"""The Spark tests' one SparkSession, and the ``spark`` marker on every test using it.

``spark`` is session-scoped: local[2], two shuffle partitions, no UI, built by
:func:`laketail.spark.session.local_session` (so the jobs' tests, which build theirs
the same way, get the same session from ``getOrCreate``: one JVM per test run). The
``laketail`` data source is registered on it. Brokers and topics come from
``tests/conftest.py`` (``broker``, ``make_topic``). No test's view follower outlives
the test.
"""

from __future__ import annotations

from typing import Iterator

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(autouse=True)
def _no_follower_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that registers views leaves the session's view follower running; after
    ``register_topics`` over every topic it follows every topic of the shared broker
    (hundreds by then), asking the gateway and reading each Delta log five times a
    second for the rest of the run. Each test ends it; the next one starts its own."""
    yield
    if "spark" in request.fixturenames:
        from laketail.spark.sql import stop_following

        stop_following(request.getfixturevalue("spark"))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from laketail.spark.session import local_session

    session = local_session(
        "laketail-tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}
    )
    try:
        yield session
    finally:
        session.stop()
