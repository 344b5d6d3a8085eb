"""Child processes that die with the broker, however the broker dies.

A broker killed with ``kill -9`` runs no cleanup, so a child it started must notice on
its own. Two mechanisms, used together by the broker's long-lived children (the tier
child, :mod:`laketail.storage.tier_child`; the maintenance application,
:mod:`laketail.maintenance.scheduler`):

* ``PR_SET_PDEATHSIG`` (Linux ``prctl``): the kernel sends the child SIGKILL when the
  *thread* that forked it exits -- the broker's event loop thread, which lives as long
  as the broker. The setting survives ``execve`` (so it holds for spark-submit's shell
  script and the JVM it execs) and is cleared in the child's own children: those need
  the second mechanism;
* EOF on a pipe from the parent (the tier child's stdin, a pyspark daemon's stdin from
  the JVM): the parent's end closes when it exits.

:func:`die_with_parent_preexec` is for ``preexec_fn`` (between fork and exec, in the
child); :func:`die_with_parent` for a Python child's own start. Both end the child at
once if the parent died before the setting took effect. Elsewhere than Linux there is
no ``prctl``: these do nothing, and only the pipe (and an orderly stop) remains.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable

PR_SET_PDEATHSIG = 1

_prctl: Any = None


def _libc_prctl() -> Any:
    """libc's ``prctl`` (None off Linux), looked up once: ``dlopen`` is not safe to call
    between fork and exec in a process with threads, so the lookup is done before."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        import ctypes

        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _prctl


def die_with_parent(parent_pid: int) -> None:
    """In a child: SIGKILL this process when its parent dies; exit now if it already has."""
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        sys.exit(0)


def die_with_parent_preexec() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child (and what it execs) die with this process."""
    parent_pid = os.getpid()
    prctl = _libc_prctl()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec
