"""The class-ordered sweeps (`_device/classwise.py`) equal the C-count sweeps exactly.

Integer class counts: the two kernels must return the same integers, row by row, for
full and windowed sweeps, with ties in the feature values (invalid positions), zero
weights (reweighted problems), several problems and layouts, and padding.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from qbnb_jax._device import kernels as _kernels
from qbnb_jax._device.kernels import SweepData, sweep_full, sweep_windowed, uses_class_order
from qbnb_jax._problem.data import make_problem

# the class-ordered sweeps are the sequential plan's (conftest.py)
pytestmark = pytest.mark.usefixtures("sequential_plan")


@pytest.fixture
def class_order_always(monkeypatch):
    """Class-ordered sweeps for any count of three or more classes."""
    monkeypatch.setattr(_kernels, "CLASS_ORDER_FROM", 3)


def _without_class_order(data: SweepData) -> SweepData:
    empty = jnp.zeros((0, 0, 0), jnp.int32)
    return dataclasses.replace(data, class_sample=empty, class_place=empty,
                               class_weight=empty.astype(data.class_weight.dtype),
                               class_start=empty.astype(bool))


def _problem(seed: int, n: int, p: int, classes: int):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, max(2, n // 6), (n, p)).astype(float)  # many ties
    X[:, 0] = rng.permutation(n)  # one feature without ties
    X[:, -1] = 1.0  # and one without a threshold: only the empty side is a candidate
    y = rng.integers(0, classes, n)
    y[:classes] = np.arange(classes)  # every class present
    return make_problem(X, y, task="classification")


def _rows(rng, n: int, p: int, rows: int, K: int, problems: int = 1):
    problem = rng.integers(0, problems, rows).astype(np.int32)
    f0 = rng.integers(0, p, rows).astype(np.int32)
    f = rng.integers(0, p, rows).astype(np.int32)
    cuts = np.sort(rng.integers(0, n + 1, (rows, K)), axis=1).astype(np.int32)
    cuts[0] = np.linspace(0, n, K).astype(np.int32)  # empty and full sides
    lo = rng.integers(0, n // 2 + 1, rows).astype(np.int32)
    hi = np.minimum(n, lo + rng.integers(0, n + 1, rows)).astype(np.int32)
    inner = np.sort(lo[:, None] + rng.integers(0, (hi - lo)[:, None] + 1, (rows, K)), axis=1)
    return problem, f0, f, cuts, lo, hi, inner.astype(np.int32)


def _assert_same(data: SweepData, rows) -> None:
    problem, f0, f, cuts, lo, hi, inner = rows
    assert uses_class_order(data)
    old = _without_class_order(data)
    for got, want in ((sweep_full(data, problem, f0, f, cuts),
                       sweep_full(old, problem, f0, f, cuts)),
                      (sweep_windowed(data, problem, f0, f, lo, hi, inner),
                       sweep_windowed(old, problem, f0, f, lo, hi, inner))):
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("classes, n, seed", [
    (3, 70, 0), (12, 500, 3), (30, 400, 4),
    pytest.param(5, 300, 1, marks=pytest.mark.slow),
    pytest.param(7, 129, 2, marks=pytest.mark.slow)])
def test_class_order_sweeps_equal_the_class_count_sweeps(class_order_always, classes, n, seed):
    problem = _problem(seed, n, 4, classes)
    data = SweepData.from_problem(problem)
    _assert_same(data, _rows(np.random.default_rng(seed + 100), n, 4, 9, 4))


def test_class_order_sweeps_with_zero_weights_and_shared_layout(class_order_always):
    """Reweighted problems share one layout; zero-weight samples stay in it."""
    base = _problem(7, 200, 3, 6)
    rng = np.random.default_rng(8)
    weights = rng.integers(0, 4, (5, base.n))
    weights[0, ::2] = 0
    problems, _ = base.reweighted(weights)
    data = SweepData.from_problems([base], problems, [0] * len(problems))
    _assert_same(data, _rows(rng, base.n, base.p, 16, 8, problems=len(problems)))


def test_class_order_sweeps_with_several_layouts(class_order_always):
    """Compacted sides of a deeper tree: a layout each, padded to the largest n."""
    base = _problem(9, 300, 3, 4)
    left = base.compact(base.X[:, 1] < np.median(base.X[:, 1]))
    right = base.compact(base.X[:, 1] >= np.median(base.X[:, 1]))
    data = SweepData.from_problems([left, right], [left, right], [0, 1])
    n = min(left.n, right.n)
    _assert_same(data, _rows(np.random.default_rng(10), n, base.p, 12, 4, problems=2))


def test_class_order_tables_only_where_used():
    few = SweepData.from_problem(_problem(0, 60, 2, 3))
    assert _kernels.CLASS_ORDER_FROM > 3 and not uses_class_order(few)
    many = SweepData.from_problem(_problem(0, 200, 2, _kernels.CLASS_ORDER_FROM))
    assert uses_class_order(many) == (many.plan == "sequential")
