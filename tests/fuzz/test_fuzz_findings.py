"""Regression tests for what the fuzzer (test_openapi_fuzz.py) found, one per fix, each
against the shared broker with the request the fuzzer sent."""

from __future__ import annotations

import pytest
from integration.support import assert_error

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("path", ["state", "records?offset=0", "offset-for-timestamp?timestamp=0", "epochs"])
def test_internal_partition_routes_answer_unknown_partition_with_404(broker, make_topic, path: str) -> None:
    """A partition the broker's cluster image does not have is Kafka's
    UNKNOWN_TOPIC_OR_PARTITION (404/40402), not 503 LEADER_NOT_AVAILABLE: the fuzzer's
    ``GET /internal/v1/partitions/TRUE/4116919/state``."""
    topic = make_topic(partitions=1)
    for name, partition in (("no-such-topic-fuzz", 0), (topic, 1), (topic, 4116919)):
        resp = broker.rest.http.get(f"/internal/v1/partitions/{name}/{partition}/{path}")
        assert_error(resp, 404, 40402, "UNKNOWN_TOPIC_OR_PARTITION")
    assert broker.rest.http.get(f"/internal/v1/partitions/{topic}/0/state").status_code == 200
