"""Memory: glibc's malloc thresholds for batch work, and the ceiling on one table.

**malloc thresholds.**

A batch allocates and frees many arrays of 0.1-30 MB (per-block temporaries of the
reweighting pass, the search's frontier arrays). By default glibc serves each with a
fresh mmap, or trims the freed top of a thread's heap, so the next array of that size
page-faults all over again. glibc raises its thresholds by itself after large frees,
up to 32 MB for mmap and twice that for trimming; `tune_malloc` sets those values at
once, which removes nearly all of a warm batch's page faults. The cost is up to 64 MB
of freed memory kept per heap for reuse. QBNB_JAX_TUNE_MALLOC=0 leaves malloc alone.

**The ceiling.** The solver's tables grow as O(problems x p x n) on the device and
O(p^2 x cuts) in the depth-2 search's first iteration; `check_allocation` refuses, with
a message naming the table, any one table above `QBNB_JAX_MEMORY` before it is made.
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


# -- the memory ceiling ------------------------------------------------------------------
class MemoryCeilingError(MemoryError):
    """A table the solve needs would pass the memory ceiling (`memory_ceiling`)."""


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_ceiling() -> int | None:
    """Bytes one table of a solve may take: `QBNB_JAX_MEMORY` (e.g. "4G", "512M", bytes),
    else 80% of physical memory (None where unknown: no check)."""
    raw = os.environ.get("QBNB_JAX_MEMORY", "").strip()
    if not raw:
        total = _physical_memory()
        return None if total is None else int(total * 0.8)
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    scale = units.get(raw[-1].upper(), 1)
    number = raw[:-1] if raw[-1].upper() in units else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise ValueError(f"QBNB_JAX_MEMORY must be a size such as 4G, 512M or a byte "
                         f"count, not {raw!r}") from None
    if not value > 0:
        raise ValueError(f"QBNB_JAX_MEMORY must be positive, not {raw!r}")
    return int(value)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def check_allocation(nbytes: int, what: str) -> None:
    """Refuse, before allocating, a table of `nbytes` above the memory ceiling."""
    ceiling = memory_ceiling()
    if ceiling is not None and nbytes > ceiling:
        raise MemoryCeilingError(
            f"{what}: {_size(nbytes)}, above the memory ceiling of "
            f"{_size(ceiling)} (QBNB_JAX_MEMORY, default 80% of physical "
            "memory); use fewer samples, features or problems per call, or raise "
            "QBNB_JAX_MEMORY")
