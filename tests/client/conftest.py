"""Fixtures for the Python client's tests: real brokers from tests/conftest.py, and
clients that are always closed.

* ``servers`` -- ``bootstrap.servers`` of the session's shared broker.
* ``group_broker`` -- one broker per module, started with the group settings that make
  rebalances quick (no initial rebalance delay, session timeouts from 500 ms).
* ``clients`` -- ``clients(obj)`` registers a Producer / Consumer / AdminClient to
  close at the end of the test, so no thread or socket outlives it.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from conftest import QUICK_GROUPS, BrokerProcess, running_broker

GROUP_ENV = QUICK_GROUPS


@pytest.fixture
def servers(broker: BrokerProcess) -> str:
    return broker.url


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory, "group-broker", GROUP_ENV)


@pytest.fixture
def clients() -> Iterator[Any]:
    opened: list[Any] = []

    def register(client: Any) -> Any:
        opened.append(client)
        return client

    try:
        yield register
    finally:
        for client in reversed(opened):
            try:
                client.close()
            except RuntimeError:
                pass  # already closed by the test
