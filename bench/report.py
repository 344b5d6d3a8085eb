"""Writes a run's results: bench/results/<date>.json and the table in bench/README.md.

The README keeps everything outside the ``<!-- results:begin -->`` /
``<!-- results:end -->`` markers; between them goes a table of the latest run (figure,
value, baseline, ratio, target, pass/fail) with the plots it made.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from pathlib import Path

from bench.figures import Figure, Skipped

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"


def machine() -> dict:
    info = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
            "loadavg": os.getloadavg()}
    try:
        import deltalake
        import pyarrow

        info["deltalake"] = deltalake.__version__
        info["pyarrow"] = pyarrow.__version__
    except ImportError:  # the versions are a courtesy of the report
        pass
    return info


def _num(x: float | None, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 100:
        s = f"{x:,.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.2f}"
    return f"{s} {unit}".strip()


def write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def table(figures: list[Figure], skipped: list[Skipped]) -> str:
    rows = ["| benchmark | figure | laketail | baseline | ratio | target | result |",
            "|---|---|---|---|---|---|---|"]
    for f in figures:
        result = {True: "pass", False: "**miss**", None: "-"}[f.passed]
        base = f"{_num(f.baseline, f.unit)} ({f.baseline_name})" if f.baseline is not None else f.baseline_name
        ratio = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
        rows.append(f"| {f.bench} | {f.name} | {_num(f.value, f.unit)} | {base} | {ratio} | "
                    f"{f.target or '-'} | {result} |")
    for s in skipped:
        rows.append(f"| {s.bench} | skipped | - | - | - | - | {s.reason} |")
    return "\n".join(rows)


def update_readme(readme: Path, stamp: str, doc: dict, figures: list[Figure], skipped: list[Skipped],
                  plots: list[str]) -> None:
    m = doc["machine"]
    lines = [
        BEGIN,
        f"Latest run: `{stamp}` ({'--full' if doc['params']['full'] else 'default sizes'}), "
        f"{m['cpus']} CPUs, Python {m['python']}, deltalake {m.get('deltalake', '?')}, "
        f"load average {m['loadavg'][0]:.2f} at start. Raw numbers: `results/{stamp}.json`.",
        "",
        table(figures, skipped),
        "",
    ]
    for plot in plots:
        lines.append(f"![{Path(plot).stem}](results/{Path(plot).name})")
    lines.append(END)
    block = "\n".join(lines)
    text = readme.read_text() if readme.exists() else f"# laketail benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    readme.write_text(text)
