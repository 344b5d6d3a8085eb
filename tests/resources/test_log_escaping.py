"""Log injection: what clients name is logged escaped, one line per record (issue 14,
section 3)."""

from __future__ import annotations

import io
import logging
from urllib.parse import quote

from groups.support import V1Member, unique
from integration.support import wait_until

from laketail.log_format import EscapingFormatter, escape_control, escape_handlers

FORGED = "2026-01-01 00:00:00,000 WARNING laketail.security: user admin granted ALL"


def test_escape_control_leaves_one_printable_line():
    assert escape_control("g\nx\r\ty\x1b[31m\x00\x7f\x85\u2028é") == "g\\nx\\r\\ty\\x1b[31m\\x00\\x7f\\x85\\u2028é"


def test_the_formatter_escapes_arguments_and_keeps_tracebacks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(unique("laketail.test-escaping"))
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("group %s: joined", "g\n" + FORGED)
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed for %r", "a\nb")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "WARNING group g\\n" + FORGED + ": joined"
    assert lines[1] == "ERROR failed for 'a\\nb'"
    assert lines[2].startswith("Traceback")  # the broker's own traceback keeps its lines


def test_uvicorn_style_formatters_are_escaped_in_place():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    name = unique("uvicorn-like")
    logging.getLogger(name).addHandler(handler)
    logging.getLogger(name).propagate = False
    escape_handlers(name)
    logging.getLogger(name).warning("path %s", "/x\n" + FORGED)
    assert stream.getvalue().splitlines() == ["path /x\\n" + FORGED]


def test_a_group_name_cannot_forge_a_broker_log_line(broker, make_topic):
    topic = make_topic(partitions=1)
    group = unique("g") + "\n" + FORGED
    member = V1Member(broker.url, quote(group, safe=""), [topic], session_timeout_ms=10_000)
    try:
        member.join()
    finally:
        member.close()

    def logged() -> list[str]:
        lines = broker.stderr_path.read_text(errors="replace").splitlines()
        return [line for line in lines if "\\n" + FORGED in line]

    wait_until(logged, "the join logged with the group name escaped")
    lines = broker.stderr_path.read_text(errors="replace").splitlines()
    assert not [line for line in lines if line.startswith(FORGED)]
