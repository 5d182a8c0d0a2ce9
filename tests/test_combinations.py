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


@pytest.mark.parametrize("task,k", [("classification", 2), ("classification", 3),
                                     ("regression", 1), ("regression", 2)])
@pytest.mark.parametrize("depth", [2, 3])
def test_leaf_budget_with_leaf_limits_matches_brute_force(task, k, depth):
    """`max_leaf_nodes` with `min_samples_leaf` / `min_weight_fraction_leaf` (and at
    times `ccp_alpha`): optimal among the trees that respect all of them."""
    rng = np.random.default_rng(seed_of("budget with limits", task, k, depth))
    for i in range(6):
        n = int(rng.integers(6, 12 if depth == 3 else 20))
        weights = ("ones", "int", "float")[i % 3]
        P = random_problem(rng, task, n, int(rng.integers(1, 4)), k=k, weights=weights)
        if not (P.w > 0).any():
            P.w[0] = 1.0
        m = int(rng.integers(1, 4))
        frac = float(rng.choice([0.0, 0.1, 0.2])) if m > 1 else 0.1
        alpha = float(rng.choice([0.0, 0.0, 0.05]))
        leaves = int(rng.integers(2, 2**depth))
        W = float(P.w.sum())
        min_weight = frac * W
        if weights == "float":  # ties of fractional weights fit (`leaf_limits`)
            min_weight -= max(2.0**-40, n * 2.0**-52) * W
        oracle = PrunedBruteForce(P.X, P.y, P.w, task, penalty=alpha * W, min_samples=m,
                                  min_weight=min_weight)
        want = oracle.pruned(depth, leaves)
        got = qbnb_jax.solve(P.X, P.y, task=task, depth=depth, sample_weight=P.w,
                             ccp_alpha=alpha, min_samples_leaf=m, min_weight_fraction_leaf=frac,
                             max_leaf_nodes=leaves)
        label = f"m={m} frac={frac} alpha={alpha} leaves={leaves}: want {want}, got {got}"
        assert got.status == "optimal", label
        assert abs(got.penalized_objective - want) <= 1e-7 * max(1.0, abs(want)), label
        assert got.tree.n_leaves <= leaves, label


def test_leaf_budget_greedy_start_respects_leaf_limits():
    """Three leaves at depth 2 search two problems (either child kept a leaf) that
    share one layout; their greedy start took every feature's best stump without the
    limits, and so once returned a stump of two one-row leaves under
    `min_samples_leaf=3`. Two rows: no split fits, the answer is one leaf."""
    X = np.array([[0.0, 1.0], [1.0, 0.0]])
    res = qbnb_jax.solve(X, [0, 1], task="classification", depth=2, min_samples_leaf=3,
                         max_leaf_nodes=3)
    assert (res.objective, res.tree.n_leaves, res.status) == (1.0, 1, "optimal")
