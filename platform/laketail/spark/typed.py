"""Typed columns through ``format("laketail")``: ``value_struct`` and ``key_struct`` in the
source's rows and in the sink's input (issue 42; docs/schema-registry.md).

Source: a read whose subscription names its topics (``subscribe`` or ``assign``) has a
``value_struct`` column, after the Kafka source's columns, when the subscribed topics
with typed columns (``laketail.table.mode``) all have one type for it in their Delta
tables (:func:`value_type_of`; the latest table version's, so the widest the subject has
reached). Topics without typed columns give null there; topics of different types, or a
``subscribePattern``, give no column. Each task (:class:`TypedRows`) reads the column
from the table's files, fitted to the query's type by field name
(:func:`laketail.schemas.columns.conform`), and decodes the untiered tail it fetches
through the gateway as the tierer will (the subject's live versions, each value by the
version its prefix names, :func:`laketail.schemas.columns.decode_versions`, or with
``value_schema_latest`` each value as it is by the latest version). Files
tiered before the topic had typed columns hold no ``value_struct``: null. ``key_struct``
(``laketail.table.key.mode``) the same way, after ``value_struct``, decoded from the raw
``key`` by ``<topic>-key``.

Sink: an input with a ``value_struct`` column and no ``value`` column has each row's
value encoded from it with the latest version of the target topic's ``<topic>-value``
subject, in Confluent's wire format (:func:`encode_values`); giving both is refused
(which bytes would be meant is not clear). ``key_struct`` and ``key`` the same way, by
``<topic>-key``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from laketail.errors import InvalidRecord
from laketail.records import TYPED_COLUMNS, TYPED_VALUE_COLUMN
from laketail.spark.gateway import SparkGateway, seg

log = logging.getLogger(__name__)


def value_type_of(types: dict[str, pa.DataType | None], column: str = TYPED_VALUE_COLUMN) -> pa.DataType | None:
    """The ``column`` (``value_struct``, ``key_struct``) type a read of topics with these
    table types (None: no such typed column) exposes: the one type the typed topics
    share; None when no topic is typed or their types differ (then logged)."""
    typed = {t: v for t, v in types.items() if v is not None}
    distinct = {str(v) for v in typed.values()}
    if len(distinct) > 1:
        log.warning("topics %s hold %s of different types; format('laketail') leaves the column out",
                    sorted(typed), column)
        return None
    return next(iter(typed.values()), None)


def subject_versions(gateway: SparkGateway, subject: str) -> list[dict[str, Any]]:
    """The live versions of ``subject``, oldest first, each ``id``, ``schema_type``,
    ``schema`` and the texts of its ``references`` (what the tier pass takes); [] for a
    subject the registry does not hold."""
    from laketail.errors import LaketailError

    try:
        numbers = gateway.get_json(f"/subjects/{seg(subject)}/versions")
    except LaketailError as exc:
        if exc.http_status == 404:
            return []
        raise
    return [_version(gateway, subject, n) for n in sorted(numbers)]


def _version(gateway: SparkGateway, subject: str, version: int | str) -> dict[str, Any]:
    doc = gateway.get_json(f"/subjects/{seg(subject)}/versions/{version}")
    refs = [gateway.get_json(f"/subjects/{seg(r['subject'])}/versions/{r['version']}")["schema"]
            for r in doc.get("references") or []]
    return {"id": doc["id"], "schema_type": doc.get("schemaType", "AVRO"), "schema": doc["schema"],
            "references": refs}


@dataclass
class TypedRows:
    """Adds the typed ``column`` (``value_struct`` or ``key_struct``) of ``value_type`` to
    one task's rows (see the module docstring); the subject's versions are asked for once,
    at the first fetched tail."""

    value_type: pa.DataType
    topic: str
    column: str = TYPED_VALUE_COLUMN
    _decoder: Any = field(default=None, repr=False)

    def from_table(self, rows: pa.Table) -> pa.ChunkedArray | pa.Array:
        from laketail.schemas.columns import conform

        if self.column not in rows.column_names:
            return pa.nulls(rows.num_rows, self.value_type)
        return conform(rows.column(self.column), self.value_type)

    def from_fetch(self, rows: pa.Table, gateway: SparkGateway) -> pa.Array | pa.ChunkedArray:
        from laketail.schemas.columns import conform

        source = TYPED_COLUMNS[self.column]  # "value" or "key"
        if self._decoder is None:
            versions = subject_versions(gateway, f"{self.topic}-{source}")
            configs = gateway.get_json(f"/topics/{seg(self.topic)}").get("configs") or {}
            mode = configs.get("laketail.table.mode" if source == "value" else "laketail.table.key.mode") or ""
            self._decoder = _Decoder(versions, mode.endswith("_latest")) if versions else False
        if self._decoder is False:
            return pa.nulls(rows.num_rows, self.value_type)
        column, _undecoded = self._decoder(rows.column(source))
        return conform(column, self.value_type)


class _Decoder:
    """As the tier pass decodes (``storage/tierer._TypedValue``): by the version each
    value's prefix names, or (``value_schema_latest``) each value as it is by the latest."""

    def __init__(self, versions: list[dict[str, Any]], latest_only: bool) -> None:
        from laketail.schemas import wire

        self.codecs = {v["id"]: wire.codec(v["schema_type"], v["schema"], tuple(v["references"])) for v in versions}
        self.latest = versions[-1]["id"]
        self.latest_only = latest_only

    def __call__(self, values: pa.ChunkedArray) -> tuple[pa.Array, int]:
        from laketail.schemas.columns import decode_unframed, decode_versions

        if self.latest_only:
            return decode_unframed(values, self.codecs[self.latest])
        return decode_versions(values, self.codecs, self.latest)


def encode_values(table: pa.Table, gateway: SparkGateway, cache: dict[str, tuple[int, Any]],
                  column: str = TYPED_VALUE_COLUMN) -> pa.Table:
    """A sink input with ``column`` (``value_struct``; ``key_struct``) and no ``value``
    (``key``): that raw column encoded from it by the latest version of each row's topic's
    ``<topic>-value`` (``-key``; ``cache``: subject -> (schema id, codec), one task's).
    INVALID_RECORD when the topic's subject has no version or a value does not fit the
    schema."""
    from laketail.schemas import wire
    from laketail.schemas.columns import encode_column

    source = TYPED_COLUMNS[column]
    if source in table.column_names:
        raise InvalidRecord(f"the laketail sink takes '{source}' or '{column}', not both: drop one")
    topics = table.column("topic").to_pylist()
    structs = table.column(column)
    values: list[bytes | None] = [None] * table.num_rows
    for topic in sorted(set(topics)):
        subject = f"{topic}-{source}"
        if subject not in cache:
            versions = subject_versions(gateway, subject)
            if not versions:
                raise InvalidRecord(f"the laketail sink got {column} for topic '{topic}', whose subject "
                                    f"'{subject}' has no schema to encode it with")
            latest = versions[-1]
            cache[subject] = (latest["id"], wire.codec(latest["schema_type"], latest["schema"],
                                                       tuple(latest["references"])))
        schema_id, codec = cache[subject]
        rows = [i for i, t in enumerate(topics) if t == topic]
        encoded = encode_column(structs.take(pa.array(rows, pa.int64())), schema_id, codec)
        for i, data in zip(rows, encoded):
            values[i] = data
    out = table.drop_columns([column])
    return out.append_column(source, pa.array(values, pa.binary()))


__all__ = ["TypedRows", "encode_values", "subject_versions", "value_type_of"]
