"""Issue 18: the CPU of one v2 binary produce request, in process, stage by stage.

The gateway's ASGI app (real broker, real partition logs on a temporary data root) is
called directly by eight concurrent callers, as wrk -c8 would, with the body of
benchmark 1 (100-byte values) and ``acks=1``; no HTTP parsing, so what is left is
laketail's own work. Printed per request: the process's CPU and the event-loop
thread's (``time.thread_time``: CPU, not wall time, so it holds up better than
throughput on a shared machine), the CPU of a few stages (functions wrapped by name;
``_write_group`` runs in a worker thread unless the group commit writes on the loop),
and the time the garbage collector spent, from ``gc.callbacks``. The heap is settled as
``laketail serve`` does (``_settle_heap``) when this checkout has it.

``.venv/bin/python -m bench.produce_cpu [batch] [requests] [fsync]`` (``fsync``:
``flush.messages=1``); run it from two
checkouts in turn to compare them. Not part of ``make bench``.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import sys
import tempfile
import time
from typing import Any, Callable

from bench import bodies

STAGES = [
    ("laketail.api.routes.produce", None, "values_only_records"),
    ("laketail.api.routes.produce", None, "parse_json"),
    ("laketail.api.routes.produce", None, "decode_records"),
    ("laketail.api.routes.produce", None, "_dense_v2_answer"),
    ("laketail.api.deps", "Records", "to_batch"),
    ("laketail.produce_path", "ProducePath", "_plan_produce"),
    ("laketail.storage.frame", None, "serialize_batch"),
    ("laketail.storage.partition_log", "PartitionLog", "_write_group"),
]


def _timed(spent: collections.Counter, name: str, fn: Callable) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.thread_time() - started
    return wrapper


def _wrap_stages(spent: collections.Counter) -> None:
    import importlib

    for module_name, owner_name, name in STAGES:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        setattr(owner, name, _timed(spent, name, getattr(owner, name)))


async def measure(batch: int, requests: int, fsync: bool, data: str) -> dict:
    from laketail.api import create_app
    from laketail.config import BrokerSettings

    spent: collections.Counter = collections.Counter()
    _wrap_stages(spent)
    body = bodies.v2_binary(bodies.values(batch, 100))
    app = create_app(BrokerSettings(data=data))
    async with app.router.lifespan_context(app):
        await app.state.broker.create_topic("cpu", 4, configs={"flush.messages": "1"} if fsync else {})
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/topics/cpu", "raw_path": b"/topics/cpu", "query_string": b"acks=1",
                 "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
                 "headers": [(b"content-type", bodies.V2_BINARY.encode()),
                             (b"content-length", str(len(body)).encode())]}
        statuses: list[int] = []

        async def one() -> None:
            delivered = False

            async def receive() -> dict:
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await asyncio.Event().wait()  # the client never disconnects
                raise AssertionError("unreachable")

            async def send(message: dict) -> None:
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])

            await app(dict(scope), receive, send)

        async def caller(count: int) -> None:
            for _ in range(count):
                await one()

        await asyncio.gather(*(caller(20) for _ in range(8)))  # warm-up
        try:
            from laketail.cli.serve import _settle_heap
            _settle_heap()
        except ImportError:
            pass
        collected = {"s": 0.0, "t": 0.0}

        def on_gc(phase: str, info: dict) -> None:
            if phase == "start":
                collected["t"] = time.thread_time()
            else:
                collected["s"] += time.thread_time() - collected["t"]

        spent.clear()
        statuses.clear()
        gc.callbacks.append(on_gc)
        cpu0, loop0 = time.process_time(), time.thread_time()
        await asyncio.gather(*(caller(requests // 8) for _ in range(8)))
        cpu1, loop1 = time.process_time(), time.thread_time()
        gc.callbacks.remove(on_gc)
        if set(statuses) != {200}:
            raise SystemExit(f"answers other than 200: {collections.Counter(statuses)}")
        n = len(statuses)
        return {"batch": batch, "fsync": fsync, "requests": n,
                "process_cpu_ms": round(1000 * (cpu1 - cpu0) / n, 3),
                "loop_thread_cpu_ms": round(1000 * (loop1 - loop0) / n, 3),
                "gc_ms": round(1000 * collected["s"] / n, 3),
                **{f"{k}_ms": round(1000 * v / n, 3) for k, v in spent.most_common()}}


if __name__ == "__main__":
    args = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="laketail-produce-cpu-") as root:  # removed afterwards
        result = asyncio.run(measure(int(args[0]) if args else 100, int(args[1]) if len(args) > 1 else 2000,
                                     "fsync" in args[2:], root))
    print({**result, "load": [round(x, 1) for x in os.getloadavg()]})
