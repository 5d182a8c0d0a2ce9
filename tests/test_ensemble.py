"""Bagged optimal trees and `select_depth`, checked against `solve` run one problem at a time."""

import pickle

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.estimator_checks import parametrize_with_checks

import qbnb_jax
from qbnb_jax import (
    BaggedOptimalTreeClassifier,
    BaggedOptimalTreeRegressor,
    DepthSelection,
    OptimalTreeClassifier,
    select_depth,
    solve,
)
from qbnb_jax._sklearn.ensemble import _assign_folds


def _expected_failed_checks(estimator):
    return {}


@parametrize_with_checks(
    # Three trees keep the suite fast; the checks do not depend on the count.
    [BaggedOptimalTreeClassifier(n_estimators=3), BaggedOptimalTreeRegressor(n_estimators=3)],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def three_classes():
    """60 samples, 3 features; class "c" has one sample, so some bootstraps miss it."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    codes = (X[:, 0] > 0).astype(int)
    codes[0] = 2
    y = np.array(["a", "b", "c"], dtype=object)[codes]
    weight = rng.integers(1, 4, size=60).astype(float)
    return X, y, weight


def _sorted_rows(X):
    """The row order `fit` solves in: lexicographic, first column first (no ties here)."""
    return np.lexsort(X.T[::-1])


def _spy_on_solve_batch(monkeypatch):
    """Record the weight matrix of every `qbnb_jax.solve_batch` call."""
    calls = []
    real = qbnb_jax.solve_batch

    def spy(X, y, sample_weights, **kwargs):
        calls.append(np.array(sample_weights))
        return real(X, y, sample_weights, **kwargs)

    monkeypatch.setattr(qbnb_jax, "solve_batch", spy)
    return calls


def test_bagged_classifier_is_the_mean_of_trees_solved_one_by_one(three_classes, monkeypatch):
    X, y, weight = three_classes
    calls = _spy_on_solve_batch(monkeypatch)
    clf = BaggedOptimalTreeClassifier(n_estimators=6, random_state=3)
    clf.fit(X, y, sample_weight=weight)
    assert len(calls) == 1 and calls[0].shape == (6, 60)

    order = _sorted_rows(X)
    counts = clf._sample_weights(60, check_random_state(3))
    assert np.all(counts.sum(axis=1) == 60) and np.all(counts == np.round(counts))
    X_test = np.random.default_rng(1).normal(size=(25, 3))
    expected = np.zeros((25, 3))
    missed_a_class = False
    for i, w in enumerate(counts * weight[order]):
        result = solve(X[order], y[order], task="classification", depth=2, sample_weight=w)
        assert clf.objectives_[i] == result.objective
        columns = np.searchsorted(clf.classes_, result.classes)
        expected[:, columns] += result.tree.predict_proba(X_test)  # unseen classes get 0
        # solve may list a class with no weight in its problem, or leave it out.
        root_weight = dict(zip(result.classes, result.tree.value[0]))
        missed_a_class |= root_weight.get("c", 0.0) == 0.0
    assert missed_a_class  # the mapping onto classes_ is exercised
    expected /= 6
    np.testing.assert_allclose(clf.predict_proba(X_test), expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(X_test), clf.classes_[np.argmax(expected, axis=1)])
    assert list(clf.classes_) == ["a", "b", "c"] and clf.n_features_in_ == 3
    assert all(isinstance(est, OptimalTreeClassifier) for est in clf.estimators_)
    assert all(est.tree_.value.shape[1] == 3 for est in clf.estimators_)
    np.testing.assert_array_equal(clf.estimators_[0].classes_, clf.classes_)
    assert clf.estimators_[0].predict(X).shape == (len(X),)  # each member is fitted


@pytest.mark.parametrize("multi_output", [False, True])
def test_bagged_regressor_is_the_mean_of_trees_solved_one_by_one(multi_output, monkeypatch):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 2))
    Y = np.column_stack([np.sin(2 * X[:, 0]), X[:, 1] > 0.3]) + 0.05 * rng.normal(size=(50, 2))
    Y = Y if multi_output else Y[:, 0]
    calls = _spy_on_solve_batch(monkeypatch)
    reg = BaggedOptimalTreeRegressor(
        n_estimators=4, max_samples=0.7, bootstrap=False, random_state=5
    ).fit(X, Y)
    assert len(calls) == 1 and calls[0].shape == (4, 50)

    order = _sorted_rows(X)
    masks = reg._sample_weights(50, check_random_state(5))
    assert set(np.unique(masks)) == {0.0, 1.0} and np.all(masks.sum(axis=1) == 35)
    X_test = rng.normal(size=(20, 2))
    trees = [
        solve(X[order], Y[order], task="regression", depth=2, sample_weight=m).tree
        for m in masks
    ]
    expected = np.mean([tree.predict_value(X_test) for tree in trees], axis=0)
    expected = expected if multi_output else expected[:, 0]
    prediction = reg.predict(X_test)
    assert prediction.shape == expected.shape
    np.testing.assert_allclose(prediction, expected, rtol=1e-12, atol=1e-12)


def test_bagging_varies_with_seed_and_repeats_with_it(three_classes):
    X, y, _ = three_classes
    probas = [
        BaggedOptimalTreeClassifier(n_estimators=4, random_state=seed).fit(X, y).predict_proba(X)
        for seed in (0, 0, 1)
    ]
    np.testing.assert_array_equal(probas[0], probas[1])
    assert not np.array_equal(probas[0], probas[2])


def test_pickle_round_trip(three_classes):
    X, y, weight = three_classes
    clf = BaggedOptimalTreeClassifier(n_estimators=3, random_state=0).fit(X, y, weight)
    restored = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(restored.predict_proba(X), clf.predict_proba(X))
    np.testing.assert_array_equal(restored.predict(X), clf.predict(X))
    np.testing.assert_array_equal(restored.objectives_, clf.objectives_)


def test_pandas_feature_names(three_classes):
    pd = pytest.importorskip("pandas")
    X, y, _ = three_classes
    df = pd.DataFrame(X, columns=["u", "v", "w"])
    clf = BaggedOptimalTreeClassifier(n_estimators=2, max_depth=1, random_state=0).fit(df, y)
    assert list(clf.feature_names_in_) == ["u", "v", "w"]
    with pytest.raises(ValueError, match="feature names"):
        clf.predict(df[["w", "v", "u"]])


def test_time_limit_warns_and_records_statuses(three_classes):
    X, y, _ = three_classes
    with pytest.warns(ConvergenceWarning, match="time_limit"):
        clf = BaggedOptimalTreeClassifier(n_estimators=2, time_limit=1e-9, random_state=0)
        clf.fit(X, y)
    assert list(clf.statuses_) == ["time_limit", "time_limit"]


# -- select_depth ---------------------------------------------------------------------


def test_select_depth_classification_matches_a_loop_of_solve(three_classes, monkeypatch):
    X, y, _ = three_classes
    calls = _spy_on_solve_batch(monkeypatch)
    sel = select_depth(X, y, task="classification", depths=(2, 1), cv=4, random_state=0)
    assert [c.shape for c in calls] == [(4, 60), (4, 60)]
    assert isinstance(sel, DepthSelection) and sel.scores.shape == (2, 4)
    for i, depth in enumerate(sel.depths):
        for k in range(4):
            test = sel.folds == k
            result = solve(X, y, task="classification", depth=depth, sample_weight=~test * 1.0)
            accuracy = np.mean(result.classes[result.tree.predict(X[test])] == y[test])
            assert sel.scores[i, k] == pytest.approx(accuracy, abs=1e-12)
            assert sel.results[depth][k].objective == result.objective
    np.testing.assert_allclose(sel.mean_scores, sel.scores.mean(axis=1))
    best = 1 if sel.mean_scores[1] >= sel.mean_scores[0] else 2
    assert sel.best_depth == best
    assert f"best_depth={best}" in repr(sel) and "mean_accuracy" in repr(sel)


def test_select_depth_weighted_regression_matches_a_loop_of_solve():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] > 0, 2.0, -1.0) + X[:, 1] + 0.1 * rng.normal(size=40)
    weight = rng.uniform(0.5, 2.0, size=40)
    weight[:4] = 0.0  # neither trained on nor scored
    sel = select_depth(
        X, y, task="regression", depths=(1, 2, 3), cv=3, random_state=1, sample_weight=weight
    )
    assert np.all(sel.folds[:4] == -1) and set(sel.folds[4:]) == {0, 1, 2}
    for i, depth in enumerate(sel.depths):
        for k in range(3):
            test = sel.folds == k
            train = np.where(test, 0.0, weight)
            tree = solve(X, y, task="regression", depth=depth, sample_weight=train).tree
            errors = (tree.predict_value(X[test])[:, 0] - y[test]) ** 2
            mse = np.sum(weight[test] * errors) / np.sum(weight[test])
            assert sel.scores[i, k] == pytest.approx(mse, rel=1e-10)
    assert sel.best_depth == sel.depths[int(np.argmin(sel.mean_scores))]
    assert "mean_mse" in repr(sel)


def test_select_depth_ties_go_to_the_smaller_depth():
    # Two classes with a wide gap: every pure tree, of depth 1 or 2, puts a threshold in
    # the gap and classifies every held-out sample.
    X = np.concatenate([np.arange(10.0), np.arange(20.0, 30.0)]).reshape(-1, 1)
    y = (X[:, 0] > 15).astype(int)
    sel = select_depth(X, y, task="classification", depths=(2, 1), cv=2, random_state=0)
    np.testing.assert_array_equal(sel.mean_scores, [1.0, 1.0])
    assert sel.best_depth == 1


@pytest.mark.parametrize("n, cv, seed", [(60, 4, 0), (37, 5, 1), (11, 3, 2)])
def test_folds_are_a_stratified_partition(n, cv, seed):
    codes = np.random.default_rng(seed).choice(3, size=n, p=[0.6, 0.3, 0.1])
    folds = _assign_folds(n, codes, cv, check_random_state(seed))
    assert folds.shape == (n,) and set(folds) == set(range(cv))
    sizes = np.bincount(folds, minlength=cv)
    assert sizes.sum() == n and sizes.max() - sizes.min() <= 1
    for c in range(3):
        per_fold = np.bincount(folds[codes == c], minlength=cv)
        assert per_fold.max() - per_fold.min() <= 1
    np.testing.assert_array_equal(folds, _assign_folds(n, codes, cv, check_random_state(seed)))
    unstratified = np.bincount(_assign_folds(n, None, cv, check_random_state(seed)), minlength=cv)
    assert unstratified.sum() == n and unstratified.max() - unstratified.min() <= 1


# -- bad input ------------------------------------------------------------------------

_X = np.arange(12.0).reshape(6, 2)
_Y = np.array([0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_estimators": 0}, "'n_estimators' parameter"),
        ({"max_samples": 0}, "'max_samples' parameter"),
        ({"max_samples": 1.5}, "'max_samples' parameter"),
        ({"max_samples": 7, "bootstrap": False}, "max_samples=7"),
        ({"bootstrap": "yes"}, "'bootstrap' parameter"),
        ({"random_state": "seed"}, "'random_state' parameter"),
        ({"max_depth": 0}, "'max_depth' parameter"),
        ({"bound": "w9"}, "'bound' parameter"),
    ],
)
def test_bad_estimator_parameters_raise_at_fit(params, match):
    clf = BaggedOptimalTreeClassifier(**params)  # __init__ only stores
    with pytest.raises(ValueError, match=match):
        clf.fit(_X, _Y)


def test_max_samples_above_n_is_fine_with_bootstrap(monkeypatch):
    calls = _spy_on_solve_batch(monkeypatch)
    clf = BaggedOptimalTreeClassifier(n_estimators=2, max_samples=9, random_state=0)
    clf.fit(_X, _Y, sample_weight=np.full(6, 0.5))
    np.testing.assert_array_equal(calls[0].sum(axis=1), [4.5, 4.5])  # 9 draws of weight 0.5
    assert len(clf.estimators_) == 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"cv": 1}, "cv must be an integer >= 2"),
        ({"cv": 7}, "cv=7 exceeds"),
        ({"cv": 2.0}, "cv must be an integer"),
        ({"task": "ranking"}, "Unknown task 'ranking'"),
        ({"depths": ()}, "depths is empty"),
        ({"depths": (1, 9)}, "depths must hold depths"),
        ({"depths": (2, 2)}, "depths must be distinct"),
    ],
)
def test_bad_select_depth_arguments(kwargs, match):
    kwargs = {"task": "classification", "cv": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        select_depth(_X, _Y, **kwargs)


@pytest.mark.parametrize("weights", [np.ones(6), np.ones((0, 6)), np.ones((2, 5))])
def test_bad_solve_batch_weights(weights):
    with pytest.raises(ValueError, match="sample_weights"):
        qbnb_jax.solve_batch(_X, _Y, weights, task="classification")
