"""The source's and sink's options: Kafka's names, defaults and refusals."""

from __future__ import annotations

import pytest

from laketail.errors import InvalidConfig
from laketail.spark.options import EARLIEST, LATEST, SinkOptions, SourceOptions, checkpoint_sink_id

SERVERS = {"laketail.servers": "127.0.0.1:8082, http://b:8082/"}


def parse(streaming: bool = False, **options: str) -> SourceOptions:
    return SourceOptions.parse({**SERVERS, **options}, streaming=streaming)


def test_defaults_follow_the_kafka_source() -> None:
    batch = parse(subscribe="a,b")
    assert batch.servers == ("http://127.0.0.1:8082", "http://b:8082")
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting.default == EARLIEST and batch.ending.default == LATEST
    assert batch.isolation == "read_committed" and batch.fail_on_data_loss and not batch.include_headers
    assert parse(streaming=True, subscribe="a").starting.default == LATEST


def test_option_names_are_case_insensitive() -> None:
    opts = parse(SUBSCRIBE="t", INCLUDEHEADERS="true", FailOnDataLoss="false", groupid="g")
    assert opts.include_headers and not opts.fail_on_data_loss and opts.group_id == "g"


def test_offsets_json_per_partition_with_earliest_and_latest() -> None:
    opts = parse(subscribe="t", startingOffsets='{"t": {"0": 23, "1": -2}}', endingOffsets='{"t": {"0": 30, "1": -1}}')
    assert opts.starting.for_partition(("t", 0)) == ("offset", 23)
    assert opts.starting.for_partition(("t", 1)) == ("offset", EARLIEST)
    assert opts.starting.for_partition(("t", 7)) == ("offset", EARLIEST)  # not named: earliest
    assert opts.ending.for_partition(("t", 1)) == ("offset", LATEST)


def test_timestamps_win_over_offsets() -> None:
    opts = parse(subscribe="t", startingOffsets="earliest", startingTimestamp="1000",
                 startingOffsetsByTimestamp='{"t": {"1": 5000}}')
    assert opts.starting.for_partition(("t", 0)) == ("timestamp", 1000)
    assert opts.starting.for_partition(("t", 1)) == ("timestamp", 5000)


def test_assign_and_pattern() -> None:
    assign = parse(assign='{"t": [1, 0, 1]}').subscription
    assert assign.assignment == {"t": (0, 1)} and assign.matches("t") and not assign.matches("u")
    pattern = parse(subscribePattern="orders-.*").subscription
    assert pattern.matches("orders-eu") and not pattern.matches("x-orders-eu")


@pytest.mark.parametrize("options, words", [
    ({}, "exactly one of"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of"),
    ({"assign": '{"a": 0}'}, "assign"),
    ({"subscribePattern": "("}, "regular expression"),
    ({"subscribe": "a", "startingOffsets": "{"}, "not valid JSON"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "streaming"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "earliest"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 9}}', "endingOffsets": '{"a": {"0": 3}}'}, "after"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "positive"),
    ({"subscribe": "a", "isolation.level": "read_dirty"}, "isolation.level"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
])
def test_bad_options_are_refused_with_a_reason(options: dict, words: str) -> None:
    with pytest.raises(InvalidConfig, match=words):
        parse(**options)


def test_servers_are_required() -> None:
    with pytest.raises(InvalidConfig, match="laketail.servers"):
        SourceOptions.parse({"subscribe": "a"}, streaming=False)
    with pytest.raises(InvalidConfig, match="laketail.servers"):
        SinkOptions.parse({"topic": "a"})


def test_streaming_queries_have_no_end() -> None:
    with pytest.raises(InvalidConfig, match="batch"):
        parse(streaming=True, subscribe="a", endingOffsets="latest")


def test_sink_ids_come_from_the_option_or_the_checkpoint() -> None:
    assert SinkOptions.parse({**SERVERS, "sinkId": "s", "checkpointLocation": "/c"}).sink_id == "s"
    by_checkpoint = SinkOptions.parse({**SERVERS, "checkpointLocation": "/ck/q1/"})
    assert by_checkpoint.sink_id == checkpoint_sink_id("/ck/q1") != checkpoint_sink_id("/ck/q2")
    plain = SinkOptions.parse({**SERVERS, "topic": "t", "batchId": "7"})
    assert plain.sink_id is None and plain.batch_id == 7 and plain.topic == "t"
    assert plain.transaction_timeout_ms == 900_000


@pytest.mark.parametrize("spelling", [
    "/ck/q1", "/ck/q1/", "file:/ck/q1", "file:///ck/q1", "file:///ck/q1/", "file://localhost/ck/q1", "/ck/./q1",
])
def test_every_spelling_of_a_checkpoint_names_one_sink(spelling: str) -> None:
    """Issue 35: the sink id was a hash of the location's spelling, so a query restarted
    with ``file:/x`` instead of ``/x`` got a new sink id and could write a batch twice.
    A plain path keeps the id it always had."""
    assert checkpoint_sink_id(spelling) == checkpoint_sink_id("/ck/q1") == "spark-checkpoint-81f331b1c62c5dc8"
    assert checkpoint_sink_id("s3a://bucket/ck/q1/") == checkpoint_sink_id("s3a://bucket/ck/q1")
    assert checkpoint_sink_id("s3a://bucket/ck/q1") != checkpoint_sink_id("/ck/q1")


def test_the_retry_budget_is_default_api_timeout_ms() -> None:
    assert parse(subscribe="t").api_timeout_ms == 60_000
    assert parse(subscribe="t", **{"default.api.timeout.ms": "5000"}).api_timeout_ms == 5000
    assert SinkOptions.parse({**SERVERS, "default.api.timeout.ms": "7000"}).api_timeout_ms == 7000
    with pytest.raises(InvalidConfig, match="default.api.timeout.ms"):
        parse(subscribe="t", **{"default.api.timeout.ms": "-1"})
