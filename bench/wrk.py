"""wrk, the load generator for throughput figures.

Role: run ``wrk`` against one URL with a fixed body (a Lua script reads it from a file
and sets method and Content-Type), and report requests/s, latency percentiles, errors,
and two pieces of evidence about who was the bottleneck: the CPU share the wrk process
used (from ``wait4``'s rusage) and the CPU share the server used (from /proc).

The script's ``done()`` prints one ``BENCH_JSON {...}`` line, so nothing depends on
wrk's human-readable output. Any non-2xx answer, socket error or timeout fails the
measurement: a benchmark never reports the speed of errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.procs import cpu_seconds

_LUA = r"""
local path = %(body_path)s
wrk.method = %(method)s
if path ~= nil then
  local f = assert(io.open(path, "rb"))
  wrk.body = f:read("*a")
  f:close()
end
%(headers)s
%(walk)s
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,"connect":%%d,"read":%%d,' ..
    '"write":%%d,"status":%%d,"timeout":%%d,"p50_us":%%d,"p90_us":%%d,"p99_us":%%d,"max_us":%%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


class WrkError(Exception):
    """wrk failed, or the server answered errors under load."""


@dataclass
class WrkResult:
    requests_per_s: float
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    wrk_cpu: float  # CPU seconds per second of the wrk process (2.0 = both cores)
    server_cpu: float | None  # the same for the server, when its pid was given

    def as_dict(self) -> dict:
        return asdict(self)


def _lua_string(s: str | None) -> str:
    return "nil" if s is None else json.dumps(s)


_WALK = r"""
local walk_format, walk_steps, walk_step, walk_i = %(format)s, %(steps)d, %(step)d, 0
function request()
  local path = string.format(walk_format, (walk_i %% walk_steps) * walk_step)
  walk_i = walk_i + 1
  return wrk.format(nil, path)
end
"""


def write_script(directory: Path, method: str, body_path: Path | None, headers: dict[str, str],
                 walk: tuple[str, int, int] | None = None) -> Path:
    lines = "\n".join(f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items())
    walk_lua = ""
    if walk is not None:
        path_format, steps, step = walk
        walk_lua = _WALK % {"format": json.dumps(path_format), "steps": steps, "step": step}
    text = _LUA % {"body_path": _lua_string(str(body_path) if body_path else None),
                   "method": json.dumps(method), "headers": lines, "walk": walk_lua}
    fd, name = tempfile.mkstemp(suffix=".lua", dir=directory)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return Path(name)


def run(
    url: str,
    *,
    duration_s: float,
    workdir: Path,
    method: str = "GET",
    body: bytes | None = None,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
    connections: int = 8,
    threads: int = 2,
    warmup_s: float = 1.0,
    server_pid: int | None = None,
    timeout_s: float = 10.0,
    walk: tuple[str, int, int] | None = None,
) -> WrkResult:
    """Drive ``url`` for ``duration_s`` (after ``warmup_s`` of the same load, discarded).

    ``walk=(path_format, steps, step)`` requests ``path_format % offset`` for offsets 0,
    step, 2 * step, ... (``steps`` of them, then again from 0) instead of ``url``'s
    own path: a consumer reading a topic from the start, one per wrk thread."""
    body_path = None
    if body is not None:
        fd, name = tempfile.mkstemp(suffix=".body", dir=workdir)
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        body_path = Path(name)
    headers = dict(headers or {})
    if content_type:
        headers["Content-Type"] = content_type
    script = write_script(workdir, method, body_path, headers, walk)
    try:
        if warmup_s > 0:
            _run_once(url, script, max(1, round(warmup_s)), connections, threads, None, timeout_s, workdir)
        return _run_once(url, script, max(1, round(duration_s)), connections, threads, server_pid,
                         timeout_s, workdir)
    finally:
        script.unlink(missing_ok=True)
        if body_path:
            body_path.unlink(missing_ok=True)


def _run_once(url: str, script: Path, seconds: int, connections: int, threads: int,
              server_pid: int | None, timeout_s: float, workdir: Path) -> WrkResult:
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", f"--timeout={timeout_s:g}s",
           "-s", str(script), url]
    with tempfile.TemporaryFile(dir=workdir) as out:
        server_before = cpu_seconds(server_pid) if server_pid else None
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        server_after = cpu_seconds(server_pid) if server_pid else None
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode != 0:
        raise WrkError(f"wrk exited with {proc.returncode}: {text[-500:]}")
    line = next((row for row in text.splitlines() if row.startswith("BENCH_JSON ")), None)
    if line is None:
        raise WrkError(f"wrk printed no summary: {text[-500:]}")
    s = json.loads(line[len("BENCH_JSON "):])
    errors = {k: s[k] for k in ("connect", "read", "write", "status", "timeout") if s[k]}
    if errors:
        raise WrkError(f"{url}: errors under load {errors} out of {s['requests']} requests")
    duration = s["duration_us"] / 1e6
    if s["requests"] == 0:
        raise WrkError(f"{url}: no request completed in {duration:.1f}s")
    return WrkResult(
        requests_per_s=s["requests"] / duration,
        requests=s["requests"],
        duration_s=duration,
        p50_ms=s["p50_us"] / 1000, p90_ms=s["p90_us"] / 1000,
        p99_ms=s["p99_us"] / 1000, max_ms=s["max_us"] / 1000,
        wrk_cpu=(usage.ru_utime + usage.ru_stime) / wall,
        server_cpu=None if server_pid is None else (server_after - server_before) / wall,
    )


def median(results: list[WrkResult]) -> WrkResult:
    """The run with the median requests/s (the upper one of an even count)."""
    return sorted(results, key=lambda r: r.requests_per_s)[len(results) // 2]


def interleaved(base, laketail, repeats: int) -> tuple[WrkResult, WrkResult, dict]:
    """Alternate ``base()`` and ``laketail()`` ``repeats`` times (so both see the same
    neighbours on a shared machine) and keep each side's median run."""
    bs, ls = [], []
    for _ in range(max(1, repeats)):
        bs.append(base())
        ls.append(laketail())
    spread = {"baseline_rps": [round(r.requests_per_s, 1) for r in bs],
              "laketail_rps": [round(r.requests_per_s, 1) for r in ls]}
    return median(bs), median(ls), spread
