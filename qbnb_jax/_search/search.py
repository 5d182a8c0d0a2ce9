"""A search over one or many problems: their state, the iteration bookkeeping, depth 1.

`Search` holds what every route shares: the problems, the frozen `SearchOptions`, the
`Incumbents` and the `SearchStats` of all its problems (a single solve has one).
Depth 1 is solved here directly; depth 2 runs in `_search/depth2.py` over every problem of a
search at once, and deeper trees in `_search/deep.py` and `_search/appendix.py`, one problem each.
"""

from __future__ import annotations

import functools

import numpy as np

from qbnb_jax._device.runner import KernelRunner
from qbnb_jax._problem.data import Problem
from qbnb_jax._problem.host import best_stump, leaf_loss_np, position_threshold
from qbnb_jax._search.penalty import LEAF_SPEC, all_leaf_loss
from qbnb_jax._search.state import Incumbents, SearchOptions, SearchStats


class Search:
    """Search state of `n_problems` problems solved together.

    `cutoff` (a number, or one per problem) starts each incumbent at an upper bound
    that no tree achieves yet (see `Incumbents`). The single-problem accessors
    (`problem`, `incumbent`, `offer`, ...) are for searches of one problem.
    """

    def __init__(self, problems: list[Problem], options: SearchOptions, *,
                 runner: KernelRunner | None = None, cutoff=np.inf):
        self.problems = list(problems)
        self.options = options
        self.runner = runner
        self.incumbents = Incumbents(self.problems, cutoff)
        if options.penalty:  # penalised values are floats: the tolerance rule applies
            self.incumbents.exact[:] = False
        # (n_problems, 2) bool or None: depth 2 keeps the left / right child a leaf
        # (`max_leaf_nodes`, `_search/penalty.py`)
        self.leaf_sides: np.ndarray | None = None
        self.stats = SearchStats(len(self.problems))

    @property
    def n_problems(self) -> int:
        return len(self.problems)

    # -- one problem ----------------------------------------------------------------
    @property
    def problem(self) -> Problem:
        (problem,) = self.problems
        return problem

    @property
    def incumbent(self) -> float:
        return self.incumbents.value[0]

    @property
    def exact(self) -> bool:
        return bool(self.incumbents.exact[0])

    def can_improve(self, lower: np.ndarray) -> np.ndarray:
        return self.incumbents.can_improve(lower, 0)

    def offer(self, value: float, splits) -> None:
        self.incumbents.offer(0, value, splits)

    def elapsed(self) -> float:
        return self.options.elapsed()

    # -- results ----------------------------------------------------------------------
    def splits(self, q: int = 0):
        """Split spec of problem q's incumbent (None: no tree beats the cutoff)."""
        splits = self.deferred_splits(q)
        if callable(splits):
            splits = splits()
            self.incumbents.splits[q] = splits  # built once; `deferred_splits` looks here first
        return splits

    def deferred_splits(self, q: int = 0):
        """Split spec of problem q's incumbent, or a function that builds it.

        A function of the problem, not of the search, so that it holds no reference
        back to the search: a batch's searches are then freed as soon as it ends
        rather than by the cyclic garbage collector.
        """
        spec = self.incumbents.depth2_spec[q]
        if self.incumbents.splits[q] is None and spec[0] >= 0:
            leaves = (False, False) if self.leaf_sides is None else tuple(self.leaf_sides[q])
            return functools.partial(depth2_splits, self.problems[q], *(int(v) for v in spec),
                                     penalty=self.options.penalty, leaf_sides=leaves)
        return self.incumbents.splits[q]

    def outcome(self, q: int = 0) -> tuple[float, float, object]:
        """`(lower bound, objective or inf, splits)` of problem q, for use as a subtree.

        `splits` is None when no tree beats the cutoff, and may be a function that
        builds the spec (see `Incumbents.offer`): most subtrees never become part of
        the answer.
        """
        inc = self.incumbents
        upper = inc.value[q] if inc.found(q) else np.inf
        if not self.stats.timed_out[q]:
            return inc.value[q] - inc.tolerance(q), upper, self.deferred_splits(q)
        return min(inc.lower_bound[q], inc.value[q]), upper, self.deferred_splits(q)

    # -- iterations -------------------------------------------------------------------
    def begin_iteration(self, tuple_lb: np.ndarray, problem_of: np.ndarray | None = None
                        ) -> bool:
        """Record proved bounds before an iteration over tuples with bounds `tuple_lb`
        of problems `problem_of` (default: all of problem 0); False (status
        "time_limit" for the problems still searching) when time is up."""
        n_problems, inc = self.n_problems, self.incumbents
        if problem_of is None:
            problem_of = np.zeros(len(tuple_lb), dtype=np.int64)
        frontier = np.bincount(problem_of, minlength=n_problems)
        inc.prove_optimal(np.nonzero((frontier == 0) & np.isneginf(inc.lower_bound))[0])
        best = np.full(n_problems, np.inf)
        np.minimum.at(best, problem_of, tuple_lb)
        live = np.nonzero(frontier)[0]
        # proved bounds only grow: one found inside the last iteration may be the best
        inc.lower_bound[live] = np.maximum(
            inc.lower_bound[live], np.minimum(inc.value[live], best[live]) - inc.tolerance(live))
        if self.options.out_of_time():
            self.stats.timed_out[live] = True
            return False
        if self.gap_reached(live):
            return False
        self.stats.count_iteration(live, frontier)
        return True

    def record_bounds(self, tuple_lb: np.ndarray, problem_of: np.ndarray) -> None:
        """Record bounds proved inside an iteration: every tree a problem can still
        improve with lies in one of its tuples `tuple_lb` (children of the tuples done,
        and the tuples not reached yet)."""
        inc = self.incumbents
        best = np.full(self.n_problems, np.inf)
        np.minimum.at(best, problem_of, tuple_lb)
        every = np.arange(self.n_problems)
        inc.lower_bound[:] = np.maximum(
            inc.lower_bound, np.minimum(inc.value, best) - inc.tolerance(every))

    def gap_reached(self, live: np.ndarray) -> bool:
        """Whether problems `live` all have a proved gap within `max_gap` (status
        "gap_limit" then): `incumbent - lower bound <= max_gap * incumbent`."""
        max_gap, inc = self.options.max_gap, self.incumbents
        if max_gap is None or not len(live):
            return False
        gap = inc.value[live] - inc.lower_bound[live]
        if not (gap <= max_gap * np.abs(inc.value[live])).all():
            return False
        self.stats.gap_reached[live] = True
        return True

    def report(self, tuple_lb: np.ndarray, problem_of: np.ndarray | None = None) -> None:
        """Call the progress callback after an iteration that left tuples `tuple_lb`.

        The incumbent and lower bound are summed over the search's problems (one, in
        a single solve); `active` problems still have tuples, `solved` ones do not.
        """
        if self.options.progress is None:
            return
        if problem_of is None:
            problem_of = np.zeros(len(tuple_lb), dtype=np.int64)
        best = np.full(self.n_problems, np.inf)
        np.minimum.at(best, problem_of, tuple_lb)
        # in the callers' units: a problem's losses may be scaled by a power of two
        exponents = np.array([problem.loss_exponent for problem in self.problems])
        values = np.ldexp(self.incumbents.value, -exponents)
        lowers = np.ldexp(np.minimum(self.incumbents.value, best), -exponents)
        incumbent, lower, active, solved = self.summarise(values, lowers, problem_of)
        self.options.progress(
            {
                "iteration": int(self.stats.iterations.max()),
                "frontier": int(len(tuple_lb)),
                "incumbent": incumbent,
                "lower_bound": lower,
                "gap": incumbent - lower,
                "active": active,
                "solved": solved,
                "elapsed": self.elapsed(),
            }
        )

    def summarise(self, values: np.ndarray, lowers: np.ndarray, problem_of: np.ndarray
                  ) -> tuple[float, float, int, int]:
        """`(incumbent, lower bound, active, solved)` reported for problems' incumbent
        values and proved bounds (caller's units) and the problems of the tuples left:
        the sums over independent problems."""
        active = len(np.unique(problem_of))
        return float(values.sum()), float(lowers.sum()), active, self.n_problems - active

    # -- depth 1 --------------------------------------------------------------------
    def solve_depth1(self) -> None:
        for q, problem in enumerate(self.problems):
            loss, splits = stump_splits(problem, np.ones(problem.n, dtype=bool))
            if self.options.penalty:  # the root may stay a leaf
                self.incumbents.offer(q, all_leaf_loss(problem), LEAF_SPEC)
                loss += self.options.penalty
            self.incumbents.offer(q, loss, splits)
        self.incumbents.prove_optimal(np.arange(self.n_problems))


def stump_splits(problem: Problem, mask: np.ndarray, feature: int | None = None,
                 penalty: float = 0.0):
    """`(loss, spec)` of the best stump of the samples in `mask` (on `feature` alone).

    With a split `penalty`, a leaf where the stump does not gain more than it (its
    loss is then the penalised value, `_search/penalty.py`).
    """
    features = None if feature is None else [feature]
    loss, f, k = best_stump(problem, mask, features)
    if penalty:
        leaf = float(leaf_loss_np(np.where(mask[:, None], problem.stats, 0).sum(axis=0),
                                  problem.loss_kind))
        if leaf <= loss + penalty:
            return leaf, None
        loss += penalty
    return loss, (f, position_threshold(problem, f, k), None, None)


def depth2_splits(problem: Problem, f0: int, t: int, f1: int, f2: int,
                  mask: np.ndarray | None = None, penalty: float = 0.0,
                  leaf_sides: tuple[bool, bool] = (False, False)):
    """Spec of the root cut t of f0 with the best stumps on f1 (left), f2 (right).

    `mask`: the samples the tree is for (default all). `penalty`: per split; a child
    stays a leaf where its stump does not gain more, and where `leaf_sides` says so.
    """
    k = int(problem.cut_pos[f0, t])
    left = problem.rank[f0] < k
    inside = np.ones(problem.n, dtype=bool) if mask is None else mask
    _, left_spec = stump_splits(problem, inside & left, f1, penalty)
    _, right_spec = stump_splits(problem, inside & ~left, f2, penalty)
    left_spec = None if leaf_sides[0] else left_spec
    right_spec = None if leaf_sides[1] else right_spec
    return (f0, position_threshold(problem, f0, k), left_spec, right_spec)
