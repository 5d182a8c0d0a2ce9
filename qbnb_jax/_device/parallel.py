"""One thread pool for host work that releases the GIL: XLA calls, numpy on large blocks.

An XLA CPU call runs on one core, and so does a numpy call; issuing independent ones
from a few threads uses the other cores (1.35x more kernel calls per second on the
2-core development machine). QBNB_JAX_THREADS=1 turns this off.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Iterable

THREADS = int(os.environ.get("QBNB_JAX_THREADS", min(4, os.cpu_count() or 1)))
_POOL = concurrent.futures.ThreadPoolExecutor(THREADS) if THREADS > 1 else None
_IN_TASK = threading.local()


def run_all(fn: Callable[[int], None], items: Iterable[int]) -> None:
    """`fn(item)` for every item, on the pool's threads when there are several items.

    Called from inside one of its own tasks (`fn` calling `run_all`), it runs the items
    in order on that thread: the pool's threads waiting on tasks queued behind them
    would never finish.
    """
    items = list(items)
    if _POOL is None or len(items) < 2 or getattr(_IN_TASK, "active", False):
        for item in items:
            fn(item)
    else:  # the last item on this thread, which would otherwise only wait
        futures = [_POOL.submit(_task, fn, item) for item in items[:-1]]
        try:
            fn(items[-1])
        finally:
            concurrent.futures.wait(futures)
        for future in futures:
            future.result()  # raises the first item's error, as `map` would


def _task(fn: Callable[[int], None], item: int) -> None:
    _IN_TASK.active = True
    try:
        fn(item)
    finally:
        _IN_TASK.active = False
