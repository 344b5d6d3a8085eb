"""Broker-side schema validation: Confluent Server's ``confluent.value.schema.validation``
and ``confluent.key.schema.validation`` topic configs.

With the value's (or key's) validation on, every non-null value (key) of a produce must
be in Confluent's wire format (:mod:`laketail.schemas.wire`) with a schema id that the
topic's subject holds -- TopicNameStrategy, ``<topic>-value`` / ``<topic>-key``, a live
version -- and a payload that reads as that schema's data. Otherwise the whole request
is refused with Kafka's INVALID_RECORD (87; REST 422/42206) naming the first bad
record, and nothing is written. Null keys and values (tombstones) pass.

The check runs in :meth:`laketail.produce_path.ProducePath.produce` before anything
is planned, against this broker's registry (:class:`~laketail.schemas.SchemaRegistry`,
loaded beside the coordinators). Limitation: in a multi-broker cluster only the
controller holds the registry's state, so a validating topic's produce is checked
there only; other brokers refuse it with NOT_COORDINATOR (retriable) rather than let
an unchecked record in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from laketail.errors import InvalidRecord
from laketail.schemas import wire
from laketail.schemas.errors import SchemaRegistryError

if TYPE_CHECKING:
    from laketail.schemas.registry import SchemaRegistry


class SchemaValidation:
    """Checks a produce's keys and values (see the module docstring). Event loop only."""

    def __init__(self, registry: "SchemaRegistry") -> None:
        self.registry = registry

    def check(self, topic: str, column: pa.Array | pa.ChunkedArray, is_key: bool) -> None:
        """INVALID_RECORD for the first record of ``column`` the subject does not take."""
        subject = f"{topic}-{'key' if is_key else 'value'}"
        what = "key" if is_key else "value"
        live = {v.id for v in self.registry.versions_of_subject(subject) if not v.deleted}
        codecs: dict[int, wire.Codec] = {}
        for i, data in enumerate(column.to_pylist()):
            if data is None:
                continue
            try:
                schema_id = wire.schema_id_of(data)
                if schema_id not in live:
                    raise wire.NotDecodable(f"schema id {schema_id} is not a version of subject '{subject}'")
                codec = codecs.get(schema_id)
                if codec is None:
                    codec = codecs[schema_id] = self._codec(schema_id)
                codec.check(data[5:])
            except wire.NotDecodable as exc:
                raise InvalidRecord(f"record {i}: its {what} fails {topic}'s schema validation: {exc}") from exc

    def _codec(self, schema_id: int) -> wire.Codec:
        registry = self.registry
        try:
            stored = registry.schema(schema_id)
            refs = tuple(registry.schema(registry.version(s, str(n), deleted=True).id).schema
                         for _, s, n in stored.references)
        except SchemaRegistryError as exc:
            raise wire.NotDecodable(f"schema id {schema_id}: {exc.message}") from exc
        return wire.codec(stored.schema_type, stored.schema, refs)
