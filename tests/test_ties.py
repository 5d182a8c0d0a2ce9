"""Float losses prune ties as integer counts do (docs/design.md, "Regression tolerance
rule"): class-balanced weights, which give many trees of one loss, against the brute
force at depths 2 and 3, and the pruning test itself."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import brute_force
from test_batch import assert_same

import qbnb_jax
from qbnb_jax._problem.data import make_problem
from qbnb_jax._search.state import Incumbents


def balanced(y: np.ndarray) -> np.ndarray:
    """`sample_weight` of scikit-learn's `class_weight="balanced"`: n / (C n_c)."""
    _, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
    return (len(y) / (len(counts) * counts))[codes]


def tied_problem(seed: int, n: int, p: int, classes: int):
    """Few distinct values and noisy labels: many trees share the optimum's loss."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, (n, p)).astype(float)
    y = (X[:, 0] + X[:, 1] + rng.integers(0, 3, n)) % classes
    return X, y, balanced(y)


def test_a_float_tie_cannot_improve():
    X, y, w = tied_problem(0, 20, 2, 3)
    problem = make_problem(X, y, task="classification", sample_weight=w)
    assert problem.loss_kind == "weighted"
    incumbents = Incumbents([problem])
    incumbents.offer(0, 2.5, None)
    assert not incumbents.can_improve(np.float64(2.5), 0)
    assert incumbents.can_improve(np.nextafter(2.5, 0.0), 0)
    assert incumbents.tolerance(0) > 0  # floats: the proved bound stays U - tol


@pytest.mark.parametrize("depth, n, seed", [(2, 40, 1), (2, 60, 2), (3, 24, 3), (3, 30, 4)])
@pytest.mark.parametrize("classes", [2, 3])
def test_tied_weighted_classes_match_the_brute_force(depth, n, seed, classes):
    X, y, w = tied_problem(seed * 10 + classes, n, 3, classes)
    result = qbnb_jax.solve(X, y, task="classification", depth=depth, sample_weight=w)
    best = brute_force(X, y, w, task="classification", depth=depth)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(best, rel=1e-9, abs=1e-12)
    assert result.lower_bound <= best * (1 + 1e-12)
    assert result.objective - result.lower_bound <= 2e-9 * result.objective + 1e-9


@pytest.mark.parametrize("classes, seed", [(6, 5), (12, 6), (25, 7)])
def test_many_weighted_classes_match_the_brute_force(classes, seed):
    """One weight per class of many classes: the class lanes weigh their counts
    (`kernels.class_scales`); depth 2 against the brute force."""
    rng = np.random.default_rng(seed)
    n = 70
    X = rng.integers(0, 5, (n, 3)).astype(float)
    y = rng.integers(0, classes, n)
    w = rng.uniform(0.3, 3.0, classes)[y]
    result = qbnb_jax.solve(X, y, task="classification", depth=2, sample_weight=w)
    best = brute_force(X, y, w, task="classification", depth=2)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(best, rel=1e-9, abs=1e-12)
    assert result.lower_bound <= best * (1 + 1e-12)


@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("rows", ["bootstrap", "folds"])
def test_tied_weighted_batches_equal_one_by_one(depth, rows):
    """Bootstraps of class-balanced weights vary within a class (the float sweeps);
    folds of them keep one weight per class (the class lanes weigh counts)."""
    X, y, w = tied_problem(7, 40, 3, 3)
    rng = np.random.default_rng(8)
    if rows == "bootstrap":
        W = rng.multinomial(40, np.full(40, 1 / 40), size=4) * w
    else:
        W = (rng.random((4, 40)) < 0.7) * w
    batch = qbnb_jax.solve_batch(X, y, W, task="classification", depth=depth)
    for i, (row, got) in enumerate(zip(W, batch)):
        alone = qbnb_jax.solve(X, y, task="classification", depth=depth, sample_weight=row)
        assert_same(got, alone, "classification", f"problem {i}")
