"""py-spy profiles of a broker while a missed target is measured again.

Role: say what bounds a figure. :func:`record` samples a process with ``py-spy record
--format raw`` (collapsed stacks, one ``frame;frame;... count`` line each) for as long
as the load runs, and :func:`top_frames` condenses those stacks into the functions that
hold most samples, by self time (the leaf line) and inclusive time per function
(anywhere on the stack; also restricted to laketail's own frames, which says which of
its functions cost most).
Idle threads are left out (py-spy's default), so percentages are of busy samples.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from bench.bootstrap import venv_bin

_LINE = re.compile(r"^(.*) (\d+)$")


def _short(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``func (module.py:12)``."""
    m = re.match(r"^(.*) \((.*?)(:\d+)?\)$", frame)
    if not m:
        return frame
    func, path, line = m.group(1), m.group(2), m.group(3) or ""
    parts = path.split("/")
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1:]
    else:
        parts = parts[-2:]
    return f"{func} ({'/'.join(parts)}{line})"


def _function(frame: str) -> str:
    """A frame without its line number: inclusive time is per function."""
    return re.sub(r":\d+\)$", ")", frame)


def top_frames(collapsed: Path, n: int = 15) -> dict:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    total = 0
    for raw in collapsed.read_text(errors="replace").splitlines():
        m = _LINE.match(raw.strip())
        if not m:
            continue
        stack, count = m.group(1), int(m.group(2))
        raw_frames = [f for f in stack.split(";") if f]
        if not raw_frames:
            continue
        frames = [_short(f) for f in raw_frames]
        total += count
        own[frames[-1]] += count
        for frame in {_function(f) for f in frames}:
            inclusive[frame] += count
        for frame in {_function(_short(f)) for f in raw_frames if _is_ours(f)}:
            ours[frame] += count
    if total == 0:
        return {"samples": 0, "self": [], "inclusive": []}
    return {
        "samples": total,
        "self": [(f, round(100 * c / total, 1)) for f, c in own.most_common(n)],
        "inclusive": [(f, round(100 * c / total, 1)) for f, c in inclusive.most_common(n)],
        "inclusive_laketail": [(f, round(100 * c / total, 1)) for f, c in ours.most_common(n)],
    }


def _is_ours(frame: str) -> bool:
    """A frame of laketail's own code (engine or gateway), not its entry points."""
    where = frame.rsplit("(", 1)[-1]
    return (where.startswith("laketail/") or where.startswith("api/")) and not where.startswith("laketail/cli/")


@contextmanager
def recording(pid: int, out: Path, seconds: float, rate_hz: int = 97):
    """Sample ``pid`` while the body runs (at most ``seconds``); yields a dict that
    holds the summary afterwards (empty when py-spy is unavailable or failed)."""
    summary: dict = {}
    spy = venv_bin("py-spy")
    if spy is None:
        summary["error"] = "py-spy is not installed"
        yield summary
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate_hz),
         "--duration", str(max(1, int(seconds) + 1)), "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        yield summary
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
        try:
            _, err = proc.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if out.exists():
            summary.update(top_frames(out))
            summary["collapsed"] = str(out)
        else:
            summary["error"] = (err or b"").decode(errors="replace")[-500:]
