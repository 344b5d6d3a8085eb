"""The tier child: a broker's tiering, in a process of its own.

Role: the Parquet encoding, the re-reading of hot frames and the Delta commits of
tiering cost a quarter of a core and hold the GIL in long steps; in the broker's
process they compete with requests. So each broker runs them in one child process
(``laketail.tierer.process``, default true). The :class:`~laketail.storage.tierer.Tierer`
stays in the broker and decides what to tier (what is below HW, which partitions it
leads, at which epoch); the child executes a pass and answers what was committed.

Protocol: JSON lines. The broker writes requests on the child's stdin, the child
answers on a private copy of its stdout (its fd 1 is pointed at stderr, so nothing
else can write into the protocol), one answer per request, in order, carrying the
request's ``id``:

* ``{"op": "tier", "topic", "uri", "now_ms", "parts": [...]}`` -- one tier pass
  (:func:`laketail.storage.tierer.run_pass`): answers ``{"version", "ends", "files"}``
  or ``{"error"[, "ahead"]}``;
* ``{"op": "forget", "topic"}`` -- the topic was deleted: drop its table handle
  (no answer).

The child holds no state the broker needs: a crashed child is restarted and the next
pass plans from the broker's tiered offsets; a commit whose answer was lost shows as
the table being ahead (``TableAhead``), which the broker then learns -- the table's
transaction versions are the truth, so nothing is lost or tiered twice.

The child dies with the broker: ``PR_SET_PDEATHSIG`` (SIGKILL) on Linux, and EOF on
stdin (the broker's end of the pipe closes when it exits, however it exits). It ignores
SIGINT and SIGTERM sent to the broker's process group: the broker's shutdown runs a
last pass through it, then closes its stdin.

Thread-safety: :class:`TierChild` (the broker's handle) is used on the event loop
only; the child itself is single-threaded and serves one request at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from typing import Any

from laketail.parent_death import die_with_parent

log = logging.getLogger(__name__)

#: the longest line either side writes (answers are small; requests list segment paths)
LINE_LIMIT = 64 * 1024 * 1024
#: pause before starting a child again after one died (no tight crash loop)
RESTART_BACKOFF_S = 0.2


class TierChildDied(Exception):
    """The tier child exited with the request unanswered (it is restarted; the pass is
    retried from the broker's tiered offsets)."""


class TierChild:
    """The broker's handle on its tier child: starts it on first use, sends requests,
    matches answers, restarts it when it dies (``restarts`` counts that)."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 0
        self._start_lock: asyncio.Lock | None = None
        self._closing = False
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    async def _ensure(self) -> asyncio.subprocess.Process:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            proc = self._proc
            if proc is not None and proc.returncode is None and self._reader is not None and not self._reader.done():
                return proc
            if proc is not None:  # it died: start another
                self.restarts += 1
                log.warning("tier child %d exited with %s; starting another", proc.pid, proc.returncode)
                await asyncio.sleep(RESTART_BACKOFF_S)
            self._closing = False
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "laketail.storage.tier_child", str(os.getpid()),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
            )
            self._proc = proc
            self._reader = asyncio.create_task(self._read(proc), name="laketail-tier-child")
            log.info("tier child started, pid %d", proc.pid)
            return proc

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its answer; raises :class:`TierChildDied`."""
        proc = await self._ensure()
        self._next_id += 1
        ident = self._next_id
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({**message, "id": ident}).encode() + b"\n")
            await proc.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._pending.pop(ident, None)
            raise TierChildDied(f"writing to the tier child failed: {exc}") from exc
        return await future

    def forget(self, topic: str) -> None:
        """The topic is gone: the child drops its table handle (no answer awaited)."""
        proc = self._proc
        if proc is None or proc.returncode is not None or proc.stdin is None:
            return
        try:
            proc.stdin.write(json.dumps({"op": "forget", "topic": topic, "id": 0}).encode() + b"\n")
        except (ConnectionError, RuntimeError):
            pass

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                answer = json.loads(line)
                future = self._pending.pop(answer.pop("id", -1), None)
                if future is not None and not future.done():
                    future.set_result(answer)
        except Exception:
            log.exception("reading the tier child's answers failed")
        finally:
            with contextlib.suppress(ProcessLookupError):
                if proc.returncode is None:
                    proc.kill()
            await proc.wait()
            pending, self._pending = self._pending, {}
            for future in pending.values():
                if not future.done():
                    future.set_exception(TierChildDied(f"the tier child exited with {proc.returncode}"))
            if not self._closing:  # it crashed: have the next one ready before the next pass
                asyncio.get_running_loop().create_task(self._restart_quietly())

    def start(self) -> None:
        """Start the child now (in the background) rather than at the first pass."""
        asyncio.get_running_loop().create_task(self._restart_quietly())

    async def _restart_quietly(self) -> None:
        try:
            await self._ensure()
        except Exception:
            log.exception("restarting the tier child failed; the next pass tries again")

    async def close(self, timeout_s: float = 10.0) -> None:
        """Close the child's stdin (it exits at EOF after the request it serves) and wait
        for it; kill it if it does not exit within ``timeout_s``."""
        self._closing = True
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


# -- the child ------------------------------------------------------------------------------------


def main(argv: list[str]) -> None:
    die_with_parent(int(argv[0]))  # PR_SET_PDEATHSIG (laketail.parent_death)
    # A Ctrl-C or SIGTERM to the broker's process group: the broker runs its last pass
    # through us and then closes our stdin; its death kills us (PR_SET_PDEATHSIG).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    logging.basicConfig(level=logging.INFO, format="%(asctime)s tier-child %(levelname)s %(name)s: %(message)s")

    from deltalake import DeltaTable

    from laketail.process_memory import keep_freed_memory
    from laketail.storage.tierer import run_pass

    keep_freed_memory()

    tables: dict[str, DeltaTable] = {}
    for line in sys.stdin.buffer:
        request = json.loads(line)
        topic = request["topic"]
        if request["op"] == "forget":
            tables.pop(topic, None)
            continue
        try:
            dt = tables.get(topic)
            if dt is None:
                dt = tables[topic] = DeltaTable(request["uri"])
            answer = run_pass(dt, contextlib.nullcontext(), request)
        except Exception as exc:  # the table cannot be opened (deleted meanwhile): answer, keep serving
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        if answer.get("error"):
            tables.pop(topic, None)  # open it afresh next time (it may have been deleted and re-created)
        out.write(json.dumps({**answer, "id": request["id"]}).encode() + b"\n")


if __name__ == "__main__":
    main(sys.argv[1:])
