"""Host helpers: the stacked best-stump search equals the one-problem search exactly."""

import numpy as np
import pytest

from qbnb_jax._data import make_problem
from qbnb_jax._host import stump_losses, stumps_of_all


@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("weights", ["none", "integer", "fractional"])
def test_stacked_stumps_equal_one_by_one(task, weights):
    rng = np.random.default_rng(len(task) * 7 + len(weights))
    for _ in range(20):
        k = int(rng.integers(2, 5))
        problems = []
        for _ in range(int(rng.integers(2, 6))):
            n = int(rng.integers(1, 40))
            X = rng.integers(0, 5, size=(n, 3)).astype(float)
            if task == "classification":
                y = rng.integers(0, k, n)
            else:
                y = rng.normal(size=(n, 2))
            w = {"none": None, "integer": rng.integers(0, 3, n).astype(float),
                 "fractional": rng.random(n) + 0.1}[weights]
            if w is not None and w.sum() == 0:
                w[0] = 1.0
            problems.append(make_problem(X, y, task=task, sample_weight=w))
        if len({(pr.loss_kind, pr.n_channels) for pr in problems}) > 1:
            continue  # a stack shares one loss kind and channel count
        losses, positions = stumps_of_all(problems)
        for b, problem in enumerate(problems):
            one_losses, one_positions = stump_losses(problem, np.ones(problem.n, dtype=bool))
            np.testing.assert_array_equal(losses[b], one_losses)  # bit for bit
            np.testing.assert_array_equal(positions[b], one_positions)


@pytest.mark.parametrize("n_rows", [1, 5, 80])  # the row-by-row path and the binary search
def test_row_searchsorted_equals_numpy(n_rows):
    from qbnb_jax._depth2 import row_searchsorted

    rng = np.random.default_rng(n_rows)
    for trial in range(40):
        width = int(rng.integers(1, 50))
        table = rng.integers(0, 20, size=(n_rows, width)).astype(float)
        if trial % 2:
            table += rng.random((n_rows, width))
        table.sort(axis=1)
        rows = rng.integers(0, n_rows, int(rng.integers(0, 100)))
        values = rng.integers(-1, 22, len(rows)).astype(float)
        values[::3] = table[rows[::3], 0]  # ties with table entries
        for side in ("left", "right"):
            want = [np.searchsorted(table[r], v, side=side) for r, v in zip(rows, values)]
            np.testing.assert_array_equal(row_searchsorted(table, rows, values, side),
                                          np.asarray(want, dtype=np.int64))
