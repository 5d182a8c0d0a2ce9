"""Regression scores by their gain (`kernels._sse_gain`, docs/design.md, "Regression
scores"): one division per scored split, rounding far inside the pruning tolerance,
and no overflow where the caller's units would square a large total weight."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
import pytest

import qbnb_jax
from qbnb_jax._device import kernels as _kernels
from qbnb_jax._device.kernels import SweepData, sweep_full
from qbnb_jax._problem.data import make_problem


def extended_stump(stats: np.ndarray, values: np.ndarray, members: np.ndarray) -> float:
    """The best stump loss of `members` in extended precision, from its definition."""
    s = stats[members].astype(np.longdouble)
    order = np.argsort(values[members], kind="stable")
    s, v = s[order], values[members][order]
    total = s.sum(axis=0)

    def leaf(part):
        return part[-1] - (np.sum(part[1:-1] ** 2) / part[0] if part[0] > 0 else 0)

    best = leaf(total)
    left = np.cumsum(s, axis=0)
    for j in np.nonzero(v[1:] != v[:-1])[0]:
        best = min(best, leaf(left[j]) + leaf(total - left[j]))
    return best


def hard_problem(seed: int, n: int, targets: int, weighted: bool):
    """Targets of mixed magnitudes around near-equal means, tied feature values."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 3)), 1)
    X[:, 0] = rng.permutation(n)
    y = 1e3 + rng.normal(size=(n, targets)) * 10.0 ** rng.integers(-3, 3, size=(n, 1))
    w = rng.uniform(0.01, 5.0, n) if weighted else None
    return make_problem(X, y if targets > 1 else y[:, 0], task="regression", sample_weight=w)


@pytest.mark.usefixtures("sequential_plan")  # its paths are that plan's
@pytest.mark.parametrize("seed, targets, weighted", [(0, 1, False), (1, 1, True), (2, 2, True)])
def test_gain_losses_match_extended_precision(monkeypatch, seed, targets, weighted):
    """The row sweep's losses (gain form) against extended-precision sums: off by no
    more than the two-division score of the per-row sweep (`_full_row`), give or take
    a few ulps of each set's summed squares, and far below the tolerance `1e-12 scale`
    (set totals are differences of cumulative sums, so the scale sets their rounding)."""
    n = 90
    problem = hard_problem(seed, n, targets, weighted)
    rng = np.random.default_rng(seed + 7)
    rows = 12
    f0 = rng.integers(0, 3, rows).astype(np.int32)
    f = rng.integers(0, 3, rows).astype(np.int32)
    cuts = np.sort(rng.integers(0, n + 1, (rows, 4)), axis=1).astype(np.int32)
    cuts[0] = [0, 1, n - 1, n]
    problem_of = np.zeros(rows, np.int32)
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        assert _kernels.sweeps_channels_major(data)
        gain = [np.asarray(a) for a in sweep_full(data, problem_of, f0, f, cuts)]
        # the per-row sweep reads `full_scan`, which the parallel plan's data keeps
        monkeypatch.setenv("QBNB_JAX_PLAN", "parallel")
        rows_data = dataclasses.replace(SweepData.from_problem(problem), plan="sequential")
        per_row = jax.jit(jax.vmap(functools.partial(_kernels._full_row, rows_data)))
        explained = [np.asarray(a) for a in per_row(problem_of, f0, f, cuts)]
    scale = float(problem.stats[:, -1].sum())
    eps = np.finfo(float).eps
    for r in range(rows):
        pos = problem.rank[f0[r]]
        for k in range(cuts.shape[1]):
            for side, members in enumerate((pos < cuts[r, k], pos >= cuts[r, k])):
                want = extended_stump(problem.stats, problem.value_rank[f[r]], members)
                squares = float(problem.stats[members, -1].sum())
                new = abs(float(gain[side][r, k] - want))
                old = abs(float(explained[side][r, k] - want))
                assert new <= 4 * max(old, n * eps * squares), (r, k, side, new, old)
                assert new <= 1e-13 * scale, (r, k, side, new, scale)


def test_large_weights_search_in_scaled_units():
    """Weights whose total's fourth power leaves float64: the search runs in
    power-of-two units (`_sse_sums_safe`), and the optimum scales with the weights."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    y = rng.normal(size=40)
    heavy = np.full(40, 2.0**270)
    assert make_problem(X, y, task="regression", sample_weight=heavy).weight_exponent != 0
    plain = qbnb_jax.solve(X, y, task="regression", depth=2)
    scaled = qbnb_jax.solve(X, y, task="regression", depth=2, sample_weight=heavy)
    assert np.isfinite(scaled.objective)
    np.testing.assert_allclose(scaled.objective, plain.objective * 2.0**270, rtol=1e-9)
