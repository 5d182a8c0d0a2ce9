"""Search state shared by every route: frozen options, incumbents, per-problem statistics.

Every search solves `n_problems` problems at once (a single solve is one): the depth-2
frontier of a batch, the side batches of a deeper tree and a single solve all keep
their incumbents in one `Incumbents` record, indexed by problem, and their statistics
in one `SearchStats` record.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import numpy as np

from qbnb_jax._device.runner import pow2_at_least
from qbnb_jax._problem.data import Problem
from qbnb_jax._problem.sums import sequential_sum

# Regression and fractional weights: prune only when LB > U + RTOL*|U| + ATOL*scale.
RTOL = 1e-9
ATOL = 1e-12


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """What the caller chose for a solve; shared, unchanged, by all of its searches."""

    bound: str  # "w0", "w1", "w2" or "l2"
    s: int  # root cuts per tuple and iteration grow with s
    time_limit: float | None  # seconds from `start`; None: no limit
    progress: Callable[[dict], None] | None  # called after every iteration
    capacity: int  # tuples per block at first (a power of two; depth 2 doubles it)
    start: float  # `time.perf_counter()` when the solve began
    # per split, in the units of the root problem's `stats` (`_search/penalty.py`)
    penalty: float = 0.0
    # Anytime behaviour (docs/design.md, "Anytime behaviour"): stop at a proved relative
    # gap; `anytime` orders a deep search so that every tuple gets a bound early.
    max_gap: float | None = None
    anytime: bool = False
    # whether searches of three or more classes use the leaf-count bound
    # (`class_bound.py`); off, only the bound named by `bound` prunes
    leaf_count_bound: bool = True

    @classmethod
    def make(cls, *, bound: str, s: int, time_limit: float | None = None,
             progress: Callable[[dict], None] | None = None, capacity: int | None = None,
             start: float | None = None, penalty: float = 0.0,
             max_gap: float | None = None, anytime: bool = False,
             leaf_count_bound: bool = True) -> SearchOptions:
        if time_limit is not None and np.isinf(time_limit):
            time_limit = None
        return cls(bound=bound, s=int(s), time_limit=time_limit, progress=progress,
                   capacity=pow2_at_least(capacity or 64),
                   start=time.perf_counter() if start is None else start,
                   penalty=float(penalty), max_gap=max_gap, anytime=anytime,
                   leaf_count_bound=bool(leaf_count_bound))

    def quiet(self) -> SearchOptions:
        """The same options without a progress callback or gap limit (for subproblems,
        which must be solved exactly or stopped by time alone)."""
        return dataclasses.replace(self, progress=None, max_gap=None)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def out_of_time(self) -> bool:
        return self.time_limit is not None and self.elapsed() > self.time_limit


class Incumbents:
    """Best tree found and proved lower bound of each of `n_problems` problems.

    A problem's incumbent starts at its `cutoff`, an upper bound no tree achieves yet:
    every tree that cannot beat it is pruned, so when none is found the optimum is
    proved to be at least the cutoff (deeper trees use this for their subtrees).
    Functions take problem indices `q` that broadcast against their other arguments.
    """

    def __init__(self, problems: list[Problem], cutoff=np.inf):
        n_problems = len(problems)
        self.value = np.empty(n_problems)  # (n_problems,) objective of the best tree found
        self.value[:] = cutoff
        self.lower_bound = np.full(n_problems, -np.inf)  # (n_problems,) proved; -inf: not yet
        # (n_problems,) integer counts: exact losses, no tolerance
        self.exact = np.array([pr.loss_kind == "count" for pr in problems], dtype=bool)
        self.atol = np.array([absolute_tolerance(pr) for pr in problems])  # (n_problems,)
        # (n_problems, 4) (f0, t, f1, f2) of a depth-2 incumbent found by the frontier
        # search (`_search/depth2.py`); -1: the incumbent is in `splits` (or there is none)
        self.depth2_spec = np.full((n_problems, 4), -1, dtype=np.int64)
        # (n_problems,) object: split spec of any other incumbent, or a function that
        # builds it (see `offer`); None: no tree beats the cutoff
        self.splits = np.full(n_problems, None, dtype=object)
        # Held while an incumbent's value and tree change together, so that a caller
        # returning at its deadline (`_search/anytime.py`) reads a consistent pair.
        self.lock = threading.Lock()

    def tolerance(self, q):
        return np.where(self.exact[q], 0.0, RTOL * np.abs(self.value[q]) + self.atol[q])

    def can_improve(self, lower, q):
        """True where a lower bound does not rule out beating problem q's incumbent.

        A tie cannot improve, for float losses too: a computed bound is off its true
        value by rounding far below the tolerance, so a piece pruned at `lower >= U`
        holds no tree better than `U - tol`, the bound a finished search proves
        (docs/design.md, "Regression tolerance rule"). Weighted classes tie often (a
        few distinct weights); keeping the ties searched them all."""
        return lower < self.value[q]

    def offer(self, q: int, value: float, splits) -> None:
        """A tree of problem q achieving `value`: its split spec, or a function that
        builds it. Building a spec costs host stump searches; most incumbents are
        replaced before the end, so the searches pass functions and only the last runs.
        """
        if value < self.value[q]:
            with self.lock:
                self.value[q] = value
                self.splits[q] = splits
                self.depth2_spec[q] = -1

    def offer_depth2(self, q: np.ndarray, value: np.ndarray, spec: np.ndarray) -> None:
        """Depth-2 trees `spec (len(q), 4)` = (f0, t, f1, f2) achieve `value` for
        distinct problems `q`; each that beats its problem's incumbent replaces it."""
        better = value < self.value[q]
        q = q[better]
        with self.lock:
            self.value[q] = value[better]
            self.depth2_spec[q] = spec[better]
            self.splits[q] = None

    def found(self, q: int) -> bool:
        """Whether a tree beats problem q's cutoff."""
        return self.depth2_spec[q, 0] >= 0 or self.splits[q] is not None

    def prove_optimal(self, q) -> None:
        """Problems q have nothing left to search: their incumbents are optimal."""
        self.lower_bound[q] = self.value[q] - self.tolerance(q)


def absolute_tolerance(problem: Problem) -> float:
    """ATOL scaled by the problem's total weight (squared error: its root's error).

    Float sums term by term (`sums.sequential_sum`): a problem that keeps zero-weight
    rows (`solve_batch`) gets its solve's tolerance. Integer counts are exact in any
    order."""
    if problem.loss_kind == "count":
        scale = float(problem.weight.sum())
    else:
        scale = float(sequential_sum(problem.weight))
    if problem.loss_kind == "sse":
        scale = float(sequential_sum(problem.stats[:, -1]))  # the root's squared error
    return ATOL * scale if scale > 0 else np.finfo(float).tiny  # scale-invariant


class SearchStats:
    """What each of `n_problems` searches did: status, iterations, frontier sizes."""

    def __init__(self, n_problems: int):
        self.timed_out = np.zeros(n_problems, dtype=bool)  # (n_problems,)
        self.gap_reached = np.zeros(n_problems, dtype=bool)  # (n_problems,) `max_gap` met
        self.iterations = np.zeros(n_problems, dtype=np.int64)  # (n_problems,)
        self.tuples_explored = np.zeros(n_problems, dtype=np.int64)  # (n_problems,)
        self.frontier_sizes: list[list[int]] = [[] for _ in range(n_problems)]
        self.capacity_history: list[list[int]] = [[] for _ in range(n_problems)]

    def status(self, q: int) -> str:
        if self.timed_out[q]:
            return "time_limit"
        return "gap_limit" if self.gap_reached[q] else "optimal"

    def count_iteration(self, live: np.ndarray, frontier: np.ndarray) -> None:
        """Problems `live` begin an iteration with `frontier[q]` tuples each."""
        self.iterations[live] += 1
        self.tuples_explored[live] += frontier[live]
        for q in live:
            self.frontier_sizes[q].append(int(frontier[q]))
