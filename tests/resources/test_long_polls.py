"""Long polls are bounded, and never hold a consumer instance (issue 14, section 3).

A fetch's ``timeout`` is capped at the broker's ``fetch.max.wait.ms``, an instance's
``records?timeout=`` at 30 s (``LONG_POLL_MAX_MS``, Confluent's proxy's
``request.timeout.ms``); an instance's commit, seek and DELETE complete while
one of its polls is still waiting.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from conftest import BINARY_V2
from groups.support import V2Consumer, unique
from integration.support import wait_until

from laketail.api.consumer_instances import LONG_POLL_MAX_MS

#: A "timeout" nobody would wait for: 24 days.
HUGE_MS = 2**31 - 1
#: The HTTP client's bound: a fetch still waiting after this has not been capped.
CLIENT_TIMEOUT_S = 30.0


def test_fetch_timeout_is_capped_at_fetch_max_wait_ms(broker, make_topic):
    topic = make_topic(partitions=1)
    with httpx.Client(base_url=broker.url, timeout=CLIENT_TIMEOUT_S) as http:
        for path in (f"/topics/{topic}/partitions/0/records", f"/v1/topics/{topic}/partitions/0/records"):
            resp = http.get(path, params={"offset": 0, "timeout": HUGE_MS}, headers={"Accept": BINARY_V2})
            assert resp.status_code == 200, resp.text


def test_instance_records_timeout_is_capped(broker, make_topic):
    """A records request asking 24 days, and one taking the instance's own 24 days, both
    end at the cap (:data:`LONG_POLL_MAX_MS`, 30 s). They wait side by side (the
    instance's lock is held for one fetch round, never across a wait), so the test waits
    the cap once, not twice (60 s in a full run)."""
    topic = make_topic(partitions=1)
    consumer = V2Consumer(broker.url, unique("capped"), **{"consumer.request.timeout.ms": HUGE_MS})
    consumer.http.timeout = httpx.Timeout(LONG_POLL_MAX_MS / 1000 + CLIENT_TIMEOUT_S)
    try:
        assert consumer.post("/assignments", {"partitions": [{"topic": topic, "partition": 0}]}).status_code == 204
        with ThreadPoolExecutor(2) as pool:
            asked = pool.submit(consumer.records_response, HUGE_MS)
            own = pool.submit(consumer.records_response, -1)  # the instance's own, capped
            asked_resp, own_resp = asked.result(), own.result()
        assert asked_resp.status_code == 200, asked_resp.text
        assert asked_resp.json() == []
        assert own_resp.status_code == 200, own_resp.text
    finally:
        consumer.delete()
        consumer.close()


def test_commit_seek_and_delete_never_wait_behind_a_poll(limited_broker):
    broker = limited_broker
    topic = unique("polled")
    assert broker.rest.create_topic(topic, 1).status_code in (200, 201)
    group = unique("g-polled")
    # The poll below asks 60 s; without its own consumer.request.timeout.ms the instance's
    # 1 s default capped it, and under load it ended before the operations it must not block.
    consumer = V2Consumer(broker.url, group, **{"auto.offset.reset": "earliest",
                                                "consumer.request.timeout.ms": 60_000})
    tp = [{"topic": topic, "partition": 0}]
    assert consumer.post("/assignments", {"partitions": tp}).status_code == 204

    answer: dict[str, Any] = {}

    def poll() -> None:
        with httpx.Client(base_url=broker.url, timeout=120.0) as http:
            answer["resp"] = http.get(consumer.path + "/records", params={"timeout": 60_000},
                                      headers={"Accept": BINARY_V2})

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()

    # The poll's first round sets the partition's position; a commit without offsets
    # stores positions, so once the commit shows it the poll is inside its wait.
    def poll_started() -> bool:
        assert consumer.commit().status_code == 200
        return consumer.committed([(topic, 0)]).get((topic, 0)) == 0

    wait_until(poll_started, "the poll's position, committed while the poll waits")
    assert reader.is_alive()

    resp = consumer.post("/positions", {"offsets": [{"topic": topic, "partition": 0, "offset": 0}]})
    assert resp.status_code == 204, resp.text
    resp = consumer.commit([(topic, 0, 4)])
    assert resp.status_code == 200, resp.text
    assert consumer.committed([(topic, 0)]) == {(topic, 0): 5}
    assert reader.is_alive(), "the poll ended before the operations it must not block"

    resp = consumer.delete()
    assert resp.status_code == 204, resp.text
    reader.join(timeout=CLIENT_TIMEOUT_S)  # a destroyed instance's poll ends with what it has
    assert not reader.is_alive()
    assert answer["resp"].status_code == 200, answer["resp"].text
    assert answer["resp"].json() == []

    gone = consumer.http.get(consumer.path + "/assignments", headers={"Accept": "application/vnd.kafka.v2+json"})
    assert gone.status_code == 404
    assert gone.json()["message"].startswith("CONSUMER_INSTANCE_NOT_FOUND")
    consumer.close()
