"""Lag job: consumer lag per group, topic and partition, appended to a Delta table.

    spark-submit jobs/lag.py --servers URLS --data ROOT [--group G ...] [--streaming]
    laketail jobs run lag --servers URLS --data ROOT ...

Each measurement asks a gateway for every group's lag (the v3 lag endpoint, which
computes committed offset, log end offset, lag and time lag as
:mod:`laketail.coordinator.lag` defines them) and appends one row per group, topic
and partition (:data:`laketail.maintenance.lag.LAG_SCHEMA`) to
``<ROOT>/_system/consumer_lag`` (or ``--table``) with delta-rs. ``--streaming`` measures
every ``--interval-s`` seconds until stopped (or ``--max-rounds``). Spark reads the
table like any other Delta table (its Parquet files), e.g. to chart lag over time.

Measuring is a handful of HTTP calls, so no SparkSession is started.
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

from deltalake import write_deltalake

from laketail.jobs.common import base_parser, fail, plan_time_ms, report
from laketail.maintenance.lag import lag_rows, lag_table, lag_table_uri
from laketail.maintenance.topics import Gateway


def measure(gateway: Gateway, groups: Sequence[str] | None, now: int) -> list[dict]:
    """One measurement: lag rows of the given groups (default: every group)."""
    docs = []
    for group in groups or gateway.groups():
        docs.extend(gateway.lags(group))
    return lag_rows(docs, now)


def append(table_uri: str, rows: list[dict]) -> None:
    if rows:
        write_deltalake(table_uri, lag_table(rows), mode="append")


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("lag", "Append consumer lag per group, topic and partition to a Delta table.")
    parser.add_argument("--group", action="append", dest="groups", metavar="GROUP",
                        help="a consumer group to measure (repeatable; default: every group)")
    parser.add_argument("--table", metavar="URI", help="the lag table [default: ROOT/_system/consumer_lag]")
    parser.add_argument("--streaming", action="store_true", help="measure every --interval-s seconds")
    parser.add_argument("--interval-s", type=float, default=30.0, help="seconds between measurements [30]")
    parser.add_argument("--max-rounds", type=int, default=0, help="with --streaming, stop after this many [0: never]")
    args = parser.parse_args(argv)
    if not args.servers:
        return fail("--servers (or $LAKETAIL_SERVERS) is required: lag comes from a gateway")
    table_uri = args.table or (lag_table_uri(args.data) if args.data else None)
    if table_uri is None:
        return fail("--data or --table is required: where the lag table lives")
    gateway = Gateway(args.servers)
    rounds = 0
    try:
        while True:
            started = time.monotonic()
            rows = measure(gateway, args.groups, plan_time_ms(args))
            append(table_uri, rows)
            rounds += 1
            report({"job": "lag", "round": rounds, "rows": len(rows), "table": table_uri,
                    "total_lag": sum(r["lag"] for r in rows)})
            if not args.streaming or (args.max_rounds and rounds >= args.max_rounds):
                return 0
            time.sleep(max(0.0, args.interval_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        return fail(f"{type(exc).__name__}: {exc}")
    finally:
        gateway.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
