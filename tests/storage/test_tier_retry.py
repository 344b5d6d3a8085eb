"""The tierer's backoff after failed passes, and how it names what failed."""

from __future__ import annotations

import pytest

from laketail.storage.tierer import RETRY_BACKOFF_MAX_S, failure_reason, retry_backoff_s


def test_backoff_doubles_from_half_a_second_to_thirty_and_never_undercuts_the_interval() -> None:
    assert [retry_backoff_s(n, 0.1) for n in range(1, 9)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert retry_backoff_s(10_000, 0.1) == RETRY_BACKOFF_MAX_S
    assert retry_backoff_s(1, 5.0) == 5.0  # a topic flushed every 5 s is not tried sooner


@pytest.mark.parametrize("error, reason", [
    ("OSError: Generic S3 error: Client error with status 403 Forbidden: <Error><Code>ExpiredToken</Code>",
     "credentials"),
    ("Generic S3 error: <Code>InvalidAccessKeyId</Code>", "credentials"),
    ("Error performing GET http://s3/b/k in 2.2s, after 10 retries: Server returned non-2xx status code: "
     "503 Service Unavailable: <Code>SlowDown</Code>", "throttled"),
    ("Error performing GET http://127.0.0.1:1/b/k: error sending request for url", "unreachable"),
    ("orders: the table is tiered to {0: 5}, not as planned", "fenced"),
    ("ValueError: something else", "other"),
])
def test_failure_reason_reads_the_stores_answer(error: str, reason: str) -> None:
    assert failure_reason(error) == reason
