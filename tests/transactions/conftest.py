"""Fixtures for the transaction tests: brokers with a small ``__transaction_state``.

* ``TXN_ENV`` -- four partitions for each internal topic (their tables and logs are
  created on first use; fifty would only slow the tests) and groups that rebalance at
  once, for ``broker_factory(env=...)`` where a test kills its own broker;
* ``txn_broker`` -- one such broker for the package's modules, stopped after the last
  of them (tests isolate themselves with fresh topics, transactional ids, groups and
  sinks).
"""

from __future__ import annotations

from typing import Iterator

import pytest
from conftest import BrokerProcess, running_broker

TXN_ENV = {
    "LAKETAIL_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "4",
    "LAKETAIL_OFFSETS_TOPIC_NUM_PARTITIONS": "4",
    "LAKETAIL_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
}


@pytest.fixture(scope="package")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory, "txn-broker", TXN_ENV)
