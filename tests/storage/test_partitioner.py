"""Kafka's default partitioner, checked against Kafka's own test vectors."""

import pytest

from laketail.partitioner import StickyPartitioner, murmur2, partition_for_key


@pytest.mark.parametrize(
    "key,expected",
    [(b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
     (b"a-little-bit-longer-string", -1486304829), (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
     (b"abc", 479470107)],
)
def test_murmur2_matches_kafka_utils_test(key, expected):
    assert murmur2(key) == expected


def test_partition_is_positive_murmur_modulo():
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert all(0 <= partition_for_key(bytes([i]), 5) < 5 for i in range(256))


def test_sticky_partitioner_moves_on_between_batches():
    sticky = StickyPartitioner()
    picks = [sticky.next_batch(4) for _ in range(50)]
    assert all(0 <= p < 4 for p in picks)
    assert all(a != b for a, b in zip(picks, picks[1:]))
    assert StickyPartitioner().next_batch(1) == 0
