"""Fixtures for the replication fault tests.

* ``cluster`` -- a fresh, started three-broker :class:`~.support.Cluster` per test (the
  tests kill and freeze its brokers); torn down with SIGKILL. When a test fails, the
  teardown prints where every broker's logs are and the tail of each one's stderr.
* ``steady_cluster`` -- one three-broker cluster for the session, for the tests that
  kill, freeze and reconfigure nothing (they only add topics of their own): a cluster
  start is three interpreters, done once for them instead of once per test. A test that
  fails prints its logs as ``cluster`` does.
* ``unique`` -- ``unique(stem)``: a topic name no other test uses.
"""

from __future__ import annotations

import uuid
from typing import Callable, Generator, Iterator

import pytest

from .support import Cluster

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield started.start()
    finally:
        if request.node.stash.get(_FAILED, True):
            print(started.output())
        started.close()


@pytest.fixture(scope="session")
def _session_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(tmp_path_factory.mktemp("steady-cluster"))
    try:
        yield started.start()
    finally:
        started.close()


@pytest.fixture
def steady_cluster(request: pytest.FixtureRequest, _session_cluster: Cluster) -> Iterator[Cluster]:
    assert _session_cluster.live_ids() == set(_session_cluster.brokers), "a test stopped a broker of the steady cluster"
    yield _session_cluster
    if request.node.stash.get(_FAILED, True):
        print(_session_cluster.output())


@pytest.fixture
def unique() -> Callable[[str], str]:
    return lambda stem: f"{stem}-{uuid.uuid4().hex[:8]}"
