"""The scikit-learn estimators: conformance suite, pickling, labels, outputs, params."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from qbnb_jax import OptimalTreeClassifier, OptimalTreeRegressor


@parametrize_with_checks(
    [OptimalTreeClassifier(), OptimalTreeRegressor()],
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


@parametrize_with_checks(
    [OptimalTreeClassifier(ccp_alpha=0.01), OptimalTreeRegressor(ccp_alpha=0.01)],
)
def test_sklearn_compatible_pruned_estimator(estimator, check):
    check(estimator)


@parametrize_with_checks(
    [OptimalTreeClassifier(ccp_alpha=0.01, max_leaf_nodes=3),
     OptimalTreeRegressor(ccp_alpha=0.01, max_leaf_nodes=3)],
)
def test_sklearn_compatible_leaf_budget_estimator(estimator, check):
    check(estimator)


@parametrize_with_checks(
    [OptimalTreeClassifier(min_samples_leaf=2, min_weight_fraction_leaf=0.05),
     OptimalTreeRegressor(min_samples_leaf=2, min_weight_fraction_leaf=0.05)],
    # min_samples_leaf counts rows, as scikit-learn's trees do: a row of weight 2 is
    # one row, two repeated rows are two
    expected_failed_checks=lambda estimator: {
        "check_sample_weight_equivalence_on_dense_data":
            "min_samples_leaf counts rows, not weight (as scikit-learn's trees)"},
)
def test_sklearn_compatible_leaf_limited_estimator(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    # 120 rows (every fifth row dropped) keep the problem small.
    keep = np.arange(len(y)) % 5 != 0
    return X[keep], y[keep]


@pytest.fixture(scope="module")
def fitted_clf(iris):
    X, y = iris
    labels = np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]
    return OptimalTreeClassifier().fit(X, labels)


def test_fitted_attributes(fitted_clf, iris):
    X, y = iris
    clf = fitted_clf
    assert list(clf.classes_) == ["setosa", "versicolor", "virginica"]
    assert clf.n_classes_ == 3 and clf.n_outputs_ == 1 and clf.n_features_in_ == 4
    assert clf.status_ == "optimal"
    assert clf.gap_ == 0.0 and clf.lower_bound_ == clf.objective_
    assert clf.n_iter_ >= 1
    assert clf.get_depth() <= 2 and 1 <= clf.get_n_leaves() <= 4
    # The objective is the number of training mistakes of the returned tree.
    labels = clf.classes_[y]
    assert clf.objective_ == np.sum(clf.predict(X) != labels)
    leaves = clf.apply(X)
    assert set(leaves) <= set(np.nonzero(clf.tree_.children_left == -1)[0])


def test_predict_proba_rows_sum_to_one(fitted_clf, iris):
    X, _ = iris
    proba = fitted_clf.predict_proba(X)
    assert proba.shape == (len(X), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.all(proba >= 0)
    np.testing.assert_array_equal(
        fitted_clf.classes_[np.argmax(proba, axis=1)], fitted_clf.predict(X)
    )
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(np.exp(fitted_clf.predict_log_proba(X)), proba)


def test_pickle_and_clone_round_trip(fitted_clf, iris):
    X, _ = iris
    restored = pickle.loads(pickle.dumps(fitted_clf))
    np.testing.assert_array_equal(restored.predict(X), fitted_clf.predict(X))
    np.testing.assert_array_equal(restored.predict_proba(X), fitted_clf.predict_proba(X))
    assert restored.objective_ == fitted_clf.objective_
    cloned = clone(fitted_clf)
    assert cloned.get_params() == fitted_clf.get_params()
    assert not hasattr(cloned, "tree_")
    with pytest.raises(NotFittedError):
        cloned.predict(X)


def test_pandas_feature_names(iris):
    pd = pytest.importorskip("pandas")
    X, y = iris
    df = pd.DataFrame(X, columns=["sl", "sw", "pl", "pw"])
    clf = OptimalTreeClassifier(max_depth=1).fit(df, pd.Series(y))
    assert list(clf.feature_names_in_) == ["sl", "sw", "pl", "pw"]
    with pytest.warns(UserWarning, match="fitted with feature names"):
        from_array = clf.predict(X)
    np.testing.assert_array_equal(clf.predict(df), from_array)
    with pytest.raises(ValueError, match="feature names"):
        clf.predict(df[["pw", "pl", "sw", "sl"]])


def test_hashable_labels_and_zero_weight_class(iris):
    X, y = iris
    labels = np.array([10, -3, 7])[y]
    weights = np.where(y == 2, 0.0, 1.0)  # class 7 keeps no weight
    clf = OptimalTreeClassifier(max_depth=1).fit(X, labels, sample_weight=weights)
    np.testing.assert_array_equal(clf.classes_, [-3, 7, 10])
    assert clf.tree_.value.shape[1] == 3
    assert 7 not in set(clf.predict(X))
    assert clf.predict_proba(X).shape == (len(X), 3)


def test_weights_equal_repetition_and_row_order(iris):
    X, y = iris
    rng = np.random.default_rng(0)
    w = rng.integers(0, 3, size=len(y))
    rep = OptimalTreeClassifier().fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    order = rng.permutation(len(y))
    wtd = OptimalTreeClassifier().fit(X[order], y[order], sample_weight=w[order])
    assert rep.objective_ == wtd.objective_
    np.testing.assert_array_equal(rep.tree_.threshold, wtd.tree_.threshold)
    np.testing.assert_array_equal(rep.predict(X), wtd.predict(X))


def test_multi_output_regression():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    Y = np.column_stack([X[:, 0] > 0, X[:, 1] > 0.5]).astype(float) + 0.01 * rng.normal(
        size=(60, 2)
    )
    reg = OptimalTreeRegressor().fit(X, Y)
    assert reg.n_outputs_ == 2
    pred = reg.predict(X)
    assert pred.shape == (60, 2)
    np.testing.assert_allclose(reg.objective_, np.sum((pred - Y) ** 2), rtol=1e-9, atol=1e-9)
    assert reg.score(X, Y) > 0.9
    single = OptimalTreeRegressor().fit(X, Y[:, 0])
    assert single.n_outputs_ == 1 and single.predict(X).shape == (60,)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"max_depth": 0}, "'max_depth' parameter"),
        ({"max_depth": 2.0}, "'max_depth' parameter"),
        ({"max_depth": True}, "'max_depth' parameter"),
        ({"bound": "w9"}, "'bound' parameter"),
        ({"time_limit": -1.0}, "'time_limit' parameter"),
        ({"verbose": "yes"}, "'verbose' parameter"),
        ({"s": 1}, "'s' parameter"),
    ],
)
def test_bad_parameters_raise_at_fit(params, match):
    X = np.arange(12.0).reshape(6, 2)
    y = np.array([0, 0, 0, 1, 1, 1])
    clf = OptimalTreeClassifier(**params)  # __init__ only stores
    assert clf.get_params()[next(iter(params))] is next(iter(params.values()))
    with pytest.raises(ValueError, match=match):
        clf.fit(X, y)


def test_bad_sample_weight():
    X = np.arange(12.0).reshape(6, 2)
    y = np.array([0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="Negative"):
        OptimalTreeClassifier().fit(X, y, sample_weight=-np.ones(6))
    with pytest.raises(ValueError, match="zero everywhere"):
        OptimalTreeClassifier().fit(X, y, sample_weight=np.zeros(6))


def test_verbose_prints_progress(iris, capsys):
    X, y = iris
    OptimalTreeClassifier(verbose=True).fit(X, y)
    err = capsys.readouterr().err
    assert "iter" in err and "lower bound" in err


def test_time_limit_warns(iris):
    X, y = iris
    with pytest.warns(ConvergenceWarning, match="time_limit"):
        clf = OptimalTreeClassifier(time_limit=1e-9).fit(X, y)
    assert clf.status_ == "time_limit"
    assert clf.lower_bound_ <= clf.objective_


# -- class_weight ------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_class_weight_is_optimal_for_the_weighted_loss(seed):
    """Against the brute force on the class-weighted sample weights, both forms."""
    from helpers import brute_force

    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 14))
    X = np.round(rng.normal(size=(n, 2)), 1)
    y = rng.choice(np.array(["a", "b", "c"]), n, p=[0.6, 0.3, 0.1])
    sample_weight = rng.integers(1, 3, n).astype(float)
    labels = np.unique(y)
    for class_weight in ("balanced", {label: float(rng.uniform(0.2, 3)) for label in labels}):
        clf = OptimalTreeClassifier(max_depth=2, class_weight=class_weight)
        clf.fit(X, y, sample_weight=sample_weight)
        if class_weight == "balanced":
            counts = {label: np.sum(y == label) for label in labels}
            per_class = {label: n / (len(labels) * counts[label]) for label in labels}
        else:
            per_class = class_weight
        w = sample_weight * np.array([per_class[label] for label in y])
        want = brute_force(X, y, w, task="classification", depth=2)
        assert clf.objective_ == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert clf.objective_ == pytest.approx(
            np.sum(w * (clf.predict(X) != y)), rel=1e-12)


def test_class_weight_changes_the_tree_towards_a_rare_class():
    X = np.arange(20.0)[:, None]
    y = np.zeros(20, dtype=int)
    y[[3, 10, 16]] = 1  # scattered: no split of depth 1 isolates them
    plain = OptimalTreeClassifier(max_depth=1).fit(X, y)
    weighted = OptimalTreeClassifier(max_depth=1, class_weight={0: 1.0, 1: 10.0}).fit(X, y)
    assert (plain.predict(X) == 1).sum() == 0
    assert (weighted.predict(X) == 1).sum() > 0


def test_class_weight_is_validated():
    with pytest.raises(ValueError, match="class_weight"):
        OptimalTreeClassifier(class_weight="even").fit([[0.0], [1.0]], [0, 1])


# -- feature_importances_, decision_path, max_depth=None ------------------------------
def _members(tree, X):
    """Independent of the library's traversal: node -> bool mask, by recursion."""
    out = {}

    def visit(node, mask):
        out[node] = mask
        if tree.feature[node] >= 0:
            go_left = X[:, tree.feature[node]] <= tree.threshold[node]
            visit(tree.children_left[node], mask & go_left)
            visit(tree.children_right[node], mask & ~go_left)

    visit(0, np.ones(len(X), dtype=bool))
    return out


def _importances(tree, X, y, w, n_features, classification):
    members = _members(tree, X)

    def impurity(mask):
        weight = w[mask].sum()
        if weight == 0:
            return 0.0, 0.0
        if classification:
            shares = np.array([w[mask & (y == c)].sum() for c in np.unique(y)]) / weight
            return weight, 1.0 - np.sum(shares**2)
        Y = y[mask].reshape(int(mask.sum()), -1)
        mean = np.average(Y, axis=0, weights=w[mask])
        return weight, float(np.mean(np.average((Y - mean) ** 2, axis=0, weights=w[mask])))

    out = np.zeros(n_features)
    for node, mask in members.items():
        if tree.feature[node] < 0:
            continue
        parts = [impurity(members[k]) for k in (node, tree.children_left[node],
                                                 tree.children_right[node])]
        out[tree.feature[node]] += parts[0][0] * parts[0][1] - sum(a * b for a, b in parts[1:])
    return out / out.sum() if out.sum() > 0 else out


@pytest.mark.parametrize("seed", range(4))
def test_feature_importances_are_the_weighted_impurity_decrease(seed):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(40, 4)), 1)
    w = rng.integers(1, 4, 40).astype(float)
    y = (X[:, 0] + 0.5 * X[:, 2] > 0).astype(int) + (X[:, 1] > 1)
    clf = OptimalTreeClassifier(max_depth=2).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(clf.feature_importances_,
                               _importances(clf.tree_, X, y, w, 4, True), atol=1e-12)
    target = X[:, 0] * 2 + np.abs(X[:, 3]) + rng.normal(size=40) * 0.1
    reg = OptimalTreeRegressor(max_depth=2).fit(X, target, sample_weight=w)
    np.testing.assert_allclose(reg.feature_importances_,
                               _importances(reg.tree_, X, target, w, 4, False), atol=1e-9)
    assert reg.feature_importances_.sum() == pytest.approx(1.0)


def test_decision_path_marks_the_nodes_on_each_path(iris):
    X, y = iris
    clf = OptimalTreeClassifier(max_depth=2).fit(X, y)
    path = clf.decision_path(X).toarray()
    members = _members(clf.tree_, X)
    want = np.stack([members[node] for node in range(clf.tree_.n_nodes)], axis=1)
    np.testing.assert_array_equal(path.astype(bool), want)
    leaves = clf.apply(X)
    assert path[np.arange(len(X)), leaves].all()


def test_max_depth_none_is_the_deepest_supported_depth():
    X = np.arange(6.0)[:, None]
    y = np.array([0, 1, 0, 1, 0, 1])
    clf = OptimalTreeClassifier(max_depth=None).fit(X, y)
    assert clf.objective_ == 0 and clf.status_ == "optimal"


# -- scikit-learn's own drawing functions ---------------------------------------------
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_to_sklearn_predicts_the_same_and_sklearn_draws_it(task):
    from sklearn.tree import export_graphviz, export_text

    rng = np.random.default_rng(3)
    X = rng.random((60, 3))
    if task == "classification":
        y = np.where(X[:, 0] > 0.5, "a", np.where(X[:, 1] > 0.3, "b", "c"))
        est = OptimalTreeClassifier(max_depth=2).fit(X, y)
    else:
        y = np.stack([X[:, 0] * 2 + X[:, 1], X[:, 2]], axis=1)
        est = OptimalTreeRegressor(max_depth=2).fit(X, y)
    model = est.to_sklearn()
    np.testing.assert_array_equal(model.apply(X), est.apply(X))
    if task == "classification":
        np.testing.assert_array_equal(model.predict(X), est.predict(X))
        np.testing.assert_allclose(model.predict_proba(X), est.predict_proba(X))
    else:
        np.testing.assert_allclose(model.predict(X), est.predict(X))
    np.testing.assert_allclose(model.feature_importances_, est.feature_importances_,
                               atol=1e-12)
    assert model.tree_.n_node_samples[0] == len(X)
    # a line per edge and one per leaf
    assert export_text(model).count("|---") == est.tree_.n_nodes - 1 + est.get_n_leaves()
    assert export_graphviz(model).count("->") == est.tree_.n_nodes - 1
