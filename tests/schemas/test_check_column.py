"""``validation.check_column`` on Arrow columns as produce batches carry them: every
kind of bad value is refused naming the first bad record (a bad payload before a bad
header, and the other way round), in any chunk and in sliced arrays; good values,
nulls and every schema type pass."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pytest

from laketail.errors import InvalidRecord
from laketail.schemas import wire
from laketail.schemas.validation import check_column

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]})
DOC = json.dumps({"type": "object", "properties": {"id": {"type": "string"}}})


@dataclass
class _Version:
    id: int
    deleted: bool = False


@dataclass
class _Stored:
    schema_type: str
    schema: str
    references: tuple = ()


class _Registry:
    """The two registry reads check_column makes, over fixed versions."""

    def __init__(self, schemas: dict[int, _Stored], deleted: frozenset[int] = frozenset()) -> None:
        self.schemas = schemas
        self.deleted = deleted

    def versions_of_subject(self, subject: str) -> list[_Version]:
        return [_Version(i, i in self.deleted) for i in self.schemas]

    def schema(self, schema_id: int) -> _Stored:
        return self.schemas[schema_id]


REGISTRY = _Registry({1: _Stored("AVRO", ORDER), 2: _Stored("JSON", DOC), 3: _Stored("AVRO", ORDER)},
                     deleted=frozenset({3}))
AVRO = wire.codec("AVRO", ORDER)


def _good(i: int) -> bytes:
    return wire.frame(1, AVRO.encode({"id": f"o-{i}", "amount": float(i)}))


def _check(values: list[bytes | None] | pa.Array | pa.ChunkedArray) -> None:
    column = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values, pa.binary())
    check_column(REGISTRY, "t", column, is_key=False)


def test_good_values_nulls_and_json_schema_pass() -> None:
    _check([_good(0), None, wire.frame(2, b'{"id": "x"}'), _good(1), None])
    _check(pa.array([], pa.binary()))
    _check(pa.array([None, None], pa.binary()))


@pytest.mark.parametrize("bad, reason", [
    (b"raw", "not Confluent's wire format"),
    (b"\x01" + _good(0)[1:], "not Confluent's wire format"),
    (wire.frame(9, b""), "schema id 9 is not a version of subject 't-value'"),
    (wire.frame(3, _good(0)[5:]), "schema id 3 is not a version"),  # a deleted version
    (_good(0)[:-3], "not Avro of its schema"),  # truncated: the double runs past the value
    (_good(0) + b"\x00", "1 bytes after the Avro datum"),
    (wire.frame(2, b"{not json"), "not JSON"),
])
def test_each_bad_value_is_refused_by_its_index(bad: bytes, reason: str) -> None:
    with pytest.raises(InvalidRecord, match=f"record 2: its value fails t's schema validation: .*{reason}"):
        _check([_good(0), None, bad, _good(1)])


def test_the_first_bad_record_is_named_whatever_is_wrong_with_it() -> None:
    with pytest.raises(InvalidRecord, match="record 1: .*bytes after"):
        _check([_good(0), _good(1) + b"xx", b"raw"])
    with pytest.raises(InvalidRecord, match="record 1: .*wire format"):
        _check([_good(0), b"raw", _good(1) + b"xx"])


def test_chunks_and_slices_are_indexed_as_the_column() -> None:
    chunked = pa.chunked_array([pa.array([_good(0), _good(1)], pa.binary()), pa.array([_good(2), b"raw"], pa.binary())])
    with pytest.raises(InvalidRecord, match="record 3: "):
        _check(chunked)
    sliced = pa.array([b"raw", _good(0), _good(1) + b"x", _good(2)], pa.binary()).slice(1, 3)
    with pytest.raises(InvalidRecord, match="record 1: .*bytes after"):
        _check(sliced)
    _check(pa.array([b"raw", _good(0), _good(1)], pa.binary()).slice(1))
    _check(pa.array([_good(0)], pa.large_binary()))
