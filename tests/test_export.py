"""Exporters: text and DOT diffed against scikit-learn on the same tree, plots, JSON."""

import json
import math

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
    SolveResult,
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



def test_load_returns_the_kind_that_was_saved(iris, tmp_path):
    X, y = iris
    labels = np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]
    result = solve(X, labels, task="classification", depth=1)
    save_tree(result, tmp_path / "result.json")
    loaded = load_tree(tmp_path / "result.json")
    assert isinstance(loaded, SolveResult)
    assert (loaded.objective, loaded.lower_bound, loaded.gap, loaded.status) == (
        result.objective,
        result.lower_bound,
        result.gap,
        result.status,
    )
    assert (loaded.task, loaded.depth, loaded.n_features) == ("classification", 1, 4)
    assert loaded.stats == {"iterations": result.stats["iterations"]}
    assert list(loaded.classes) == list(result.classes)
    np.testing.assert_array_equal(loaded.tree.predict(X), result.tree.predict(X))
    assert export_text(loaded) == export_text(result)

    save_tree(result.tree, tmp_path / "tree.json")
    bare = load_tree(tmp_path / "tree.json")
    assert isinstance(bare, Tree)
    np.testing.assert_array_equal(bare.value, result.tree.value)
    assert export_text(bare) == export_text(result.tree)


def test_files_without_a_kind_load_as_estimators(tmp_path):
    """Files written before "kind" existed were all read back as estimators."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = X[:, 0] + X[:, 2]
    result = solve(X, y, task="regression", depth=1)
    path = tmp_path / "old.json"
    save_tree(result, path)
    data = json.loads(path.read_text())
    del data["kind"]
    data["params"] = None  # as the first format wrote results
    path.write_text(json.dumps(data))
    loaded = load_tree(path)
    assert isinstance(loaded, OptimalTreeRegressor)
    assert loaded.objective_ == result.objective and loaded.max_depth == 1
    np.testing.assert_array_equal(loaded.predict(X), result.tree.predict(X)[:, 0])


def test_saving_a_loaded_estimator_without_objective_round_trips(tmp_path):
    """NaN (no stored objective) and time_limit=inf have no JSON spelling: saved as null."""
    path, data = _valid_file(tmp_path)
    data["objective"] = None
    path.write_text(json.dumps(data))
    loaded = load_tree(path)
    assert math.isnan(loaded.objective_)
    loaded.set_params(time_limit=float("inf"))
    save_tree(loaded, tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["objective"] is None and again["params"]["time_limit"] is None
    assert math.isnan(load_tree(tmp_path / "again.json").objective_)


def _tree(data, **fields):
    """`data` with some fields of its 'tree' object replaced."""
    return {**data, "tree": {**data["tree"], **fields}}


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
        # JSON's non-standard constants and numbers beyond the float range
        (lambda d: {**d, "objective": float("nan")}, "NaN is not allowed"),
        (lambda d: {**d, "lower_bound": float("inf")}, "Infinity is not allowed"),
        (lambda d: {**d, "gap": -float("inf")}, "-Infinity is not allowed"),
        (lambda d: json.dumps({**d, "gap": 0.125}).replace("0.125", "1e400"), "out of range"),
        (lambda d: {**d, "objective": 10**400}, "'objective'"),
        # every field's type, where numpy or Python would have converted
        (lambda d: _tree(d, threshold=["1.5", None, None]), "'threshold'"),
        (lambda d: _tree(d, threshold=[True, None, None]), "'threshold'"),
        (lambda d: _tree(d, children_left=[True, -1, -1]), "'children_left'"),
        (lambda d: _tree(d, feature=[0.0, -1, -1]), "'feature'"),
        (lambda d: _tree(d, value=[["5", 5], [5, 0], [0, 5]]), "'value'"),
        (lambda d: _tree(d, value=[[5, 5], [5], [0, 5]]), "'value'"),
        (lambda d: _tree(d, weighted_n_node_samples=[10, None, 5]), "'weighted_n_node_samples'"),
        (lambda d: _tree(d, task=["classification"]), "task"),
        (lambda d: {**d, "version": True}, "unsupported file version"),
        (lambda d: {**d, "kind": "model"}, "'kind'"),
        (lambda d: {**d, "n_iter": -1}, "'n_iter'"),
        (lambda d: {**d, "n_iter": "3"}, "'n_iter'"),
        (lambda d: {**d, "status": 5}, "'status'"),
        (lambda d: {**d, "classes": ["a", 1]}, "'classes'"),
        (lambda d: {**d, "n_features": True}, "'n_features'"),
        (lambda d: {**d, "feature_names": ["a", "a"]}, "repeated"),
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


def test_write_text_file_replaces_whole_and_keeps_the_mode(tmp_path):
    from qbnb_jax._sklearn.export import write_text_file

    path = tmp_path / "out.txt"
    path.write_text("old contents, longer than the new ones\n")
    path.chmod(0o640)
    write_text_file(path, "new\n")
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary left


# -- limits: nesting, depth and size -----------------------------------------------------


def chain_file(path, n_splits):
    """A tree file whose tree is a chain of `n_splits` splits, each with a leaf on the left."""
    n = 2 * n_splits + 1
    internal = [i % 2 == 0 and i < 2 * n_splits for i in range(n)]
    left = [i + 1 if k else -1 for i, k in enumerate(internal)]
    right = [i + 2 if k else -1 for i, k in enumerate(internal)]
    data = {
        "format": "qbnb_jax.tree",
        "version": 1,
        "task": "classification",
        "classes": [0, 1],
        "n_features": 1,
        "tree": {
            "task": "classification",
            "children_left": left,
            "children_right": right,
            "feature": [0 if k else -1 for k in internal],
            "threshold": [float(i) if k else None for i, k in enumerate(internal)],
            "value": [[1, 1] for _ in range(n)],
            "weighted_n_node_samples": [2] * n,
        },
    }
    path.write_text(json.dumps(data))
    return path


def test_deep_trees_load_and_export_without_recursion(tmp_path):
    clf = load_tree(chain_file(tmp_path / "chain.json", 2500))  # 5,001 nodes
    assert clf.tree_.n_nodes == 5001 and clf.tree_.max_depth == 2500
    text = export_text(clf)  # depth 10 shown, then the depth of the rest
    assert text.endswith(f"truncated branch of depth {2500 - 10}\n")
    dot = export_graphviz(clf)
    assert dot.count(" -> ") == 5000 and dot.endswith("}")


def test_plot_tree_lays_out_deep_trees(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clf = load_tree(chain_file(tmp_path / "chain.json", 1100))  # deeper than the stack limit
    fig, ax = plt.subplots()
    artists = plot_tree(clf, ax=ax)
    assert len(artists) == clf.tree_.n_nodes
    plt.close(fig)


def test_export_refuses_a_cyclic_tree_instead_of_looping():
    loop = Tree(
        children_left=np.array([0, -1], dtype=np.int32),
        children_right=np.array([1, -1], dtype=np.int32),
        feature=np.array([0, -1], dtype=np.int32),
        threshold=np.array([0.5, np.nan]),
        value=np.ones((2, 2)),
        weighted_n_node_samples=np.full(2, 2.0),
        task="classification",
    )
    for export in (export_text, export_graphviz):
        with pytest.raises(ValueError, match="Malformed tree"):
            export(loop)


def test_load_refuses_deep_nesting(tmp_path):
    from qbnb_jax._sklearn.export import MAX_JSON_NESTING

    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=f"nested more than {MAX_JSON_NESTING} levels") as info:
        load_tree(path)
    assert str(path) in str(info.value)


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path):
    path, data = _valid_file(tmp_path)
    names = ["[" * 100 + '\\"{', '"]]' + "{" * 100]
    path.write_text(json.dumps({**data, "feature_names": names}))
    assert list(load_tree(path).feature_names_in_) == names


def test_load_refuses_trees_past_the_limits(tmp_path, monkeypatch):
    from qbnb_jax._sklearn import export as _export
    too_deep = chain_file(tmp_path / "deep.json", _export.MAX_TREE_DEPTH + 1)
    with pytest.raises(ValueError, match=f"limited to {_export.MAX_TREE_DEPTH}"):
        load_tree(too_deep)

    path, _ = _valid_file(tmp_path)  # 3 nodes, a few hundred bytes
    monkeypatch.setattr(_export, "MAX_NODES", 2)
    with pytest.raises(ValueError, match="3 nodes; tree files are limited to 2"):
        load_tree(path)
    monkeypatch.setattr(_export, "MAX_FILE_BYTES", 100)
    with pytest.raises(ValueError, match="larger than the 100 bytes"):
        load_tree(path)


def test_plot_tree_draws_parents_above_the_edges_that_end_at_them():
    """Each edge runs from its parent's centre to the child; the parent's box must be
    drawn above it, or the edge crosses the parent's text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    clf = OptimalTreeClassifier(max_depth=2).fit(X, y)
    fig, ax = plt.subplots()
    artists = plot_tree(clf, ax=ax)
    tree = clf.tree_
    for node in range(tree.n_nodes):
        for child in (tree.children_left[node], tree.children_right[node]):
            if child >= 0:
                assert artists[node].get_zorder() > artists[child].get_zorder()
    plt.close(fig)
