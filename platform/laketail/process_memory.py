"""Keep the memory a broker process frees for its next request.

Role: a produce request of 1 MB (an Arrow body, a v2 body of 1,000 large records) is
joined into one Python ``bytes`` of a megabyte, from glibc's malloc. glibc's
malloc returns blocks that large to the kernel when they are freed -- with ``munmap``
when they came from ``mmap`` (by default from 128 KiB, a threshold malloc raises as it
sees such blocks freed), and by trimming the heap when more than twice that threshold is
free at its top. The next request then touches fresh pages, and each first touch is a
page fault: 250 of them per megabyte.

On a virtual machine whose balloon device reports free pages to the host (the
benchmarks' machine does, in 2 MiB blocks), a page the guest gave back must also be
found again by the host: copying 1 MB into fresh memory took 0.66 ms there, into reused
memory 0.03 ms. At 1 MB per request that was 240 faults per request in the broker and
190 per megabyte tiered in the tier child (bench/README.md, issue 18).

:func:`keep_freed_memory` fixes both thresholds (``mallopt``): blocks up to
:data:`MMAP_THRESHOLD_BYTES` come from the heap, and the heap keeps up to
:data:`TRIM_THRESHOLD_BYTES` free at its top, so a steady stream of requests reuses the
same pages. The cost is that much memory held after a burst (benchmark 8 watches RSS).
Elsewhere than glibc (musl, macOS) there is no ``mallopt`` and it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

#: glibc's ``M_TRIM_THRESHOLD`` and ``M_MMAP_THRESHOLD`` (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap; glibc takes at most 32 MiB on 64-bit systems.
MMAP_THRESHOLD_BYTES = 32 << 20
#: Free memory the heap may keep at its top before giving it back.
TRIM_THRESHOLD_BYTES = 128 << 20


def keep_freed_memory() -> bool:
    """Fix malloc's thresholds for this process; whether it could (glibc only)."""
    if not sys.platform.startswith("linux"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the C library's symbols, loaded already
    if mallopt is None:  # musl has none
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 on success; fixing the mmap threshold also stops glibc moving it.
    mmap_set = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return bool(mmap_set) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
