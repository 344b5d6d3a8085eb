"""What a ``format("laketail")`` query costs each Spark Python worker beyond its rows
(benchmark 6's fixed cost): one gateway client per process and settings, however many
tasks and plannings it runs, and reused workers whose long-lived objects the daemon's
``gc.collect()`` after every call no longer walks."""

from __future__ import annotations

import os
from typing import Any

from laketail.spark.gateway import SparkGateway, shared_client

SECURITY = (("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"), ("sasl.password", "secret"))


def test_gateways_of_one_process_share_a_client_per_settings(broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    first = SparkGateway((broker.url,))
    assert first.table(topic).partitions.keys() == {0}
    first.close()  # closing a gateway leaves the process's client open for the next one
    second = SparkGateway((broker.url,))
    assert second._http is first._http and not second._http.is_closed
    assert second.table(topic).partitions.keys() == {0}
    assert SparkGateway((broker.url,), security=SECURITY)._http is not first._http
    assert SparkGateway((broker.url,), security=SECURITY)._http is shared_client(120.0, SECURITY)
    assert SparkGateway((broker.url,), timeout_s=5.0)._http is not first._http


def test_a_forked_child_makes_its_own_client() -> None:
    parent = shared_client(120.0, ())
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child answers whether it got a client of its own
        try:
            os.write(write_end, b"own" if shared_client(120.0, ()) is not parent else b"inherited")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"own"
    assert shared_client(120.0, ()) is parent
