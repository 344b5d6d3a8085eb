"""The Spark tests' fixtures: no test's view follower outlives the test.

The session (``spark``, one per run, shared with the jobs' tests), the ``spark`` marker
on every test using it, brokers and topics come from ``tests/conftest.py``.
"""

from __future__ import annotations

from typing import Iterator

import pytest


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
