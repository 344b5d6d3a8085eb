"""Log lines nobody can forge: control characters in a message are escaped.

Group names, topic names, instance and transactional ids reach log messages from
clients; a newline in a group name would otherwise start a log line of the client's
choosing, and an escape sequence would drive the operator's terminal. Rather than
trusting every call site to escape its arguments, the broker's handlers format with
:class:`EscapingFormatter`, which escapes the formatted message as a whole: no call
site can bypass it.

Escaped: C0 controls (U+0000-U+001F, newline and tab included), DEL, C1 controls
(U+0080-U+009F) and the Unicode line and paragraph separators, each as ``\\n``,
``\\r``, ``\\t`` or ``\\xNN`` / ``\\uNNNN``. A traceback appended after the message
keeps its own lines (it is the broker's, not a client's).

Thread-safe: the formatter keeps no state between records.
"""

from __future__ import annotations

import logging
import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    """``text`` with every control character escaped (see the module docstring)."""
    return _CONTROL.sub(_escape_one, text)


class EscapingFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose message part is always one line."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = escape_control(record.message)
        return super().formatMessage(record)


def escape_handlers(*logger_names: str) -> None:
    """Give every handler of these loggers an escaping copy of its formatter (uvicorn
    sets up its own handlers and formatters; this keeps their format, escaped)."""
    for name in logger_names:
        for handler in logging.getLogger(name).handlers:
            current = handler.formatter
            if current is None or isinstance(current, EscapingFormatter):
                if current is None:
                    handler.setFormatter(EscapingFormatter())
                continue
            handler.setFormatter(_escaping(current))


def _escaping(formatter: logging.Formatter) -> logging.Formatter:
    """The same formatter object, its message escaped (its class may be uvicorn's)."""
    original = formatter.formatMessage

    def format_message(record: logging.LogRecord) -> str:
        record.message = escape_control(record.message)
        return original(record)

    formatter.formatMessage = format_message  # type: ignore[method-assign]
    return formatter

