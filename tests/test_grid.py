"""Problem-parallel kernels of a shared layout against the row kernels and the host."""

import jax
import numpy as np
import pytest

import qbnb_jax
from qbnb_jax import _runner
from qbnb_jax._data import make_problem
from qbnb_jax._host import build_tree, depth2_trees_shared, stumps_of_all_shared, tree_objective
from qbnb_jax._kernels import SweepData, sweep_full, sweep_grid
from qbnb_jax._runner import KernelRunner
from qbnb_jax._search import Search


def shared_batch(seed: int, n: int, p: int, P: int, n_classes: int = 2):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 1)  # ties
    X[:, -1] = 0.5  # a constant feature
    y = rng.integers(0, n_classes, n)
    W = rng.multinomial(n, np.full(n, 1 / n), size=P).astype(float)  # zero weights
    base = make_problem(X, y, task="classification")
    problems, tables = base.reweighted(W)
    return rng, X, y, W, base, problems, tables


@pytest.mark.parametrize("n", [3, 70])
def test_sweep_grid_equals_sweep_full(n):
    rng, _, _, _, base, problems, _ = shared_batch(n, n, 4, 9)
    K = 3
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * len(problems))
        cuts = np.sort(rng.integers(0, n + 1, size=(4, K, 9)), axis=1).astype(np.int32)
        cuts[:, 0, :2] = 0  # empty prefixes
        cuts[:, -1, 2:4] = n  # empty suffixes
        pre, suf = (np.asarray(a) for a in sweep_grid(data, np.arange(9, dtype=np.int32), cuts))
        q, f0, f = (a.ravel() for a in np.meshgrid(np.arange(9), np.arange(4), np.arange(4),
                                                   indexing="ij"))
        want_pre, want_suf = sweep_full(data, q.astype(np.int32), f0.astype(np.int32),
                                        f.astype(np.int32), cuts[f0, :, q])
    np.testing.assert_array_equal(pre[f, f0, :, q], np.asarray(want_pre))
    np.testing.assert_array_equal(suf[f, f0, :, q], np.asarray(want_suf))


def test_best_stumps_equal_host():
    _, _, _, _, base, problems, tables = shared_batch(1, 90, 4, 40)
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * len(problems))
        losses, positions = KernelRunner(problems[0], data).stumps(np.arange(40),
                                                                    tables.cut_valid)
    want_losses, want_positions = stumps_of_all_shared(problems)
    np.testing.assert_array_equal(losses, want_losses)
    np.testing.assert_array_equal(positions, want_positions)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_depth2_trees_shared_equal_build_tree(n_classes):
    """Random depth-2 specs, many of whose splits collapse (tiny, tied data)."""
    rng = np.random.default_rng(n_classes)
    for trial in range(12):
        n = int(rng.integers(1, 40))
        _, _, _, _, _, problems, tables = shared_batch(trial, n, 3, 15, n_classes)
        specs = []
        for pr in problems:
            f0 = int(rng.integers(0, 3))
            specs.append((f0, int(rng.integers(0, pr.n_thresholds[f0] + 1)),
                          int(rng.integers(0, 3)), int(rng.integers(0, 3))))
        built = depth2_trees_shared(problems, tables.cut_pos, tables.cut_valid,
                                    np.array(specs))
        for pr, spec, (tree, objective) in zip(problems, specs, built):
            search = Search(pr, bound="w0", s=3, time_limit=None, progress=None,
                            capacity=64, start=0.0)
            want = build_tree(pr, search.depth2_splits(*spec))
            assert objective == tree_objective(want, pr)
            for field in ("children_left", "children_right", "feature", "threshold",
                          "value", "weighted_n_node_samples"):
                got, expected = getattr(tree, field), getattr(want, field)
                assert got.dtype == expected.dtype, field
                np.testing.assert_array_equal(got, expected, err_msg=f"{field} {spec}")


def test_large_two_class_batch_takes_the_grid_path_and_equals_one_by_one():
    _, X, y, W, *_ = shared_batch(5, 50, 4, _runner.GRID_MIN_PROBLEMS + 8)
    _runner._COMPILED.clear()
    results = qbnb_jax.solve_batch(X, y, W, task="classification")
    assert {key[0] for key in _runner._COMPILED} >= {"grid", "stumps"}
    for w, res in zip(W, results):
        alone = qbnb_jax.solve(X, y, task="classification", sample_weight=w)
        assert res.objective == alone.objective
        for field in ("feature", "threshold", "children_left", "value"):
            np.testing.assert_array_equal(getattr(res.tree, field), getattr(alone.tree, field))
