"""The keys of ``__transaction_state``: typed, so no client-chosen name can collide with
the coordinator's own state, and the previous bare-string format still reads."""

from __future__ import annotations

import pytest

from laketail.coordinator.transactions import decode_key, encode_key


@pytest.mark.parametrize("name", ["__producer_id_block", "__sink:evil", "__sink:s:0:0123456789ab",
                                  '{"sink": "x"}', '{"producer_id_block": 1}', "plain"])
def test_a_transactional_id_never_reads_back_as_another_kind_of_state(name: str) -> None:
    assert decode_key(encode_key("txn", name)) == ("txn", name)
    assert decode_key(encode_key("sink", name)) == ("sink", name)
    assert decode_key(encode_key("producer_id_block")) == ("producer_id_block", "")


def test_keys_of_the_previous_format_still_read() -> None:
    assert decode_key(b"__producer_id_block") == ("producer_id_block", "")
    assert decode_key(b"__sink:spark-sink") == ("sink", "spark-sink")
    assert decode_key(b"__sink:spark-sink:0:0123456789ab") == ("txn", "__sink:spark-sink:0:0123456789ab")
    assert decode_key(b"orders-writer") == ("txn", "orders-writer")
