"""Anytime solves: a first tree before any device work, and a caller that keeps its deadline.

`cart_splits` builds CART's greedy tree of the solve's depth on the host (numpy stump
searches only), the first incumbent of a solve with a `time_limit` or `max_gap`: even a
limit shorter than compiling the kernels returns a real tree. `run_until` runs the
search on a worker thread and returns at the deadline whatever the worker is doing
(compiling cannot be interrupted); see docs/design.md, "Anytime behaviour".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from qbnb_jax._device.runner import SearchStopped, set_stop_event
from qbnb_jax._problem.data import Problem
from qbnb_jax._problem.host import best_stump
from qbnb_jax._search.search import stump_splits


def cart_splits(problem: Problem, depth: int, mask: np.ndarray | None = None):
    """`(loss, spec)` of CART's tree: the best stump, then CART of depth - 1 per side.

    The loss is in the problem's own units, as the searches' incumbents are.
    """
    if mask is None:
        mask = np.ones(problem.n, dtype=bool)
    if depth == 1:
        return stump_splits(problem, mask)
    _, f, k = best_stump(problem, mask)
    left = mask & (problem.rank[f] < k)
    right = mask & ~left
    if not left.any() or not right.any():  # no split helps: the stump's leaves are final
        return stump_splits(problem, mask)
    left_loss, left_spec = cart_splits(problem, depth - 1, left)
    right_loss, right_spec = cart_splits(problem, depth - 1, right)
    _, threshold_spec = stump_splits(problem, mask, f)
    return left_loss + right_loss, (f, threshold_spec[1], left_spec, right_spec)


def quiet_after(stop: threading.Event, progress: Callable[[dict], None]
                ) -> Callable[[dict], None]:
    """`progress` that says nothing once the caller has stopped waiting."""
    def report(info: dict) -> None:
        if not stop.is_set():
            progress(info)
    return report


def run_until(work: Callable[[], None], deadline: float, stop: threading.Event) -> bool:
    """Run `work` on a worker thread until it returns or `time.perf_counter()` reaches
    `deadline`; True when it returned.

    At the deadline (or on KeyboardInterrupt) `stop` is set and the caller goes on; the
    worker's next kernel call raises `SearchStopped` and it ends, or it ends at its own
    time check. A compile under way is finished first: it holds the compile lock, so a
    next solve in the same process may wait for it (and then reuses it). An exception of
    `work` is raised here when it ended before the deadline.
    """
    failure: list[BaseException] = []

    def target() -> None:
        set_stop_event(stop)
        try:
            work()
        except SearchStopped:
            pass
        except BaseException as exc:  # handed to the caller, if still waiting
            failure.append(exc)

    worker = threading.Thread(target=target, name="qbnb-search", daemon=True)
    worker.start()
    finished = False
    try:
        worker.join(max(0.0, deadline - time.perf_counter()))
        finished = not worker.is_alive()
    finally:
        if not finished:
            stop.set()
    if failure:
        raise failure[0]
    return finished
