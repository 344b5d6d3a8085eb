"""Helpers for the jobs' tests: topics whose table is the only copy, produce rounds
that each become one table file per partition, the table's files, running a job."""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from integration.support import TIER_DEADLINE_S, decode_binary, wait_until

from laketail.maintenance.table_commit import TableSnapshot

#: Topic configs under which hot segments roll small and go as soon as they are tiered,
#: so fetches below the active segment read the Delta table (what maintenance changes).
TABLE_ONLY = {"segment.bytes": "2048", "local.retention.ms": "0"}


def table_files(broker, topic: str, partitions: int) -> dict[int, list]:
    return TableSnapshot.load(str(broker.data_dir), topic, partitions).files


def produce_rounds(
    broker, topic: str, partitions: int, rounds: int, per_round: int,
    record: Callable[[int, int, int], dict[str, Any]] | None = None,
) -> None:
    """``rounds`` produce requests per partition, each waited into the table before the
    next, so each becomes its own table file. ``record(round, partition, i)`` builds a
    record dict (default: value ``r<round>-p<partition>-<i>``, no key)."""
    record = record or (lambda r, p, i: {"value": f"r{r}-p{p}-{i}".encode()})
    rest = broker.rest
    for r in range(rounds):
        for p in range(partitions):
            resp = rest.produce_binary(topic, [record(r, p, i) for i in range(per_round)], partition=p)
            assert resp.status_code == 200, resp.text
        ends = rest.end_offsets(topic)
        wait_until(
            lambda ends=ends: all(
                files and files[-1].last_offset == ends[p] - 1
                for p, files in ((p, table_files(broker, topic, partitions).get(p)) for p in range(partitions))
            ),
            f"round {r} of {topic} in the table", TIER_DEADLINE_S,
        )
        time.sleep(0.01)  # the next round's timestamps are later


def fetch_all(broker, topic: str, partition: int, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from ``start`` to the high watermark."""
    rest = broker.rest
    end = rest.offsets(topic, partition)[1]
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = start
    while offset < end:
        resp = rest.fetch(topic, partition, offset)
        assert resp.status_code == 200, resp.text
        batch = [decode_binary(e) for e in resp.json()]
        if not batch:
            break
        out += [(e["offset"], e["key"], e["value"]) for e in batch]
        offset = batch[-1]["offset"] + 1
    return out


def run_job(main: Callable[[Sequence[str]], int], *argv: str) -> list[dict]:
    """Run a job's ``main`` in this process; its report lines, parsed."""
    import json

    from laketail.jobs.common import REPORT_PREFIX

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    assert code == 0, out.getvalue()
    return [json.loads(line[len(REPORT_PREFIX):]) for line in out.getvalue().splitlines()
            if line.startswith(REPORT_PREFIX)]


def hot_segments(broker, topic: str, partition: int) -> list[Path]:
    return sorted((broker.data_dir / "logs" / "broker-0" / f"{topic}-{partition}").glob("*.log"))
