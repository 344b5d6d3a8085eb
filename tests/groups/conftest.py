"""Fixtures for the consumer-group tests: brokers whose groups rebalance at once.

``LAKETAIL_GROUP_INITIAL_REBALANCE_DELAY_MS=0`` lets a group's first rebalance finish
without waiting for more members, and ``LAKETAIL_GROUP_MIN_SESSION_TIMEOUT_MS=500``
lets /v1 members ask for short sessions, so a silent member is noticed quickly.

* ``groups_broker`` -- one such broker for the package's modules, stopped after the
  last of them (tests isolate themselves with fresh topics and group names; one start
  instead of five);
* ``QUICK_GROUPS`` -- the environment, for ``broker_factory(env=QUICK_GROUPS)`` where a
  test kills its own broker.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from conftest import QUICK_GROUPS, BrokerProcess, running_broker


@pytest.fixture(scope="package")
def groups_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory, "groups-broker", QUICK_GROUPS)
