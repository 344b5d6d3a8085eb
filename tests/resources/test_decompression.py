"""Decompression bombs: a compressed Arrow IPC body is sized by what it declares
decoded, before pyarrow decodes it (issue 14, section 3)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from integration.support import ipc

from laketail.ipc_bounds import ROW_COST, IpcTooLarge, decoded_size

ARROW = "application/vnd.apache.arrow.stream"




def bomb(records: int = 150, size: int = 1_000_000) -> bytes:
    """A few KB of zstd that decode to ``records * size`` bytes of zeros."""
    return ipc(pa.table({"value": pa.array([b"\0" * size] * records, pa.binary())}), "zstd")


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_declared_size_is_the_decoded_size_whatever_the_codec(compression):
    table = pa.table({"value": pa.array([b"\0" * 10_000] * 50, pa.binary())})
    declared = decoded_size(ipc(table, compression), limit=10**9)
    # the values, their int32 offsets, and ROW_COST per row of the one column
    assert declared >= 50 * 10_000 + 51 * 4
    assert declared <= table.nbytes + 64 * 3 + ROW_COST * 50


def test_a_bomb_is_refused_from_its_metadata():
    body = bomb()
    assert len(body) < 20_000
    with pytest.raises(IpcTooLarge) as caught:
        decoded_size(body, limit=100 * 1024 * 1024)
    assert caught.value.declared > 100 * 1024 * 1024


def test_columns_without_buffers_still_count_per_row():
    body = ipc(pa.table({"value": pa.nulls(1_000_000)}))
    assert len(body) < 1000
    with pytest.raises(IpcTooLarge):
        decoded_size(body, limit=1_000_000)


def test_a_bomb_is_refused_with_message_too_large_and_nothing_written(broker, make_topic):
    topic = make_topic(partitions=1)
    rest = broker.rest
    resp = rest.http.post(f"/v1/topics/{topic}/records", content=bomb(),
                          headers={"Content-Type": ARROW})
    assert resp.status_code == 413, resp.text
    assert resp.json()["message"].startswith("MESSAGE_TOO_LARGE")
    assert rest.offsets(topic, 0) == (0, 0)


def test_dictionary_columns_are_refused_before_they_expand(broker, make_topic):
    topic = make_topic(partitions=1)
    big = pa.DictionaryArray.from_arrays(pa.array([0] * 200, pa.int8()), pa.array([b"\0" * 1_000_000]))
    resp = broker.rest.http.post(f"/v1/topics/{topic}/records",
                                 content=ipc(pa.table({"value": big}), "zstd"),
                                 headers={"Content-Type": ARROW})
    assert resp.status_code == 422, resp.text
    assert resp.json()["message"].startswith("INVALID_RECORD")
    assert broker.rest.offsets(topic, 0) == (0, 0)
