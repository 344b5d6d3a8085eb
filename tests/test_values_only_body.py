"""A values-only v2 binary body is decoded as one column (``values_only_records``,
``b64_column``): exactly what the general decode (orjson, then one strict
``a2b_base64`` per value) gives, and ``None`` -- the general decode -- whenever the
body or a value is anything else."""

from __future__ import annotations

import base64
import binascii
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laketail.api.encoding import ONE_CALL_FROM, b64_column, b64_joined
from laketail.api.routes.produce import decode_records, values_only_records
from laketail.records import payload_bytes

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def strict(text: bytes) -> bytes | None:
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return None


def encoded(values: list[bytes]) -> list[bytes]:
    return [base64.b64encode(v) for v in values]


# Texts near base64: valid ones, and ones with a character changed, added or removed,
# padding in the wrong place, or characters outside the alphabet.
_near_base64 = st.one_of(
    st.binary(max_size=40).map(base64.b64encode),
    st.text(_ALPHABET + "=", max_size=16).map(str.encode),
    st.tuples(st.binary(min_size=1, max_size=20), st.integers(0, 40), st.sampled_from("=A/ \n\"\\é-_"))
    .map(lambda t: _mutate(base64.b64encode(t[0]), t[1], t[2])),
)


def _mutate(text: bytes, at: int, char: str) -> bytes:
    at %= len(text) + 1
    return text[:at] + char.encode() + text[at + 1:]


# Both ways of decoding: one pybase64 call per text, and one for the joined texts.
_DECODERS = [b64_column, b64_joined]


@pytest.mark.parametrize("decode", _DECODERS)
@settings(max_examples=400)
@given(texts=st.lists(_near_base64, min_size=1, max_size=30))
def test_the_column_is_what_a_strict_decode_of_each_text_gives(decode, texts: list[bytes]) -> None:
    """A column, when there is one, is the strict decode; a text the strict decode refuses
    means no column. (CPython 3.11's strict decode also takes ``=`` after a whole last
    group, ``AAAA=``; the column refuses it, and the general decode takes it.)"""
    one_by_one = [strict(t) for t in texts]
    column = decode(texts)
    if None in one_by_one:
        assert column is None
    elif column is not None:
        assert column.to_pylist() == one_by_one
    else:
        assert any(len(t) % 4 or t.rstrip(b"=") != t and len(t.rstrip(b"=")) % 4 == 0 for t in texts)


@pytest.mark.parametrize("decode", _DECODERS)
@given(values=st.lists(st.binary(max_size=30), min_size=1, max_size=40))
def test_valid_texts_of_any_sizes_decode(decode, values: list[bytes]) -> None:
    column = decode(encoded(values))
    assert column is not None and column.to_pylist() == values
    assert payload_bytes(column) == sum(map(len, values))
    assert payload_bytes(column.slice(1)) == sum(map(len, values[1:]))


@pytest.mark.parametrize("size", [0, 1, 2, 3, 100])
def test_values_of_one_size_take_the_strided_copy_and_stay_whole(size: int) -> None:
    values = [bytes([i % 256]) * size for i in range(50)]
    column = b64_joined(encoded(values))
    assert column is not None and column.to_pylist() == values


def test_many_texts_are_decoded_joined_and_a_bad_one_among_them_is_refused() -> None:
    values = [bytes([i % 256]) * (i % 5) for i in range(ONE_CALL_FROM)]
    texts = encoded(values)
    column = b64_column(texts)
    assert column is not None and column.to_pylist() == values
    texts[ONE_CALL_FROM // 2] = b"AB=C"
    assert b64_column(texts) is None


def _body(values: list[bytes], dumps) -> bytes:
    return dumps({"records": [{"value": base64.b64encode(v).decode()} for v in values]})


def _json_dumps(doc) -> bytes:
    return json.dumps(doc).encode()  # Python's default separators: ", " and ": "


@settings(max_examples=60)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=20), st.sampled_from([orjson.dumps, _json_dumps]),
       st.sampled_from([None, 3]))
def test_a_values_only_body_decodes_as_the_general_path_does(values, dumps, partition) -> None:
    body = _body(values, dumps)
    fast = values_only_records(body, partition)
    general = decode_records(orjson.loads(body), "binary", partition)
    assert fast is not None
    assert fast.values.to_pylist() == general.values
    assert (fast.keys, fast.headers, fast.timestamps) == (None, None, None)
    assert fast.partitions == general.partitions
    assert fast.payload_bytes() == general.payload_bytes()


_value = base64.b64encode(b"v" * 100).decode()
_many = [{"value": _value}] * 200
_slashes = [{"value": base64.b64encode(b"\xff" * 99).decode()}] * 200  # "////..."


@pytest.mark.parametrize("body", [
    orjson.dumps({"records": _many + [{"value": _value, "key": _value}]}),  # a key
    orjson.dumps({"records": _many + [{"value": None}]}),  # a null value (tombstone)
    orjson.dumps({"records": _many + [{"value": _value, "partition": 1}]}),
    orjson.dumps({"records": _many}) + b"\n",  # anything after the document
    orjson.dumps({"records": _slashes}).replace(b"/", b"\\/"),  # an escaped slash: valid JSON, not plain
    orjson.dumps({"records": _many + [{"value": "AAA"}]}),  # unpadded (general: padded, accepted)
    orjson.dumps({"records": _many + [{"value": "AA=A"}]}),  # padding inside
    orjson.dumps({"records": _many + [{"value": "A A="}]}),
    orjson.dumps({"records": _many + [{"value": "AAAA="}]}),  # excess padding (general: accepted)
    orjson.dumps({"records": []}),
    b'{"records":[{"value":"}]}',  # head and tail overlapping: not JSON
    b'{"records": [{"value": "}]}',
], ids=["key", "null", "partition", "trailing", "escaped", "unpadded", "inner-pad", "space", "excess-pad", "empty",
        "overlap", "overlap-spaced"])
def test_any_other_body_goes_to_the_general_decode(body: bytes) -> None:
    assert values_only_records(body, None) is None


def test_an_empty_value_is_a_record() -> None:
    records = values_only_records(b'{"records":[{"value":""}]}', None)
    assert records is not None and records.values.to_pylist() == [b""]
