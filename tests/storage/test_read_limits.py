"""A read cut short by its byte limit stops there, in both tiers.

A fetch returns records in offset order and the consumer's next fetch starts after the
last one, so a read that took part of a frame (or file), then a smaller record of the
next one that still fitted, made the consumer skip the rest of the first. Both tiers
once did.
"""

import asyncio

import pyarrow as pa

from laketail.broker import Broker
from laketail.clock import ManualClock
from laketail.config import TopicConfig, load_settings
from laketail.records import build_frame_batch
from laketail.storage.partition_log import PartitionLog


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return build_frame_batch(timestamps_us=[1_000] * len(values), keys=[None] * len(values), values=values)


def test_a_hot_read_cut_inside_a_frame_does_not_go_on_to_the_next(tmp_path):
    async def run():
        plog = PartitionLog.open(tmp_path, "t", 0, TopicConfig(), ManualClock())
        await plog.append(_batch([b"a" * 300, b"b" * 300]))  # offsets 0-1, about 600 payload bytes
        await plog.append(_batch([b"c"]))  # offset 2: one byte
        for read in (plog.read, plog.read_once):
            table = read(0, 3, 100, 400)
            assert table.column("offset").to_pylist() == [0], read.__name__
            assert table.column("value").to_pylist() == [b"a" * 300]
            assert read(0, 3, 100, 1 << 20).column("offset").to_pylist() == [0, 1, 2]
        await plog.close()

    asyncio.run(run())


def test_a_table_read_cut_inside_a_file_does_not_go_on_to_the_next(tmp_path):
    async def run():
        broker = Broker(load_settings(None, env={}, data=str(tmp_path)))
        await broker.start()
        await broker.create_topic("t", 1)
        await broker.produce("t", pa.RecordBatch.from_pydict({"value": [b"a" * 300, b"b" * 300]}))
        await broker.tierer.tier_now("t")  # file 1: offsets 0-1
        await broker.produce("t", pa.RecordBatch.from_pydict({"value": [b"c"]}))
        await broker.tierer.tier_now("t")  # file 2: offset 2
        assert broker.tables.read("t", 0, 0, 3, 100, 1 << 20).column("offset").to_pylist() == [0, 1, 2]
        table = broker.tables.read("t", 0, 0, 3, 100, 400)
        assert table.column("offset").to_pylist() == [0]
        await broker.close()

    asyncio.run(run())
