"""The options that change the tree space together: the split penalty with leaf limits,
and both with missing values, against a brute force applying every rule at once.

`PrunedBruteForce` (tests/helpers.py) minimises `loss + penalty * splits` over trees of
depth at most d whose splits leave enough rows and weight on both sides; its candidate
splits (`candidate_splits`) send missing values either way.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import PrunedBruteForce, random_problem, seed_of

import qbnb_jax

CASES = [
    (task, k, depth, weights)
    for task, k in [("classification", 2), ("classification", 3), ("regression", 1),
                    ("regression", 2)]
    for depth in (1, 2, 3)
    for weights in ("ones", "int", "float")
]


def _with_missing(rng, X: np.ndarray) -> np.ndarray:
    X = X.copy()
    column = int(rng.integers(0, X.shape[1]))
    X[rng.random(len(X)) < 0.3, column] = np.nan
    return X


@pytest.mark.parametrize("anytime", [False, True])
@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("task,k,depth,weights", CASES)
def test_penalty_with_leaf_limits_matches_brute_force(task, k, depth, weights, missing,
                                                      anytime):
    """`anytime`: `max_gap=0`, which orders the deep search for early bounds and stops
    only at a proved gap of 0."""
    rng = np.random.default_rng(seed_of("combined", task, k, depth, weights, missing))
    for _ in range(2):
        n = int(rng.integers(6, 12 if depth == 3 else 20))
        P = random_problem(rng, task, n, int(rng.integers(1, 4)), k=k, weights=weights)
        if not (P.w > 0).any():
            P.w[0] = 1.0
        X = _with_missing(rng, P.X) if missing else P.X
        m = int(rng.integers(1, 4))
        frac = float(rng.choice([0.0, 0.1, 0.2]))
        alpha = float(rng.choice([0.01, 0.05, 0.2]))
        W = float(P.w.sum())
        oracle = PrunedBruteForce(X, P.y, P.w, task, penalty=alpha * W, min_samples=m,
                                  min_weight=frac * W)
        want = oracle.pruned(depth)
        got = qbnb_jax.solve(X, P.y, task=task, depth=depth, sample_weight=P.w,
                             ccp_alpha=alpha, min_samples_leaf=m,
                             min_weight_fraction_leaf=frac, max_gap=0.0 if anytime else None)
        label = f"m={m} frac={frac} alpha={alpha}: want {want}, got {got}"
        assert got.status in (("optimal", "gap_limit") if anytime else ("optimal",)), label
        assert abs(got.penalized_objective - want) <= 1e-7 * max(1.0, abs(want)), label
        assert got.lower_bound <= got.penalized_objective + 1e-12, label


def test_leaf_limits_with_a_leaf_budget_are_refused():
    X = np.arange(12.0)[:, None]
    y = np.arange(12) % 2
    with pytest.raises(ValueError, match="max_leaf_nodes"):
        qbnb_jax.solve(X, y, task="classification", depth=2, min_samples_leaf=2,
                       max_leaf_nodes=3)
