"""Faults of the object store under a broker whose data root is a bucket.

The broker reaches moto through :class:`FaultProxy`, which a test turns into an outage
(connections dropped), throttling (``503 SlowDown``) or expired credentials (``403
ExpiredToken``), or which stalls one upload or commit while the broker is killed. The
test itself reads the bucket directly. What must hold: produce keeps being acknowledged
from the hot log; the tierer backs off, says why on its log and ``/metrics``, and catches
up once the store answers again; a kill -9 mid-upload or mid-commit leaves nothing
half-committed, and the restarted broker tiers every record exactly once. A data file
that no commit names (an upload whose commit never happened) is an orphan: no reader of
the Delta log ever opens it, and VACUUM removes it.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest
from deltalake import DeltaTable

from tests.conftest import WITH_TIER_CHILD
from tests.integration.support import TIER_DEADLINE_S, wait_until
from tests.object_store.conftest import Bucket, table_rows, wait_table
from tests.object_store.fault_proxy import FaultProxy

pytestmark = [pytest.mark.integration]

PARTITIONS = 2
#: How long each fault lasts while the test produces (several failed passes' backoff).
FAULT_S = 8.0


def _produce(broker, topic: str, label: str, count: int) -> dict[tuple[int, int], bytes]:
    """``count`` records per partition, each acknowledged (acks=all) before the next."""
    out = {}
    for i in range(count):
        for p in range(PARTITIONS):
            value = f"{label}-{p}-{i}".encode()
            resp = broker.rest.produce_binary(topic, [{"value": value}], partition=p, acks="all")
            assert resp.status_code == 200, resp.text
            out[(p, resp.json()["offsets"][0]["offset"])] = value
    return out


def _metric(broker, name: str) -> list[str]:
    resp = httpx.get(f"{broker.url}/metrics", timeout=30.0)
    assert resp.status_code == 200, resp.text
    return [line for line in resp.text.splitlines() if line.startswith(name)]


def _start(s3_broker_factory, bucket: Bucket, proxy: FaultProxy, prefix: str, env: dict | None = None):
    broker = s3_broker_factory(bucket.uri(prefix), env={"AWS_ENDPOINT_URL": proxy.endpoint, **(env or {})})
    topic = "orders"
    resp = broker.rest.create_topic(topic, PARTITIONS, configs={"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text
    return broker, topic


@pytest.mark.parametrize("fault", ["down", "slowdown"])
def test_produce_is_acknowledged_through_an_outage_and_tiering_catches_up(
        fault: str, bucket: Bucket, s3_broker_factory, proxy: FaultProxy) -> None:
    broker, topic = _start(s3_broker_factory, bucket, proxy, f"outage-{fault}")
    uri = broker.table_uri(topic)
    produced = _produce(broker, topic, "before", 5)
    wait_table(uri, produced)

    proxy.mode = fault
    version = DeltaTable(uri).version()
    deadline = time.monotonic() + FAULT_S
    during: dict[tuple[int, int], bytes] = {}
    while time.monotonic() < deadline:  # acknowledged from the hot log while nothing reaches the store
        during |= _produce(broker, topic, f"during-{len(during)}", 1)
    assert len(during) >= PARTITIONS
    assert DeltaTable(uri).version() == version, "a commit reached the bucket during the outage"
    fetched = {(p, e["offset"]) for p in range(PARTITIONS)
               for e in broker.rest.fetch_range(topic, p, 0, 5 + len(during) // PARTITIONS)}
    assert fetched == set(produced) | set(during)

    proxy.mode = "pass"
    after = _produce(broker, topic, "after", 3)
    wait_table(uri, produced | during | after)


def test_expired_credentials_are_reported_and_tiering_resumes_once_renewed(
        bucket: Bucket, s3_broker_factory, proxy: FaultProxy) -> None:
    broker, topic = _start(s3_broker_factory, bucket, proxy, "expired")
    uri = broker.table_uri(topic)
    produced = _produce(broker, topic, "before", 3)
    wait_table(uri, produced)

    proxy.mode = "expired"
    version = DeltaTable(uri).version()
    produced |= _produce(broker, topic, "refused", 3)
    failing = wait_until(lambda: [m for m in _metric(broker, "laketail_tier_failing{")
                                  if f'topic="{topic}"' in m] or None,
                         "laketail_tier_failing for the topic", TIER_DEADLINE_S, 0.3)
    assert 'reason="credentials"' in failing[0], failing
    assert re.search(rf"tiering {topic} failed \(credentials.*renew them", broker.output()), broker.output()
    assert DeltaTable(uri).version() == version, "a commit reached the bucket with expired credentials"

    proxy.mode = "pass"  # renewed where the broker's credential provider reads them
    wait_table(uri, produced)
    wait_until(lambda: not any(f'topic="{topic}"' in m for m in _metric(broker, "laketail_tier_failing{")),
               "the topic to leave laketail_tier_failing", TIER_DEADLINE_S, 0.3)
    assert any(f'topic="{topic}"' in m for m in _metric(broker, "laketail_tier_pass_failures_total"))


@pytest.mark.fault
@pytest.mark.parametrize("stalled, forward_first, env", [
    pytest.param(r"/topics/orders/partition(=|%3D)\d+/.*\.parquet", False, {}, id="data-file-upload"),
    pytest.param(r"/topics/orders/_delta_log/\d+\.json", True, WITH_TIER_CHILD, id="commit-answer-lost"),
])
def test_kill9_mid_tier_leaves_nothing_half_committed_and_restart_tiers_once(
        stalled: str, forward_first: bool, env: dict, bucket: Bucket, s3_broker_factory, proxy: FaultProxy) -> None:
    """``data-file-upload``: the broker dies while a data file is being uploaded (no
    commit happened). ``commit-answer-lost``: the tier child's commit reached the store
    but the broker died before hearing so. Either way the restarted broker ends with
    every record in the table once, and every file the log names is in the bucket."""
    broker, topic = _start(s3_broker_factory, bucket, proxy, "kill", env)
    uri = broker.table_uri(topic)
    produced = _produce(broker, topic, "first", 3)
    wait_table(uri, produced)

    proxy.hold(stalled, forward_first=forward_first)
    produced |= _produce(broker, topic, "second", 3)
    wait_until(lambda: proxy.held or None, f"a request matching {stalled} to stall", TIER_DEADLINE_S, 0.1)
    broker.kill9()
    proxy.release()
    if not forward_first:
        assert len(table_rows(uri)) == 2 * 3, "an upload cut short was committed"

    broker.start()
    produced |= _produce(broker, topic, "third", 2)
    wait_table(uri, produced)
    table = DeltaTable(uri)
    named = table.file_uris()
    keys = set(bucket.keys(f"kill/topics/{topic}/"))
    assert all(u.split(f"{bucket.name}/", 1)[1] in keys for u in named), "the log names a file not in the bucket"
