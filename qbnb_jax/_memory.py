"""glibc's malloc thresholds for batch work: reuse freed memory rather than new pages.

A batch allocates and frees many arrays of 0.1-30 MB (per-block temporaries of the
reweighting pass, the search's frontier arrays). By default glibc serves each with a
fresh mmap, or trims the freed top of a thread's heap, so the next array of that size
page-faults all over again: 13,000-21,000 faults, about a tenth of a warm 1,000-problem
batch. glibc raises its thresholds by itself after large frees, up to 32 MB for mmap
and twice that for trimming; `tune_malloc` sets those values at once, which removed
nearly all of a warm batch's page faults (15,119 -> 118). The cost is up to 64 MB of
freed memory kept per heap for reuse. QBNB_JAX_TUNE_MALLOC=0 leaves malloc alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
_tuned = False


def tune_malloc() -> None:
    """Set glibc's mmap and trim thresholds once per process (elsewhere: nothing)."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    if not sys.platform.startswith("linux") or os.environ.get("QBNB_JAX_TUNE_MALLOC") == "0":
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
