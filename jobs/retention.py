"""Retention job: delete topics' oldest table files by ``retention.ms`` / ``retention.bytes``.

    spark-submit jobs/retention.py --data ROOT [--servers URLS] [--topic T ...]
    laketail jobs run retention --data ROOT ...

Per ``cleanup.policy=delete`` topic (:func:`laketail.maintenance.runs.run_retention`):
plan from one snapshot of its Delta table (whole files, oldest first, never one that
holds records at or above the tiered offset), then commit the ``remove`` actions with
each partition's new log start offset (the Delta transaction ``laketail.logstart.<p>``)
in one delta-rs commit. Brokers follow the table and move their log start offsets:
a consumer below it gets OFFSET_OUT_OF_RANGE and its ``auto.offset.reset``. Removed
files stay on disk for ``--vacuum-after-ms`` (readers that listed them a moment ago
still find them), then vacuum deletes them.

Retention only touches the Delta log, so this job needs no SparkSession: it runs in
the driver whether spark-submit or ``laketail jobs run`` started it.
"""

from __future__ import annotations

import sys
from typing import Sequence

from laketail.jobs.common import base_parser, fail, parse_args, plan_time_ms, report
from laketail.maintenance.runs import DEFAULT_VACUUM_AFTER_MS, run_retention
from laketail.maintenance.table_commit import MaintenanceConflict
from laketail.maintenance.topics import maintained_topics


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("retention", "Delete the oldest table files past retention.ms / retention.bytes.")
    parser.add_argument("--vacuum-after-ms", type=int, default=DEFAULT_VACUUM_AFTER_MS,
                        help="delete removed files from disk this long after their removal [1 hour]")
    parser.add_argument("--dry-run", action="store_true", help="plan and report, change nothing")
    args = parse_args(parser, argv)
    if not args.data:
        return fail("--data (or $LAKETAIL_DATA) is required: the jobs read and commit the tables directly")
    current = None  # the topic being worked on, named in a failure
    try:
        for topic in maintained_topics(args.data, args.servers, args.topics, security=args.security):
            current = topic.name
            try:
                result = run_retention(
                    args.data, topic, plan_time_ms(args), vacuum_after_ms=args.vacuum_after_ms, dry_run=args.dry_run
                )
            except MaintenanceConflict as exc:
                report({"job": "retention", "topic": topic.name, "conflict": exc.message})
                continue
            report(result.summary() | {"dry_run": args.dry_run})
    except Exception as exc:  # the job's boundary: one line for the operator
        return fail(f"{'topic ' + current + ': ' if current else ''}{type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
