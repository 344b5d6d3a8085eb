"""Partition limits, and partitions nobody uses hold no file handles (issue 14,
section 3). The limited broker allows 8 partitions per topic and 20 in all."""

from __future__ import annotations

import os

import pytest
from groups.support import unique
from integration.support import wait_until

PER_TOPIC = 8
TOTAL = 20


def client_partitions(rest) -> int:
    resp = rest.http.get("/topics")
    assert resp.status_code == 200, resp.text
    return sum(len(rest.partition_ids(t)) for t in resp.json() if not t.startswith("__"))


def assert_refused(resp, rest, name: str) -> None:
    assert 400 <= resp.status_code < 500, resp.text
    assert resp.json()["message"].startswith("INVALID_PARTITIONS"), resp.text
    assert rest.http.get(f"/topics/{name}").status_code == 404  # nothing created


def test_a_topic_above_the_per_topic_limit_is_refused(limited_broker):
    rest = limited_broker.rest
    name = unique("too-wide")
    assert_refused(rest.create_topic(name, PER_TOPIC + 1), rest, name)


def test_topics_past_the_broker_limit_are_refused(limited_broker):
    rest = limited_broker.rest
    room = TOTAL - client_partitions(rest)
    assert room >= 0
    while room > 0:  # fill the broker up to its limit exactly
        size = min(room, PER_TOPIC)
        assert rest.create_topic(unique("fill"), size).status_code in (200, 201)
        room -= size
    name = unique("one-more")
    assert_refused(rest.create_topic(name, 1), rest, name)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_partitions_without_traffic_hold_no_file_handles(broker, make_topic):
    pid = broker.proc.pid
    make_topic(partitions=1)  # warm up: first topic create, catalog handles and all
    before = open_fds(pid)
    make_topic(partitions=16)
    make_topic(partitions=16)
    after = open_fds(pid)
    # 32 idle partitions: before lazy opening each held its segment file (+32)
    assert after - before < 16, (before, after)

    # traffic opens what it needs, and serving it works
    topic = make_topic(partitions=2)
    resp = broker.rest.produce_binary(topic, [{"value": b"x", "partition": 1}])
    assert resp.status_code == 200, resp.text
    got = wait_until(lambda: broker.rest.fetch(topic, 1, 0).json(), "the record fetched")
    assert len(got) == 1


def test_the_tierer_reads_nothing_for_a_topic_whose_table_did_not_move(tmp_path):
    """Every table.flush.interval.ms the tierer follows each topic's table; for an idle
    topic it used to read two Delta transactions per partition each time (500 idle
    partitions: a fifth of a CPU). Its own commits do not make it read either: only
    another writer's."""
    import asyncio

    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties, Transaction

    from laketail.broker import Broker
    from laketail.config import load_settings

    async def scenario() -> None:
        broker = Broker(load_settings(None, env={}, data=str(tmp_path)))
        await broker.start()
        try:
            await broker.create_topic("idle", 8)
            tables = broker.tables
            reads: list[int] = []
            real = tables.log_start_offset

            def counted(topic: str, partition: int) -> int:
                reads.append(partition)
                return real(topic, partition)

            tables.log_start_offset = counted  # counts the real reads; the real method answers
            await broker.tierer._follow_table("idle")
            reads.clear()
            for _ in range(3):
                await broker.tierer._follow_table("idle")
            assert reads == []

            batch = pa.RecordBatch.from_pydict({"value": [b"v"], "partition": pa.array([3], pa.int32())})
            await broker.produce("idle", batch)
            await broker.tierer.tier_now("idle")  # the tierer's own commit: its answer says what it holds
            await broker.tierer._follow_table("idle")
            assert reads == []

            # Another writer's commit (retention moving partition 3's log start): read again.
            dt = DeltaTable(tables.table_uri("idle"))
            dt.create_write_transaction([], mode="append", schema=dt.schema(), partition_by=["partition"],
                                        commit_properties=CommitProperties(
                                            app_transactions=[Transaction("laketail.logstart.3", 1)]))
            await broker.tierer._follow_table("idle")
            assert sorted(reads) == list(range(8))
            assert broker.logs.get("idle", 3).log_start_offset == 1
        finally:
            await broker.close()

    asyncio.run(scenario())


def test_an_idle_segment_closes_its_file_and_reopens_it_on_use(tmp_path):
    import time

    from laketail.storage.segment import Segment

    segment = Segment.create(tmp_path, 0, 0)  # creating it opens the file
    opened = open_fds(os.getpid())
    later = time.monotonic() + 120

    with segment._using():  # an I/O call in flight: its descriptor stays open
        assert not segment.release_if_idle(later, 60)
    assert not segment.release_if_idle(time.monotonic(), 60)  # used just now
    assert segment.release_if_idle(later, 60)
    assert open_fds(os.getpid()) == opened - 1

    assert segment.read_raw(0, 0) == b""  # the next use opens it again
    assert open_fds(os.getpid()) == opened
    segment.close()
    assert open_fds(os.getpid()) == opened - 1
    with pytest.raises(OSError):  # a closed segment never recreates its file
        segment.read_raw(0, 0)
