"""One problem's search state: incumbent, proved bound, status, tree building.

`Search` holds what belongs to a single problem: its incumbent and the (lazily built)
split spec of the tree achieving it, the pruning tolerance, the proved lower bound and
the statistics of its iterations. Depth 1 is solved here directly; depth 2 runs in
`_depth2.py` over one or many such searches at once, and deeper trees in `_deep.py`.
"""

from __future__ import annotations

import time

import numpy as np

from ._data import Problem
from ._host import best_stump, position_threshold
from ._runner import KernelRunner, pow2_at_least

# Regression and fractional weights: prune only when LB > U + RTOL*|U| + ATOL*scale.
RTOL = 1e-9
ATOL = 1e-12


class Search:
    """Search state of one problem (or a `Problem.compact` subset of one).

    `cutoff` starts the search with an upper bound that no tree achieves yet: every
    tree that cannot beat it is pruned, so when none is found the optimum is proved to
    be at least `cutoff` (deeper trees use this for their subtrees).
    """

    def __init__(self, problem: Problem, *, bound, s, time_limit, progress, capacity, start,
                 runner: KernelRunner | None = None, cutoff: float = np.inf):
        self.problem = problem
        self.bound = bound
        self.s = s
        self.time_limit = time_limit
        self.progress = progress
        self.capacity = pow2_at_least(capacity)
        self.start = start
        self.exact = problem.loss_kind == "count"
        scale = float(problem.weight.sum())
        if problem.loss_kind == "sse":
            scale = float(problem.stats[:, -1].sum())  # total squared error of the root
        self.atol = ATOL * scale if scale > 0 else np.finfo(float).tiny  # scale-invariant
        self.runner = runner
        self.incumbent = float(cutoff)
        self._splits = None
        # (f0, t, f1, f2) of a depth-2 incumbent found by `_depth2` (None otherwise)
        self.depth2_spec: tuple[int, int, int, int] | None = None
        self.lower_bound = -np.inf
        self.status = "optimal"
        self.iterations = 0
        self.frontier_sizes: list[int] = []
        self.capacity_history: list[int] = []
        self.tuples_explored = 0

    # -- incumbent and pruning ------------------------------------------------------
    def tolerance(self) -> float:
        return 0.0 if self.exact else RTOL * abs(self.incumbent) + self.atol

    def can_improve(self, lower: np.ndarray) -> np.ndarray:
        """True where a lower bound does not rule out beating the incumbent."""
        if self.exact:  # integer counts: the incumbent is achieved, ties need not be kept
            return lower < self.incumbent
        return lower <= self.incumbent + self.tolerance()

    def offer(self, value: float, splits) -> None:
        """A tree achieving `value`: its split spec, or a function that builds it.

        Building a spec costs host stump searches; most incumbents are replaced
        before the end, so the searches pass functions and only the last one runs.
        """
        if value < self.incumbent:
            self.incumbent = float(value)
            self._splits = splits

    @property
    def splits(self):
        """Split spec of the incumbent (None: no tree beats the cutoff)."""
        if callable(self._splits):
            self._splits = self._splits()
        return self._splits

    def stump_splits(self, mask: np.ndarray, feature: int | None = None):
        return stump_splits(self.problem, mask, feature)

    def depth2_splits(self, f0: int, t: int, f1: int, f2: int, mask: np.ndarray | None = None):
        return depth2_splits(self.problem, f0, t, f1, f2, mask)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    # -- depth 1 --------------------------------------------------------------------
    def solve_depth1(self) -> None:
        loss, splits = self.stump_splits(np.ones(self.problem.n, dtype=bool))
        self.offer(loss, splits)
        self.lower_bound = self.incumbent - self.tolerance()

    def begin_iteration(self, tuple_lb: np.ndarray) -> bool:
        """Record the proved bound; False (status "time_limit") when time is up."""
        self.lower_bound = min(self.incumbent, float(tuple_lb.min())) - self.tolerance()
        if self.time_limit is not None and self.elapsed() > self.time_limit:
            self.status = "time_limit"
            return False
        self.iterations += 1
        self.frontier_sizes.append(len(tuple_lb))
        self.tuples_explored += len(tuple_lb)
        return True

    def report(self, tuple_lb: np.ndarray) -> None:
        if self.progress is None:
            return
        lower = min(self.incumbent, float(tuple_lb.min(initial=np.inf)))
        self.progress(
            {
                "iteration": self.iterations,
                "frontier": int(len(tuple_lb)),
                "incumbent": self.incumbent,
                "lower_bound": lower,
                "gap": self.incumbent - lower,
                "elapsed": self.elapsed(),
            }
        )

    def outcome(self) -> tuple[float, float, object]:
        """`(lower bound, objective or inf, splits)` for use as a subtree.

        `splits` is None when no tree beats the cutoff, and may be a function that
        builds the spec (see `offer`): most subtrees never become part of the answer.
        """
        found = self._splits is not None
        upper = self.incumbent if found else np.inf
        if self.status == "optimal":
            return self.incumbent - self.tolerance(), upper, self._splits
        return min(self.lower_bound, self.incumbent), upper, self._splits


def stump_splits(problem: Problem, mask: np.ndarray, feature: int | None = None):
    """`(loss, spec)` of the best stump of the samples in `mask` (on `feature` alone)."""
    features = None if feature is None else [feature]
    loss, f, k = best_stump(problem, mask, features)
    return loss, (f, position_threshold(problem, f, k), None, None)


def depth2_splits(problem: Problem, f0: int, t: int, f1: int, f2: int,
                  mask: np.ndarray | None = None):
    """Spec of the root cut t of f0 with the best stumps on f1 (left), f2 (right).

    `mask`: the samples the tree is for (default all). A function of the problem, not
    of a `Search`, so that an incumbent's deferred spec (`Search.offer`) holds no
    reference back to its search: a batch's searches are then freed as soon as it
    ends rather than by the cyclic garbage collector (3% of a 1,000-problem batch).
    """
    k = int(problem.cut_pos[f0, t])
    left = problem.rank[f0] < k
    inside = np.ones(problem.n, dtype=bool) if mask is None else mask
    _, left_spec = stump_splits(problem, inside & left, f1)
    _, right_spec = stump_splits(problem, inside & ~left, f2)
    return (f0, position_threshold(problem, f0, k), left_spec, right_spec)
