"""Broker-side validation on a broker where the registry does not run: it checks
against a follower's copy of ``__schemas`` (an in-memory log here, a manual clock),
loaded at first use and again when a record fails, at most once per refresh interval."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from laketail.clock import ManualClock
from laketail.coordinator.fakes import InMemoryLog
from laketail.errors import InvalidRecord
from laketail.schemas import SchemaRegistry, wire
from laketail.schemas.validation import SchemaValidation

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})


def _values(*data: bytes | None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": pa.array(list(data), pa.binary())})


def test_a_follower_sees_new_schemas_after_its_refresh_interval() -> None:
    async def run() -> None:
        log = InMemoryLog()
        registry = SchemaRegistry(log, 1)  # the controller's
        clock = ManualClock()
        follower = SchemaValidation(SchemaRegistry(log, 1), lambda: False, log, clock, refresh_interval_ms=1000)
        first = await registry.register("t-value", {"schema": ORDER})
        codec = wire.codec("AVRO", ORDER)
        good = wire.frame(first, codec.encode({"id": "a"}))
        await follower.check("t", _values(good, None), values=True, keys=False)  # loaded at first use

        other = await registry.register("u-value", {"schema": ORDER})  # the same schema: the same id
        assert other == first
        later = json.dumps({"type": "record", "name": "Order", "fields": [
            {"name": "id", "type": "string"}, {"name": "n", "type": "int", "default": 0}]})
        second = await registry.register("t-value", {"schema": later})
        newer = wire.frame(second, wire.codec("AVRO", later).encode({"id": "b", "n": 1}))
        # failed records refresh the copy, but not within the interval of the last load
        with pytest.raises(InvalidRecord):
            await follower.check("t", _values(newer), values=True, keys=False)
        clock.advance(1000)
        await follower.check("t", _values(newer), values=True, keys=False)  # refreshed: seen
        with pytest.raises(InvalidRecord, match="not a version of subject 't-value'"):
            await follower.check("t", _values(wire.frame(second + 50, b"")), values=True, keys=False)

    asyncio.run(run())


def test_where_the_registry_runs_its_state_is_read() -> None:
    async def run() -> None:
        log = InMemoryLog()
        registry = SchemaRegistry(log, 1)
        validation = SchemaValidation(registry, lambda: True, log, ManualClock())
        schema_id = await registry.register("t-key", {"schema": ORDER})
        key = wire.frame(schema_id, wire.codec("AVRO", ORDER).encode({"id": "k"}))
        batch = pa.RecordBatch.from_pydict({"key": pa.array([key], pa.binary()),
                                            "value": pa.array([b"raw"], pa.binary())})
        await validation.check("t", batch, values=False, keys=True)  # the value is not checked
        with pytest.raises(InvalidRecord, match="its value fails"):
            await validation.check("t", batch, values=True, keys=True)

    asyncio.run(run())


def test_the_tier_pass_gets_the_subjects_live_versions_from_the_follower_copy() -> None:
    """``value_versions`` (what the tier pass of a topic with typed columns decodes by)
    on a broker where the registry does not run: the follower's copy, refreshed after its
    interval; soft-deleted versions left out."""
    async def run() -> None:
        log = InMemoryLog()
        registry = SchemaRegistry(log, 1)
        clock = ManualClock()
        follower = SchemaValidation(SchemaRegistry(log, 1), lambda: False, log, clock, refresh_interval_ms=1000)
        first = await registry.register("t-value", {"schema": ORDER})
        (only,) = await follower.value_versions("t")
        assert (only["id"], only["schema_type"], json.loads(only["schema"]), only["references"]) == (
            first, "AVRO", json.loads(ORDER), [])
        later = json.dumps({"type": "record", "name": "Order", "fields": [
            {"name": "id", "type": "string"}, {"name": "n", "type": "int", "default": 0}]})
        second = await registry.register("t-value", {"schema": later})
        assert [v["id"] for v in await follower.value_versions("t")] == [first]  # within the interval
        clock.advance(1000)
        assert [v["id"] for v in await follower.value_versions("t")] == [first, second]
        await registry.delete_version("t-value", "1")
        clock.advance(1000)
        assert [v["id"] for v in await follower.value_versions("t")] == [second]
        assert await follower.value_versions("nothing") == []

    asyncio.run(run())
