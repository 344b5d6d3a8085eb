"""One page of a listing: ``?limit=&offset=`` over an already ordered sequence.

Listings the console shows (topics, partitions, groups, lags, transactions) can hold
thousands of rows; every console endpoint answers one bounded page plus the total, so
the browser never asks for more than it draws. :data:`MAX_LIMIT` bounds a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

from laketail.errors import InvalidRequest

T = TypeVar("T")

#: Rows per page unless the request says otherwise.
DEFAULT_LIMIT = 100
#: The most rows one page may hold.
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Page(Generic[T]):
    rows: list[T]
    total: int
    limit: int
    offset: int

    def meta(self) -> dict:
        return {"total": self.total, "limit": self.limit, "offset": self.offset}


def check_window(limit: int, offset: int) -> None:
    """INVALID_REQUEST for a page outside ``1 <= limit <= MAX_LIMIT``, ``offset >= 0``."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if offset < 0:
        raise InvalidRequest(f"offset must not be negative, got {offset}")


def page(items: Sequence[T], limit: int = DEFAULT_LIMIT, offset: int = 0) -> Page[T]:
    """Rows ``offset .. offset + limit`` of ``items`` (already filtered and ordered)."""
    check_window(limit, offset)
    return Page(list(items[offset:offset + limit]), len(items), limit, offset)
