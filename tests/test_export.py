"""Exporters: text and DOT diffed against scikit-learn on the same tree, plots, JSON."""

import json

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris
from sklearn.tree import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    export_graphviz as sk_export_graphviz,
    export_text as sk_export_text,
)

from qbnb_jax import (
    OptimalTreeClassifier,
    OptimalTreeRegressor,
    Tree,
    export_graphviz,
    export_text,
    load_tree,
    plot_tree,
    save_tree,
    solve,
)

IRIS_NAMES = ["sepal length", "sepal width", "petal length", "petal width"]


def tree_from_sklearn(model) -> Tree:
    """The same tree as a fitted sklearn DecisionTree*, in qbnb_jax's layout."""
    t = model.tree_
    leaf = t.children_left == -1
    if model.tree_.n_classes[0] > 1:  # classifier: sklearn stores class fractions
        value = t.value[:, 0, :] * t.weighted_n_node_samples[:, None]
        task = "classification"
    else:
        value = t.value[:, :, 0]
        task = "regression"
    return Tree(
        children_left=t.children_left.astype(np.int32),
        children_right=t.children_right.astype(np.int32),
        feature=np.where(leaf, -1, t.feature).astype(np.int32),
        threshold=np.where(leaf, np.nan, t.threshold),
        value=value.astype(np.float64),
        weighted_n_node_samples=t.weighted_n_node_samples.astype(np.float64),
        task=task,
    )


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"show_weights": True},
        {"max_depth": 1},
        {"feature_names": IRIS_NAMES, "class_names": ["a", "b", "c"], "decimals": 4},
        {"spacing": 2, "show_weights": True, "decimals": 0},
    ],
)
def test_export_text_matches_sklearn_classifier(iris, depth, weighted, kwargs):
    X, y = iris
    sw = (np.arange(len(y)) % 3 + 0.5) if weighted else None
    sk = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(X, y, sample_weight=sw)
    ours = tree_from_sklearn(sk)
    ours.check()
    assert export_text(ours, **kwargs) == sk_export_text(sk, **kwargs)


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("kwargs", [{}, {"decimals": 3}, {"max_depth": 1}])
def test_export_text_matches_sklearn_regressor(depth, kwargs):
    X, y = load_diabetes(return_X_y=True)
    sk = DecisionTreeRegressor(max_depth=depth, random_state=0).fit(X[:150], y[:150])
    assert export_text(tree_from_sklearn(sk), **kwargs) == sk_export_text(sk, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"filled": True},
        {"max_depth": 1, "filled": True, "rounded": True},
        {"node_ids": True, "precision": 1},
    ],
)
def test_export_graphviz_matches_sklearn(iris, kwargs):
    X, y = iris
    names = {"feature_names": IRIS_NAMES, "class_names": ["a", "b", "c"]}
    sk = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    expected = sk_export_graphviz(sk, out_file=None, impurity=False, **names, **kwargs)
    assert export_graphviz(tree_from_sklearn(sk), **names, **kwargs) == expected

    Xd, yd = load_diabetes(return_X_y=True)
    skr = DecisionTreeRegressor(max_depth=2, random_state=0).fit(Xd[:150], yd[:150])
    expected = sk_export_graphviz(skr, out_file=None, impurity=False, **kwargs)
    assert export_graphviz(tree_from_sklearn(skr), **kwargs) == expected


def test_export_uses_labels_and_feature_names(iris):
    pd = pytest.importorskip("pandas")
    X, y = iris
    df = pd.DataFrame(X, columns=IRIS_NAMES)
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = OptimalTreeClassifier(max_depth=1).fit(df, labels)
    text = export_text(clf)
    assert "petal" in text and "class: setosa" in text
    assert "class = setosa" in export_graphviz(clf)
    with pytest.raises(ValueError, match="feature_names must contain 4"):
        export_text(clf, feature_names=["a"])
    with pytest.raises(ValueError, match="class_names"):
        export_text(clf, class_names=["a"])
    # A SolveResult knows its classes; a bare Tree shows class indices.
    result = solve(X, labels, task="classification", depth=1)
    assert "class: setosa" in export_text(result)
    assert "class: 0" in export_text(result.tree)


def test_plot_tree_smoke(iris):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = iris
    sk = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    fig, ax = plt.subplots()
    artists = plot_tree(tree_from_sklearn(sk), ax=ax, feature_names=IRIS_NAMES, filled=True)
    assert len(artists) == sk.tree_.node_count
    assert any("petal" in a.get_text() for a in artists)
    artists = plot_tree(tree_from_sklearn(sk), ax=ax, max_depth=1)
    assert any(a.get_text() == "(...)" for a in artists)
    plt.close(fig)


def test_json_round_trip_classifier(iris, tmp_path):
    X, y = iris
    labels = np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]
    clf = OptimalTreeClassifier(max_depth=2, bound="w0").fit(X, labels)
    path = tmp_path / "tree.json"
    save_tree(clf, path)
    loaded = load_tree(path)
    assert isinstance(loaded, OptimalTreeClassifier)
    assert loaded.get_params() == clf.get_params()
    assert loaded.objective_ == clf.objective_ and loaded.status_ == clf.status_
    assert list(loaded.classes_) == list(clf.classes_)
    assert loaded.n_features_in_ == 4 and not hasattr(loaded, "feature_names_in_")
    np.testing.assert_array_equal(loaded.tree_.threshold, clf.tree_.threshold)
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
    assert export_text(loaded) == export_text(clf)


def test_json_stores_feature_names(iris, tmp_path):
    pd = pytest.importorskip("pandas")
    X, y = iris
    clf = OptimalTreeClassifier(max_depth=1).fit(X, y)
    save_tree(clf, tmp_path / "tree.json", feature_names=IRIS_NAMES)
    loaded = load_tree(tmp_path / "tree.json")
    assert list(loaded.feature_names_in_) == IRIS_NAMES
    assert "petal" in export_text(loaded)
    np.testing.assert_array_equal(
        loaded.predict(pd.DataFrame(X, columns=IRIS_NAMES)), clf.predict(X)
    )


def test_json_round_trip_regressor_and_result(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    Y = np.column_stack([X[:, 0] > 0, X[:, 2]])
    reg = OptimalTreeRegressor(max_depth=1).fit(X, Y)
    save_tree(reg, tmp_path / "reg.json")
    loaded = load_tree(tmp_path / "reg.json")
    assert isinstance(loaded, OptimalTreeRegressor) and loaded.n_outputs_ == 2
    np.testing.assert_array_equal(loaded.predict(X), reg.predict(X))
    assert loaded.objective_ == reg.objective_

    result = solve(X, Y[:, 0], task="regression", depth=1)
    save_tree(result, tmp_path / "result.json")
    loaded = load_tree(tmp_path / "result.json")
    assert loaded.objective_ == result.objective
    np.testing.assert_array_equal(loaded.predict(X), result.tree.predict(X)[:, 0])


def _valid_file(tmp_path):
    clf = OptimalTreeClassifier(max_depth=1).fit(
        np.arange(20.0).reshape(10, 2), np.array([0] * 5 + [1] * 5)
    )
    path = tmp_path / "tree.json"
    save_tree(clf, path)
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: "{not json", "not a valid JSON"),
        (lambda d: {**d, "format": "other"}, "not a qbnb_jax tree file"),
        (lambda d: {**d, "version": 99}, "unsupported file version"),
        (lambda d: {**d, "task": "ranking"}, "unknown task"),
        (lambda d: {**d, "tree": {**d["tree"], "children_left": [5, -1, -1]}}, "Malformed tree"),
        (lambda d: {**d, "tree": {**d["tree"], "value": "x"}}, "Malformed tree"),
        (lambda d: {k: v for k, v in d.items() if k != "tree"}, "'tree'"),
        (lambda d: {**d, "classes": [0, 1, 2]}, "'classes'"),
        (lambda d: {**d, "n_features": 0}, "'n_features'"),
        (lambda d: {**d, "tree": {**d["tree"], "feature": [5, -1, -1]}}, "splits on feature 5"),
        (lambda d: {**d, "feature_names": ["a", "b", "c"]}, "'feature_names'"),
        (lambda d: {**d, "objective": "low"}, "'objective'"),
        (lambda d: {**d, "params": {"max_depth": 0}}, "'max_depth'"),
    ],
)
def test_load_rejects_malformed_files(tmp_path, mutate, match):
    path, data = _valid_file(tmp_path)
    load_tree(path)  # the unmodified file is fine
    new = mutate(data)
    path.write_text(new if isinstance(new, str) else json.dumps(new))
    with pytest.raises(ValueError, match=match) as info:
        load_tree(path)
    assert str(path) in str(info.value)
