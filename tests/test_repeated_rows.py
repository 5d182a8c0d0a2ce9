"""Repeated rows merged into one weighted row (docs/design.md, "Repeated rows").

The merge must not change anything a solve returns: the same tree, objective, bound
and status as the rows as they are (`MIN_SHARE_MERGED = 1` turns merging off), the
optimum of the brute force, and no merge where rows count (`min_samples_leaf`) or sums
are floats.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import brute_force, seed_of

import qbnb_jax
import qbnb_jax._problem.duplicates as duplicates
from qbnb_jax._problem.data import make_problem
from qbnb_jax._problem.duplicates import repeated_row_groups


def repeated_rows(rng, n: int, p: int, classes: int, values: int = 4):
    """Rows drawn from a small pool, so that most repeat; labels noisy per row."""
    pool = rng.integers(0, values, size=(max(2, n // 8), p)).astype(np.float64)
    X = pool[rng.integers(0, len(pool), n)]
    y = rng.integers(0, classes, n)
    return X, y


def same_result(a, b) -> bool:
    ta, tb = a.tree, b.tree
    return (a.objective == b.objective and a.lower_bound == b.lower_bound
            and a.status == b.status
            and np.array_equal(ta.feature, tb.feature)
            and np.array_equal(ta.threshold, tb.threshold, equal_nan=True)
            and np.array_equal(ta.children_left, tb.children_left)
            and np.array_equal(ta.children_right, tb.children_right)
            and np.array_equal(ta.value, tb.value)
            and np.array_equal(ta.weighted_n_node_samples, tb.weighted_n_node_samples))


def unmerged(monkeypatch):
    monkeypatch.setattr(duplicates, "MIN_SHARE_MERGED", 1.0)  # no row set shrinks enough


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("classes", [2, 4])
@pytest.mark.parametrize("weights", ["unit", "integer"])
def test_merged_rows_give_the_same_result(monkeypatch, depth, classes, weights):
    rng = np.random.default_rng(seed_of("merge", depth, classes, weights))
    for _ in range(2 if depth == 3 else 3):  # one shape: few compiles
        X, y = repeated_rows(rng, 120, 3, classes)
        w = rng.integers(0, 4, len(y)).astype(np.float64) if weights == "integer" else None
        if w is not None:
            w[0] = 1.0
        merged = qbnb_jax.solve(X, y, task="classification", depth=depth, sample_weight=w)
        assert make_problem(X, y, task="classification", sample_weight=w,
                            merge_repeats=True).n < int(np.count_nonzero(
                                np.ones(len(y)) if w is None else w))
        with monkeypatch.context() as m:
            unmerged(m)
            plain = qbnb_jax.solve(X, y, task="classification", depth=depth, sample_weight=w)
        assert same_result(merged, plain)
        if depth <= 2:
            assert merged.objective == brute_force(X, y, w, task="classification", depth=depth)


def test_merge_keeps_weights_classes_and_thresholds():
    rng = np.random.default_rng(seed_of("merge-fields"))
    X, y = repeated_rows(rng, 300, 3, 3)
    labels = np.array(["a", "b", "c"])[y]
    w = rng.integers(1, 5, len(y)).astype(np.float64)
    merged = make_problem(X, labels, task="classification", sample_weight=w, merge_repeats=True)
    plain = make_problem(X, labels, task="classification", sample_weight=w)
    assert plain.n == len(y)
    assert merged.n == len(np.unique(np.column_stack([X, y]), axis=0))
    assert list(merged.classes) == ["a", "b", "c"]
    assert merged.weight.sum() == w.sum()
    assert np.array_equal(merged.stats.sum(axis=0), plain.stats.sum(axis=0))
    assert np.array_equal(merged.n_thresholds, plain.n_thresholds)
    for f in range(3):  # the same distinct values, so the same thresholds
        assert np.array_equal(np.unique(merged.X[:, f]), np.unique(plain.X[:, f]))


def test_a_class_of_zero_weight_only_keeps_its_column():
    rng = np.random.default_rng(seed_of("merge-zero-class"))
    X, y = repeated_rows(rng, 200, 2, 4)
    w = np.where(y == 2, 0.0, 1.0)  # class 2 is in y, with no weight
    merged = qbnb_jax.solve(X, y, task="classification", depth=2, sample_weight=w)
    assert list(merged.classes) == [0, 1, 2, 3]
    assert merged.tree.value[0, 2] == 0
    assert np.array_equal(merged.tree.value[0], np.bincount(y, weights=w, minlength=4))


def test_no_merge_where_rows_count_or_sums_are_floats():
    rng = np.random.default_rng(seed_of("merge-off"))
    X, y = repeated_rows(rng, 200, 2, 2)
    n = len(y)
    targets = rng.normal(size=n)
    assert make_problem(X, targets, task="regression", merge_repeats=True).n == n
    fractional = rng.uniform(0.5, 1.5, n)
    assert make_problem(X, y, task="classification", sample_weight=fractional,
                        merge_repeats=True).n == n
    with_nan = X.copy()
    with_nan[0, 0] = np.nan
    assert make_problem(with_nan, y, task="classification", merge_repeats=True).n == n


@pytest.mark.parametrize("depth", [1, 2])
def test_min_samples_leaf_counts_the_rows_as_given(depth):
    rng = np.random.default_rng(seed_of("merge-leaf", depth))
    for _ in range(3):
        X, y = repeated_rows(rng, 60, 2, 2, values=3)
        got = qbnb_jax.solve(X, y, task="classification", depth=depth, min_samples_leaf=7)
        assert got.objective == brute_force(X, y, task="classification", depth=depth,
                                            min_samples=7)


def test_solve_many_equals_solve_on_repeated_rows():
    rng = np.random.default_rng(seed_of("merge-many"))
    datasets = [repeated_rows(rng, int(rng.integers(40, 120)), 3, int(rng.integers(2, 4)))
                for _ in range(3)]
    batched = qbnb_jax.solve_many(datasets, task="classification", depth=2)
    for (X, y), got in zip(datasets, batched):
        assert same_result(got, qbnb_jax.solve(X, y, task="classification", depth=2))


def groups_of(X, y):
    problem = make_problem(X, y, task="classification")  # rows as given
    return repeated_row_groups(problem.value_rank, problem.cut_valid[:, 1:-1], problem.y)


def test_hashed_keys_group_exactly():
    # 20 features of 40 values: the ranks' mixed-radix number passes 2**62, so rows are
    # grouped by a hash and checked row by row
    rng = np.random.default_rng(seed_of("merge-hash"))
    X, y = repeated_rows(rng, 400, 20, 2, values=40)
    first, group = groups_of(X, y)
    assert np.array_equal(X[first][group], X) and np.array_equal(y[first][group], y)
    assert len(first) == len(np.unique(np.column_stack([X, y]), axis=0))
    assert np.all(np.diff(first) > 0)


def test_a_hash_collision_leaves_the_rows_as_they_are(monkeypatch):
    rng = np.random.default_rng(seed_of("merge-collision"))
    X, y = repeated_rows(rng, 400, 20, 2, values=40)
    monkeypatch.setattr(duplicates, "_HASH_MULTIPLIER", np.uint64(0))  # every key equal
    assert groups_of(X, y) is None


def test_no_groups_when_a_feature_tells_every_row_apart():
    rng = np.random.default_rng(seed_of("merge-distinct"))
    X = np.column_stack([rng.integers(0, 2, 100), np.arange(100)]).astype(np.float64)
    assert groups_of(X, rng.integers(0, 2, 100)) is None


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("classes", [2, 3])
def test_batches_of_repeated_rows_equal_solve(depth, classes):
    rng = np.random.default_rng(seed_of("merge-batch", depth, classes))
    X, y = repeated_rows(rng, 240, 3, classes)
    n = len(y)
    problems = 40 if depth == 2 else 6  # 40: the kernels' problem lanes serve depth 2
    W = rng.multinomial(n, np.full(n, 1.0 / n), size=problems).astype(np.float64)
    W[0] = rng.random(n) >= 0.2  # a fold
    base = make_problem(X, y, task="classification")
    assert repeated_row_groups(base.value_rank, base.cut_valid[:, 1:-1], base.y) is not None
    batched = qbnb_jax.solve_batch(X, y, W, task="classification", depth=depth)
    for w, got in zip(W, batched):
        assert same_result(got, qbnb_jax.solve(X, y, task="classification", depth=depth,
                                               sample_weight=w))
