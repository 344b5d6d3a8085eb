"""Broker-side schema validation: Confluent Server's ``confluent.value.schema.validation``
and ``confluent.key.schema.validation`` topic configs.

With the value's (or key's) validation on, every non-null value (key) of a produce must
be in Confluent's wire format (:mod:`laketail.schemas.wire`) with a schema id that the
topic's subject holds -- TopicNameStrategy, ``<topic>-value`` / ``<topic>-key``, a live
version -- and a payload that reads as that schema's data. Otherwise the whole request
is refused with Kafka's INVALID_RECORD (87; REST 422/42206) naming the first bad
record, and nothing is written. Null keys and values (tombstones) pass.

The check runs in :meth:`laketail.produce_path.ProducePath.produce` before anything
is planned. Where the registry runs (beside the coordinators) it reads the registry's
state; on the other brokers of a cluster it reads a follower's copy of ``__schemas``
(a :class:`~laketail.schemas.SchemaRegistry` loaded from the topic, never written),
loaded on first use and loaded again when a record fails -- a schema registered a
moment ago is then seen -- at most once per ``refresh_interval_ms``, so records that
keep failing do not keep re-reading the topic.

Thread-safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import io
from typing import TYPE_CHECKING, Callable

import fastavro
import numpy as np
import pyarrow as pa

from laketail.errors import InvalidRecord
from laketail.schemas import wire
from laketail.schemas.errors import SchemaRegistryError
from laketail.schemas.registry import SchemaRegistry

if TYPE_CHECKING:
    from laketail.clock import Clock
    from laketail.coordinator.ports import CoordinatorLog


class SchemaValidation:
    """Checks a produce's keys and values (see the module docstring). ``registry`` is the
    broker's; ``registry_here()`` says whether it runs (and is loaded) on this broker;
    ``internal_log`` is where a follower's copy reads ``__schemas``."""

    def __init__(self, registry: SchemaRegistry, registry_here: Callable[[], bool],
                 internal_log: "CoordinatorLog", clock: "Clock", refresh_interval_ms: int = 1000) -> None:
        self.registry = registry
        self.registry_here = registry_here
        self.internal_log = internal_log
        self.clock = clock
        self.refresh_interval_ms = refresh_interval_ms
        self._follower: SchemaRegistry | None = None
        self._loaded_at_ms: int | None = None
        self._refreshing: asyncio.Lock = asyncio.Lock()

    def check_here(self, topic: str, batch: pa.RecordBatch | pa.Table, values: bool, keys: bool) -> bool:
        """:meth:`check` at once where the registry runs (True); False elsewhere, where
        only :meth:`check` can (it may load the follower's copy)."""
        if not self.registry_here():
            return False
        for column, is_key in _columns(batch, values, keys):
            check_column(self.registry, topic, column, is_key)
        return True

    async def check(self, topic: str, batch: pa.RecordBatch | pa.Table, values: bool, keys: bool) -> None:
        """INVALID_RECORD for the first record whose value (``values``) or key (``keys``)
        the topic's subject does not take."""
        columns = _columns(batch, values, keys)
        if not columns or self.check_here(topic, batch, values, keys):
            return
        follower = await self.follower(fresh=False)
        try:
            for column, is_key in columns:
                check_column(follower, topic, column, is_key)
        except InvalidRecord:
            refreshed = await self.follower(fresh=True)
            if refreshed is follower:
                raise
            for column, is_key in columns:
                check_column(refreshed, topic, column, is_key)

    async def follower(self, fresh: bool, force: bool = False) -> SchemaRegistry:
        """The follower's copy: loaded when there is none, or (``fresh``) when the last
        load is older than ``refresh_interval_ms``, or (``force``) now -- after this
        broker had the registry write something."""
        async with self._refreshing:
            now = self.clock.now_ms()
            stale = self._loaded_at_ms is None or now - self._loaded_at_ms >= self.refresh_interval_ms
            if self._follower is None or force or (fresh and stale):
                copy = SchemaRegistry(self.internal_log)
                await copy.load()
                self._follower, self._loaded_at_ms = copy, now
            return self._follower


    async def value_versions(self, topic: str) -> list[dict]:
        """:meth:`subject_versions` of ``<topic>-value``."""
        return await self.subject_versions(f"{topic}-value")

    async def subject_versions(self, subject: str) -> list[dict]:
        """The live versions of ``subject``, oldest first, as the tier pass of a topic
        with typed columns takes them (``storage/tierer.py``; ``<topic>-value`` and
        ``<topic>-key``): ``id``, ``schema_type``, ``schema`` and the texts of its
        ``references``. The follower's copy, where the registry does not run, is read
        again at most once per ``refresh_interval_ms``."""
        registry = self.registry if self.registry_here() else await self.follower(fresh=True)
        out = []
        for v in registry.versions_of_subject(subject):
            if v.deleted:
                continue
            stored = registry.schema(v.id)
            refs = [registry.schema(registry.version(s, str(n), deleted=True).id).schema
                    for _, s, n in stored.references]
            out.append({"id": v.id, "schema_type": stored.schema_type, "schema": stored.schema, "references": refs})
        return out


def _columns(batch: pa.RecordBatch | pa.Table, values: bool, keys: bool) -> list[tuple[pa.Array, bool]]:
    names = batch.schema.names
    return [(batch.column(n), n == "key") for n, on in (("value", values), ("key", keys)) if on and n in names]


def check_column(registry: SchemaRegistry, topic: str, column: pa.Array | pa.ChunkedArray, is_key: bool) -> None:
    """INVALID_RECORD for the first value of ``column`` that ``<topic>-value`` (``-key``)
    does not take, as ``registry`` knows it.

    One pass per chunk, without a Python object per value until the payload: the wire
    headers (magic byte, schema id) of every value are read at once from the chunk's
    buffers (numpy), then each payload is read where it lies in the chunk's data -- an
    Avro payload by fastavro from one stream over the whole buffer (no copy, no reader
    object per value), the others by their codec's ``check``."""
    subject = f"{topic}-{'key' if is_key else 'value'}"
    what = "key" if is_key else "value"
    live = {v.id for v in registry.versions_of_subject(subject) if not v.deleted}
    codecs: dict[int, wire.Codec] = {}
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    base = 0
    for chunk in chunks:
        try:
            _check_chunk(registry, subject, live, codecs, chunk)
        except _BadRecord as bad:
            raise InvalidRecord(f"record {base + bad.index}: its {what} fails {topic}'s schema validation: "
                                f"{bad.reason}") from bad.reason
        base += len(chunk)


class _BadRecord(Exception):
    def __init__(self, index: int, reason: wire.NotDecodable) -> None:
        super().__init__(str(reason))
        self.index = index
        self.reason = reason


def _check_chunk(registry: SchemaRegistry, subject: str, live: set[int], codecs: dict[int, wire.Codec],
                 chunk: pa.Array) -> None:
    """:class:`_BadRecord` for the first value of ``chunk`` the subject does not take."""
    if chunk.type != pa.binary():
        chunk = chunk.cast(pa.binary())
    n = len(chunk)
    if n == 0 or chunk.null_count == n:
        return
    _validity, offsets_buffer, data_buffer = chunk.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[chunk.offset:chunk.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    present = chunk.is_valid().to_numpy(zero_copy_only=False)
    framed = present & (ends - starts >= 5)
    at = np.where(framed, starts, 0)
    framed &= data[at] == wire.MAGIC if len(data) else False
    ids = np.zeros(n, np.int64)
    if framed.any():
        b = [data[np.where(framed, starts + k, 0)].astype(np.int64) for k in range(1, 5)]
        ids = ((b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]).astype(np.int32).astype(np.int64)
    known = framed & np.isin(ids, list(live))
    bad_header = np.flatnonzero(present & ~known)
    stop = int(bad_header[0]) if len(bad_header) else n  # payloads before the first bad header are read first
    stream: io.BytesIO | None = None
    starts_list, ends_list, ids_list = starts.tolist(), ends.tolist(), ids.tolist()
    for i in np.flatnonzero(known[:stop]).tolist():
        schema_id = ids_list[i]
        codec = codecs.get(schema_id)
        try:
            if codec is None:
                codec = codecs[schema_id] = _codec(registry, schema_id)
            if isinstance(codec, wire.AvroCodec):
                if stream is None:
                    stream = io.BytesIO(memoryview(data_buffer))  # type: ignore[arg-type]
                _avro_at(stream, codec, starts_list[i] + 5, ends_list[i])
            else:
                codec.check(data_buffer[starts_list[i] + 5:ends_list[i]].to_pybytes())
        except wire.NotDecodable as exc:
            raise _BadRecord(i, exc) from exc
    if stop < n:
        i = stop
        if not framed[i]:
            reason = wire.NotDecodable("no magic byte 0 and schema id: not Confluent's wire format")
        else:
            reason = wire.NotDecodable(f"schema id {ids_list[i]} is not a version of subject '{subject}'")
        raise _BadRecord(i, reason)


def _avro_at(stream: io.BytesIO, codec: wire.AvroCodec, start: int, end: int) -> None:
    """The Avro payload ``[start, end)`` of ``stream`` reads as the codec's data, to its
    last byte (fastavro reads from where the stream stands)."""
    stream.seek(start)
    try:
        fastavro.schemaless_reader(stream, codec.parsed, None)
    except Exception as exc:
        raise wire.NotDecodable(f"not Avro of its schema: {type(exc).__name__}: {exc}") from exc
    if stream.tell() > end:
        raise wire.NotDecodable("not Avro of its schema: the datum runs past the value's end")
    if stream.tell() != end:
        raise wire.NotDecodable(f"{end - stream.tell()} bytes after the Avro datum")


def _codec(registry: SchemaRegistry, schema_id: int) -> wire.Codec:
    try:
        stored = registry.schema(schema_id)
        refs = tuple(registry.schema(registry.version(s, str(n), deleted=True).id).schema
                     for _, s, n in stored.references)
    except SchemaRegistryError as exc:
        raise wire.NotDecodable(f"schema id {schema_id}: {exc.message}") from exc
    return wire.codec(stored.schema_type, stored.schema, refs)
