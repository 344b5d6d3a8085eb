"""A broker told to stop while a group join waits for its rebalance answers that join
NOT_COORDINATOR at once, as Kafka's coordinator does when it unloads its groups, and
stops; it does not wait for the rebalance (up to the largest ``rebalance.timeout.ms``,
five minutes here) while uvicorn drains requests. The fuzz test's broker, left with such
joins, used to be killed after 30 s of waiting.
"""

from __future__ import annotations

import threading

import httpx
import pytest
from conftest import QUICK_GROUPS
from integration.support import wait_until

pytestmark = pytest.mark.integration

GROUP = "stopping-g"


def _join(url: str, member_id: str = "") -> httpx.Response:
    with httpx.Client(base_url=url, timeout=120) as http:
        return http.post(f"/v1/groups/{GROUP}/join", json={
            "member_id": member_id, "client_id": "stop-test", "topics": ["stopping-t"], "strategies": ["range"],
            "session_timeout_ms": 60_000, "rebalance_timeout_ms": 300_000,
        })


def test_a_stopping_broker_answers_pending_joins_not_coordinator(broker_factory):
    broker = broker_factory(env=QUICK_GROUPS)
    first = _join(broker.url)
    assert first.status_code == 200, first.text  # alone: generation 1 at once
    answers: list[httpx.Response] = []
    second = threading.Thread(target=lambda: answers.append(_join(broker.url)))
    second.start()  # waits for the first member to rejoin, which it never does

    def rebalancing() -> bool:
        doc = httpx.get(f"{broker.url}/v1/groups/{GROUP}", timeout=30).json()
        return doc["state"] == "PreparingRebalance" and len(doc["members"]) == 2

    wait_until(rebalancing, "the second member's join to wait for the rebalance")
    code = broker.stop(timeout_s=20)
    second.join(timeout=60)
    assert code is not None, "the broker had to be killed: the pending join held its shutdown"
    assert len(answers) == 1, "the pending join got no answer"
    assert answers[0].status_code == 503, answers[0].text
    body = answers[0].json()
    assert body["error_code"] == 50305 and body["message"].startswith("NOT_COORDINATOR"), body

    broker.start()  # and it starts again; the group's members rejoin from scratch
    again = _join(broker.url)
    assert again.status_code == 200, again.text
