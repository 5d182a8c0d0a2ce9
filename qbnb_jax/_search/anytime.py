"""Anytime solves: a first tree before any device work, and a caller that keeps its deadline.

`cart_splits` builds CART's greedy tree of the solve's depth on the host (numpy stump
searches only), the first incumbent of a solve with a `time_limit` or `max_gap`: even a
limit shorter than compiling the kernels returns a real tree. `user_splits` makes a
user's `initial_tree` an incumbent. `run_until` runs the search on a worker thread and
returns at the deadline whatever the worker is doing (compiling cannot be
interrupted); see docs/design.md, "Anytime behaviour".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from qbnb_jax._device.runner import SearchStopped, set_stop_event
from qbnb_jax._problem.data import Problem
from qbnb_jax._problem.host import best_stump, build_tree, leaf_loss_np, position_threshold


def cart_splits(problem: Problem, depth: int):
    """`(loss, spec)` of CART's tree: the best stump, then CART of depth - 1 per side.

    The loss is in the problem's own units, as the searches' incumbents are. Each side
    is a `Problem.compact` subset, so a level costs one pass over the samples.
    """
    loss, f, k = best_stump(problem, np.ones(problem.n, dtype=bool))
    threshold = position_threshold(problem, f, k)
    left = problem.rank[f] < k
    if depth == 1 or left.all() or not left.any():  # no split helps: a stump is final
        return loss, (f, threshold, None, None)
    sides = []
    for mask in (left, ~left):
        side = problem.compact(mask)
        sides.append(cart_splits(side, depth - 1) if side.n else (0.0, None))
    (left_loss, left_spec), (right_loss, right_spec) = sides
    return left_loss + right_loss, (f, threshold, left_spec, right_spec)


def user_splits(problem: Problem, tree, depth: int):
    """`(loss, spec)` of a user's tree: a `Tree`, a `SolveResult` or a fitted tree
    estimator (ours or scikit-learn's), routed as the solver routes (`x[f] <= t`).

    Its loss is that of its routing with the best leaf values, in the problem's units.
    """
    arrays = tree
    for name in ("tree_", "tree"):  # a fitted estimator, or a `SolveResult`
        arrays = getattr(arrays, name, arrays)
    try:
        left, right, feature, threshold = (np.asarray(getattr(arrays, name)) for name in (
            "children_left", "children_right", "feature", "threshold"))
    except AttributeError:
        raise ValueError("initial_tree must be a Tree or a fitted tree estimator; got "
                         f"{type(tree).__name__}.") from None

    def spec(node: int, level: int):
        if left[node] < 0 or left[node] == right[node]:
            return None
        f = int(feature[node])
        if level == depth or not 0 <= f < problem.p:
            raise ValueError(f"initial_tree must have depth at most {depth} and split on "
                             f"features 0 to {problem.p - 1}.")
        return (f, float(threshold[node]), spec(int(left[node]), level + 1),
                spec(int(right[node]), level + 1))

    splits = spec(0, 0)
    leaf_of = build_tree(problem, splits).apply(problem.X)
    sums = np.zeros((int(leaf_of.max()) + 1, problem.stats.shape[1]))
    np.add.at(sums, leaf_of, problem.stats)
    return float(leaf_loss_np(sums, problem.loss_kind).sum()), splits


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

    # Not a daemon: at exit Python waits for it (its next check, or a compile under
    # way) rather than killing it inside XLA, which aborts the process.
    worker = threading.Thread(target=target, name="qbnb-search")
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
