"""Leaf budgets (`max_leaf_nodes`) of depth-2 subtrees, for the depth-3 recursion.

A depth-3 tree with at most L leaves splits its budget between the root's sides; each
side is then a depth-2 tree with at most b leaves (b >= 4: no limit). docs/design.md,
"Split penalty and leaf budgets", says why each is exact.
"""

from __future__ import annotations

import numpy as np

from qbnb_jax._device.runner import KernelRunner
from qbnb_jax._problem.data import Problem
from qbnb_jax._search.depth2 import solve_depth2
from qbnb_jax._search.penalty import all_leaf_loss
from qbnb_jax._search.search import Search, stump_splits
from qbnb_jax._search.state import SearchOptions

NO_LIMIT = 4  # leaves of a perfect depth-2 tree


class AlternativesSearch(Search):
    """Problems that are alternatives of one solve (the same samples, each with other
    children kept leaves): progress reports the best of them, not their sum."""

    def summarise(self, values: np.ndarray, lowers: np.ndarray, problem_of: np.ndarray
                  ) -> tuple[float, float, int, int]:
        left = int(len(problem_of) > 0)
        return float(values.min()), float(lowers.min()), left, 1 - left


def allocations(leaves: int) -> list[tuple[int, int]]:
    """The leaf budgets `(left, right)` of a depth-3 root's sides that a tree with at
    most `leaves` leaves may use, less those another allows a superset of."""
    pairs = {(min(left, NO_LIMIT), min(leaves - left, NO_LIMIT)) for left in range(1, leaves)}
    return sorted(a for a in pairs
                  if not any(b != a and b[0] >= a[0] and b[1] >= a[1] for b in pairs))


def host_side(sub: Problem, budget: int, penalty: float):
    """`(lower bound, objective, splits)` of a side with at most 2 leaves: a leaf, or
    the better of a leaf and a stump plus the penalty (exact host searches)."""
    if budget == 1:
        value = all_leaf_loss(sub)
        return value, value, None
    value, spec = stump_splits(sub, np.ones(sub.n, dtype=bool), penalty=penalty)
    return value, value, spec


def three_leaf_sides(subs: list[Problem], options: SearchOptions, runner: KernelRunner,
                     cutoffs) -> list[tuple[float, float, object]]:
    """Outcomes of depth-2 trees with at most 3 leaves: each side searched twice in one
    frontier, once with either child kept a leaf (`Search.leaf_sides`)."""
    m = len(subs)
    search = Search(subs + subs, options, runner=runner, cutoff=np.tile(cutoffs, 2))
    search.leaf_sides = np.repeat([[False, True], [True, False]], m, axis=0)
    solve_depth2(search, runner_rows=np.tile(np.arange(m), 2))
    out = []
    for q in range(m):
        a, b = search.outcome(q), search.outcome(q + m)
        better = a if a[1] <= b[1] else b
        out.append((min(a[0], b[0]), better[1], better[2]))
    return out
