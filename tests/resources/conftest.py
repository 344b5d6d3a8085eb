"""A broker with small resource limits, shared by the tests of this package."""

from __future__ import annotations

from typing import Iterator

import pytest
from conftest import BrokerProcess, running_broker

#: The limited broker's settings (the test modules read them from here).
LIMITS = {
    "LAKETAIL_FETCH_MAX_WAIT_MS": "60000",  # polls may wait a minute
    "LAKETAIL_REQUEST_HEADER_TIMEOUT_MS": "1500",
    "LAKETAIL_TOPIC_MAX_PARTITIONS": "8",
    "LAKETAIL_MAX_PARTITIONS": "20",
}


@pytest.fixture(scope="session")
def limited_broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory, "limited", LIMITS)
