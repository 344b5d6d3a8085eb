"""The registry's state machine on an in-memory ``__schemas`` log: a reload replays to
the same state a live registry holds, compaction (latest value per key) keeps it,
undecodable records are skipped and counted, and a failed append changes nothing."""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest

from laketail.coordinator.fakes import InMemoryLog
from laketail.errors import NotEnoughReplicas
from laketail.schemas import SCHEMAS_TOPIC, SchemaRegistry
from laketail.schemas.errors import IncompatibleSchema, SchemaNotFound


def avro(*fields: str) -> dict:
    return {"schema": json.dumps({"type": "record", "name": "R", "fields": [
        {"name": f, "type": "int", "default": 0} for f in fields]})}


def state(reg: SchemaRegistry) -> dict:
    subjects = reg.subjects(deleted=True)
    return {
        "subjects": subjects,
        "versions": {s: [(v.version, v.id, v.deleted) for v in reg.versions_of_subject(s)] for s in subjects},
        "global": reg.compatibility(None),
        "ids": sorted(i for i in range(1, 10) if _known(reg, i)),
        "mode": reg.mode(None),
    }


def _known(reg: SchemaRegistry, schema_id: int) -> bool:
    try:
        reg.schema(schema_id)
    except SchemaNotFound:
        return False
    return True


async def scenario(log: InMemoryLog) -> SchemaRegistry:
    reg = SchemaRegistry(log, 1)
    await reg.register("a", avro("x"))
    await reg.register("a", avro("x", "y"))
    await reg.register("b", avro("q"))  # id 3, hard-deleted below
    await reg.delete_version("a", "1")
    await reg.set_compatibility(None, "FULL")
    await reg.set_mode("c", "READONLY")
    await reg.delete_subject("b")
    await reg.delete_subject("b", permanent=True)
    return reg


def compacted(log: InMemoryLog) -> InMemoryLog:
    """The same log with only the latest record of each key, tombstones dropped."""
    latest: dict[bytes, dict] = {}
    for row in log.rows[(SCHEMAS_TOPIC, 0)]:
        latest.pop(row["key"], None)
        latest[row["key"]] = row
    out = InMemoryLog()
    out.add_topic(SCHEMAS_TOPIC)
    out.rows[(SCHEMAS_TOPIC, 0)] = [dict(r, offset=i) for i, r in enumerate(
        sorted((r for r in latest.values() if r["value"] is not None), key=lambda r: r["offset"]))]
    return out


def test_reload_and_compaction_replay_to_the_live_state() -> None:
    async def run() -> None:
        log = InMemoryLog()
        live = await scenario(log)
        again = SchemaRegistry(log, 1)
        await again.load()
        assert state(again) == state(live)
        assert state(live)["versions"] == {"a": [(1, 1, True), (2, 2, False)]}
        assert state(live)["ids"] == [1, 2]  # b's id 3 went with its last version
        small = SchemaRegistry(compacted(log), 1)
        await small.load()
        assert state(small) == state(live)
        # id 3 is never handed out again, though compaction dropped every record of b
        assert await small.register("d", avro("z", "w")) == await live.register("d", avro("z", "w")) == 4
    asyncio.run(run())


def test_load_skips_and_counts_undecodable_records() -> None:
    async def run() -> None:
        log = InMemoryLog()
        await scenario(log)
        rows = log.rows[(SCHEMAS_TOPIC, 0)]
        junk = [dict(rows[0], key=b"not json", offset=len(rows)),
                dict(rows[0], key=orjson.dumps({"keytype": "SCHEMA", "subject": "q", "version": 1}),
                     value=b"{]", offset=len(rows) + 1)]
        rows.extend(junk)
        reg = SchemaRegistry(log, 1)
        await reg.load()
        assert reg.skipped_records == 2
        assert reg.subjects() == ["a"]
    asyncio.run(run())


def test_a_refused_or_failed_write_changes_nothing() -> None:
    async def run() -> None:
        log = InMemoryLog()
        reg = await scenario(log)
        before, rows = state(reg), len(log.rows[(SCHEMAS_TOPIC, 0)])
        with pytest.raises(IncompatibleSchema):
            await reg.register("a", {"schema": json.dumps({"type": "record", "name": "R", "fields": [
                {"name": "x", "type": "string"}]})})
        log.fail_appends = NotEnoughReplicas("test")
        with pytest.raises(NotEnoughReplicas):
            await reg.register("a", avro("x", "y", "z"))
        assert state(reg) == before
        assert len(log.rows[(SCHEMAS_TOPIC, 0)]) == rows
    asyncio.run(run())
