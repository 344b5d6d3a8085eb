"""The suite's command line: which benchmarks, which sizes, where results go.

``python -m bench`` runs every benchmark that exists for the single broker with the
small default sizes (a few minutes); ``--full`` uses the issue's sizes (5,000 commits,
10M records, 10 minutes of sustained produce). Each benchmark starts its own laketail
broker on a fresh data root; one baseline app serves all baselines.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from bench import plots, report
from bench.context import Context, Params
from bench.figures import Figure, Skipped

HERE = Path(__file__).resolve().parent

#: number (the issue's target number) -> (module name, title)
BENCHMARKS = {
    1: ("produce_rest", "1 REST produce vs bare FastAPI"),
    2: ("produce_arrow", "2 Arrow IPC produce vs write+fdatasync"),
    3: ("fetch", "3 fetch (hot and Delta tiers) vs bare endpoint"),
    4: ("flatness", "4 produce latency flatness vs naive Delta commits"),
    5: ("latency", "5 latency at 200 req/s"),
    6: ("spark_reads", "6 Spark: register_topics, format('laketail'), streaming vs Parquet"),
    7: ("nats_peer", "7 NATS JetStream vs laketail from Python"),
    8: ("memory", "8 broker RSS under sustained produce"),
    9: ("replication", "9 replication (issue 7): acks=all on 3 replicas vs acks=1 on 1"),
    10: ("groups_txn", "10 consumer groups and transactions (Python client) vs the same client without them"),
    11: ("secure_produce", "11 REST produce with TLS + SCRAM (+ ACLs) vs the same broker without them"),
    12: ("kafka_protocol", "12 Kafka protocol (issue 39): confluent-kafka vs a bare Kafka server"),
    13: ("object_store", "13 a bucket as data root (issue 40): produce and tier on moto vs a local folder"),
    14: ("schemas", "14 schemas (issue 42): validated Avro produce, Spark over typed columns, tier delay"),
}

NOT_YET: list[Skipped] = []


def parse(argv: list[str]) -> tuple[Params, argparse.Namespace]:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="the issue's sizes (takes about an hour)")
    ap.add_argument("--only", default="", help="comma-separated benchmark numbers, e.g. 1,3")
    ap.add_argument("--seconds", type=float, help="length of each throughput measurement")
    ap.add_argument("--flat-commits", type=int, help="table commits benchmark 4 grows the topic to")
    ap.add_argument("--flat-records", type=int, help="records benchmark 4 grows the topic to")
    ap.add_argument("--naive-commits", type=int, help="commits the naive design makes in benchmark 4")
    ap.add_argument("--latency-seconds", type=float, help="length of each benchmark 5 window")
    ap.add_argument("--memory-seconds", type=float, help="sustained produce for benchmark 8")
    ap.add_argument("--spark-records", type=int, help="records in benchmark 6's topic (default 10M)")
    ap.add_argument("--group-records", type=int, help="records per run in benchmark 10 (default 200,000)")
    ap.add_argument("--schema-records", type=int, help="records in benchmark 14's typed topic (default 1M)")
    ap.add_argument("--request-processes", type=int,
                    help="benchmark 1 again with the broker split into N request processes (default: CPUs, "
                         "at most 4; 1 leaves those figures out)")
    ap.add_argument("--no-profile", action="store_true", help="do not re-run missed targets under py-spy")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--readme", type=Path, default=HERE / "README.md")
    ap.add_argument("--no-readme", action="store_true", help="leave bench/README.md alone")
    ap.add_argument("--workdir", type=Path, help="where brokers keep data (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    overrides = {}
    for flag in ("seconds", "flat_commits", "flat_records", "naive_commits", "latency_seconds",
                 "memory_seconds", "spark_records", "group_records", "schema_records", "request_processes"):
        if getattr(args, flag) is not None:
            overrides[flag] = getattr(args, flag)
    if args.only:
        overrides["only"] = tuple(int(x) for x in args.only.split(",") if x.strip())
    overrides["profile"] = not args.no_profile
    params = Params.full_suite(**overrides) if args.full else Params(**overrides)
    return params, args


def main(argv: list[str]) -> int:
    params, args = parse(argv)
    import importlib

    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="laketail-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = Context(params, workdir, args.results, stamp)
    figures: list[Figure] = []
    skipped: list[Skipped] = list(NOT_YET)
    errors: dict[str, str] = {}
    chosen = [n for n in BENCHMARKS if not params.only or n in params.only]
    machine = report.machine()
    started = time.monotonic()
    try:
        with ctx.progress():
            for n in chosen:
                module_name, title = BENCHMARKS[n]
                ctx.begin(title)
                try:
                    module = importlib.import_module(f"bench.{module_name}")
                    load = os.getloadavg()[0]
                    got = module.run(ctx)
                    for f in got:
                        f.details.setdefault("loadavg_at_start", load)
                    figures.extend(got)
                    for f in got:
                        ctx.console.print(_line(f))
                except Exception as exc:  # one broken benchmark must not hide the others
                    errors[title] = traceback.format_exc()
                    skipped.append(Skipped(title.split(" ", 1)[0] + " " + module_name, f"error: {exc}"))
                    ctx.console.print(f"[red]{title} failed:[/red] {exc}")
                ctx.status("done")
    finally:
        ctx.close()
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    machine["loadavg_end"] = os.getloadavg()
    try:
        plots.overview(ctx, figures)
    except Exception as exc:  # a plot must not lose the numbers
        errors["overview plot"] = str(exc)
    doc = {
        "date": stamp,
        "seconds": time.monotonic() - started,
        "machine": machine,
        "params": dataclasses.asdict(params),
        "figures": [f.as_dict() for f in figures],
        "skipped": [dataclasses.asdict(s) for s in skipped],
        "errors": errors,
        "plots": [Path(p).name for p in ctx.plots],
    }
    out = args.results / f"{stamp}.json"
    report.write_json(out, doc)
    if not args.no_readme:
        report.update_readme(args.readme, stamp, doc, figures, skipped, ctx.plots)
    ctx.console.print(report.table(figures, skipped))
    ctx.console.print(f"results: {out}")
    return 1 if errors else 0


def _line(f: Figure) -> str:
    ratio = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
    verdict = {True: "[green]pass[/green]", False: "[red]miss[/red]", None: ""}[f.passed]
    base = f"{f.baseline:,.1f}" if f.baseline is not None else "-"
    return f"  {f.bench} | {f.name}: {f.value:,.1f} {f.unit} vs {base} -> {ratio} {f.target or ''} {verdict}"
