"""The Spark Python worker process laketail's data source runs in, and its garbage collector.

PySpark's daemon (``python -m pyspark.daemon``) forks one worker per connection from
the JVM and, under ``spark.python.worker.reuse`` (on by default), runs call after call
in it -- a task's ``read``, a planning's ``partitions``, a ``schema`` -- with a full
``gc.collect()`` after each (``pyspark/daemon.py``). A full collection walks every
object the worker tracks: once pyarrow, delta-rs, httpx and laketail are imported that
is about 60,000 objects and 15-30 ms of CPU, paid by every task and every planning
call, which was a third of a small ``format("laketail")`` query's Python CPU.

Those objects are the modules' own and live as long as the worker, so
:func:`settle_worker` moves what exists when laketail first runs in a worker into the
collector's permanent generation (``gc.freeze``); later objects are collected as
before. Outside such a worker (a driver, a test) it does nothing.
"""

from __future__ import annotations

import gc
import os
import sys

_settled = False


def in_reused_worker() -> bool:
    """Whether this process is a PySpark daemon's worker that runs call after call."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon" and bool(os.environ.get("SPARK_REUSE_WORKER"))


def settle_worker() -> None:
    """Freeze what a reused worker holds now, once per process (see the module doc)."""
    global _settled
    if _settled:
        return
    _settled = True
    if in_reused_worker():
        gc.collect()  # this call's garbage goes now, not into the permanent generation
        gc.freeze()
