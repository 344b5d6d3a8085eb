"""Topic subscription patterns, matched in linear time.

Kafka matches a subscription pattern against every topic name with Java's regex
engine, the whole name (``Pattern.matcher(topic).matches()``). Python's ``re``
backtracks: ``(a+)+b`` against a 24-character name takes half a second, and a broker
matches every instance's pattern against every topic ten times a second. laketail
compiles patterns with RE2 (``google-re2``), whose matching time is linear in the
name, and keeps Kafka's full-match semantics.

What Java accepts and RE2 refuses (backreferences ``\\1``, lookaround ``(?=``,
``(?<=``, possessive quantifiers ``a++``, atomic groups ``(?>``) is refused when the
pattern is given, with INVALID_REQUEST; everything else (classes, alternation,
anchors, ``\\d``, ``\\w``, ``(?i)``, counted repetition up to 1000) means the same.

Pure, thread-safe: a compiled :class:`TopicPattern` is immutable.
"""

from __future__ import annotations

import re2

from laketail.errors import InvalidRequest

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the client's error, not a broker log line
_OPTIONS.max_mem = 8 << 20  # bounds the compiled automaton of e.g. ((a{1000}){1000})


class TopicPattern:
    """A compiled subscription pattern; :meth:`fullmatch` is Kafka's ``matches()``."""

    __slots__ = ("source", "_regex")

    def __init__(self, source: str) -> None:
        if not isinstance(source, str):
            raise InvalidRequest("a topic pattern must be a string")
        try:
            self._regex = re2.compile(source, _OPTIONS)
        except re2.error as exc:
            detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise InvalidRequest(
                f"topic pattern {source!r} is not a regular expression laketail can match in linear "
                f"time (no backreferences, lookaround or possessive quantifiers): {detail}"
            ) from None
        self.source = source

    def fullmatch(self, topic: str) -> bool:
        """The whole name matches (Java's ``Matcher.matches()``)."""
        return self._regex.fullmatch(topic) is not None

    def search(self, topic: str) -> bool:
        """Some part of the name matches (librdkafka's ``^regex`` subscriptions)."""
        return self._regex.search(topic) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicPattern) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def __repr__(self) -> str:
        return f"TopicPattern({self.source!r})"
