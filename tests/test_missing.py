"""Missing values (NaN) in X: every split also chooses the side missing values go to,
and the tree is optimal over those choices (docs/design.md, "Missing values").

The oracle is `helpers.BruteForce`, whose candidate splits list both sides for the
missing values of every threshold, written from the definition alone.
"""

from __future__ import annotations

import functools
import json
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import brute_force, partition_loss, prediction_loss, random_problem, seed_of
from sklearn.utils import get_tags

from qbnb_jax import (
    OptimalTreeClassifier,
    OptimalTreeRegressor,
    Tree,
    export_graphviz,
    export_text,
    solve,
    solve_batch,
)
from qbnb_jax._problem.data import make_problem

SHAPES = {"classification": (2, 3, 4), "regression": (1, 2)}  # classes / targets
N_CASES = 6


def with_missing(rng: np.random.Generator, X: np.ndarray) -> np.ndarray:
    """X with 10-40% missing entries in some columns and, sometimes, one column all
    missing; at least one NaN."""
    X = X.copy()
    n, p = X.shape
    for j in range(p):
        if rng.random() < 0.6:
            X[rng.random(n) < rng.uniform(0.1, 0.4), j] = np.nan
    if p > 1 and rng.random() < 0.25:
        X[:, int(rng.integers(0, p))] = np.nan
    if not np.isnan(X).any():
        X[int(rng.integers(0, n)), int(rng.integers(0, p))] = np.nan
    return X


@functools.cache
def cases(task: str, depth: int, count: int = N_CASES, largest: int = 12) -> tuple:
    rng = np.random.default_rng(seed_of("missing", task, depth, count))
    out = []
    for it in range(count):
        k = SHAPES[task][it % len(SHAPES[task])]
        n = int(rng.integers(5, largest + 1 if depth < 3 else min(largest, 9) + 1))
        P = random_problem(rng, task, n, int(rng.integers(1, 4)), k,
                           weights=("int", "float")[it % 2])
        if not (P.w > 0).any():
            P.w[0] = 1.0
        P.X = with_missing(rng, P.X)
        out.append(P)
    return tuple(out)


def route(tree: Tree, X: np.ndarray) -> np.ndarray:
    """Leaf of each row, walking from the root: NaN goes where the node says."""
    leaves = np.empty(len(X), dtype=np.int64)
    for i, x in enumerate(X):
        node = 0
        while tree.feature[node] >= 0:
            value = x[tree.feature[node]]
            left = (tree.missing_go_to_left[node] if np.isnan(value)
                    else value <= tree.threshold[node])
            node = tree.children_left[node] if left else tree.children_right[node]
        leaves[i] = node
    return leaves


def tolerance(P, want: float) -> float:
    if P.task == "classification" and np.all(P.w == np.round(P.w)):
        return 0.0
    return 1e-9 * max(1.0, abs(want), float(P.w.sum()))


@pytest.mark.parametrize("it", range(N_CASES))
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_random_problems_match_brute_force(task, depth, it):
    check_against_brute_force(cases(task, depth)[it], task, depth, it)


@pytest.mark.slow
@pytest.mark.parametrize("it", range(40))
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_random_problems_match_brute_force_long(task, depth, it):
    P = cases(task, depth, 40, 24 if depth < 3 else 11)[it]
    check_against_brute_force(P, task, depth, it)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_depth4_matches_brute_force(task):
    rng = np.random.default_rng(seed_of("missing depth 4", task))
    P = random_problem(rng, task, 8, 2, 2, weights="int")
    P.w[0] = 1.0
    P.X = with_missing(rng, P.X)
    check_against_brute_force(P, task, 4, 0)


def check_against_brute_force(P, task: str, depth: int, it: int) -> None:
    want = brute_force(P.X, P.y, P.w, task=task, depth=depth)
    res = solve(P.X, P.y, task=task, depth=depth, sample_weight=P.w)
    tol = tolerance(P, want)
    ctx = (task, depth, it, res.objective, want)
    assert res.status == "optimal", ctx
    assert abs(res.objective - want) <= tol, ctx
    # the pruning tolerance of docs/design.md (zero for integer counts)
    root = brute_force(P.X, P.y, P.w, task=task, depth=0)
    gap_tol = 0.0 if tol == 0 else 1e-9 * abs(want) + 1e-10 * max(1.0, root)
    assert res.lower_bound <= res.objective and res.gap <= gap_tol, ctx
    tree = res.tree
    tree.check()
    assert tree.missing_go_to_left is not None and tree.max_depth <= depth
    assert res.n_features == P.p and tree.feature.max(initial=-1) < P.p
    leaves = route(tree, P.X)
    np.testing.assert_array_equal(tree.apply(P.X), leaves)
    assert abs(partition_loss(leaves, P.y, P.w, task) - res.objective) <= tol + 1e-12, ctx
    pred = res.predict(P.X)
    got = prediction_loss(pred, P.y, P.w, task)
    assert abs(got - res.objective) <= tol + 1e-9 * max(1.0, want), ctx


def test_the_missing_values_alone_can_be_split_off():
    X = np.array([[1.0], [2.0], [3.0], [np.nan], [np.nan], [np.nan]])
    y = np.array([0, 0, 0, 1, 1, 1])
    res = solve(X, y, task="classification", depth=1)
    assert res.objective == 0
    np.testing.assert_array_equal(res.predict([[np.nan], [0.5], [2.5], [3.5]]), [1, 0, 0, 0])
    # Without choosing a side for NaN (they would all go right, as NaN <= t is False)
    # one split cannot separate {1, 2, 3} from the missing rows when 3 goes with them.
    y2 = np.array([0, 0, 1, 1, 1, 0])
    X2 = np.array([[1.0], [2.0], [3.0], [np.nan], [np.nan], [4.0]])
    assert solve(X2, y2, task="classification", depth=1).objective == 1
    assert brute_force(X2, y2, task="classification", depth=1) == 1


def test_a_column_without_real_values_is_never_split():
    X = np.column_stack([np.full(6, np.nan), [0, 1, 2, 3, 4, 5]])
    y = np.array([0, 0, 0, 1, 1, 1])
    res = solve(X, y, task="classification", depth=2)
    assert res.objective == 0
    assert set(res.tree.feature[res.tree.feature >= 0].tolist()) == {1}


def test_only_columns_with_nan_are_doubled_and_nan_free_problems_are_unchanged():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20, 3))
    assert make_problem(X, rng.integers(0, 2, 20), task="classification").missing is None
    X[[2, 5], 1] = np.nan
    problem = make_problem(X, rng.integers(0, 2, 20), task="classification")
    assert problem.p == 4 and problem.n_features == 3
    np.testing.assert_array_equal(problem.missing.original, [0, 1, 2, 1])
    np.testing.assert_array_equal(problem.missing.missing_left, [False, True, False, False])
    assert np.isfinite(problem.X).all()
    res = solve(np.nan_to_num(X), rng.integers(0, 2, 20), task="classification", depth=1)
    assert res.tree.missing_go_to_left is None and "missing_go_to_left" not in res.tree.to_dict()


def test_node_that_saw_no_missing_values_sends_them_to_the_heavier_child():
    # feature 0 has no NaN: NaN at predict time goes to the child with more weight
    X = np.array([[0.0, 1], [1, 1], [2, 1], [3, 1], [4, 1], [5, np.nan]])
    y = np.array([0, 0, 0, 0, 1, 1])
    res = solve(X, y, task="classification", depth=1, sample_weight=[1, 1, 1, 1, 5, 5])
    tree = res.tree
    assert tree.feature[0] == 0
    heavier = tree.weighted_n_node_samples[1] > tree.weighted_n_node_samples[2]
    assert bool(tree.missing_go_to_left[0]) == heavier
    loaded = Tree.from_dict({k: v for k, v in tree.to_dict().items()
                             if k != "missing_go_to_left"})  # a file from before
    assert loaded.missing_go_to_left is None
    np.testing.assert_array_equal(loaded.missing_directions(), tree.missing_go_to_left)


def test_saved_estimators_and_results_keep_the_missing_directions(tmp_path):
    from qbnb_jax import load_tree, save_tree

    X = np.array([[1.0, 0], [2.0, 1], [3.0, 0], [np.nan, 1], [np.nan, 0], [4.0, 1]])
    y = np.array([0, 0, 1, 1, 1, 0])
    clf = OptimalTreeClassifier(max_depth=2).fit(X, y)
    result = solve(X, y, task="classification", depth=2)
    X_new = np.array([[np.nan, np.nan], [2.5, np.nan], [np.nan, 0.5]])
    for i, obj in enumerate((clf, result)):
        path = tmp_path / f"tree{i}.json"
        save_tree(obj, str(path))
        loaded = load_tree(str(path))
        np.testing.assert_array_equal(loaded.predict(X_new), obj.predict(X_new))
        data = json.loads(path.read_text())
        data["tree"]["missing_go_to_left"][0] = 1
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="missing_go_to_left"):
            load_tree(str(path))


def test_solve_many_with_and_without_missing_values():
    from qbnb_jax import solve_many

    rng = np.random.default_rng(4)
    P = random_problem(rng, "regression", 10, 2, 1, weights="float")
    P.w[0] = 1.0
    datasets = [(with_missing(rng, P.X), P.y, P.w), (P.X, P.y, P.w)]
    for (X, y, w), got in zip(datasets, solve_many(datasets, task="regression", depth=2)):
        alone = solve(X, y, task="regression", depth=2, sample_weight=w)
        assert got.objective == alone.objective and got.n_features == 2
        assert got.tree.to_dict() == alone.tree.to_dict()


def test_tree_files_keep_the_missing_directions():
    X = np.array([[1.0], [2.0], [3.0], [np.nan], [np.nan], [4.0]])
    y = np.array([0, 0, 1, 1, 1, 0])
    tree = solve(X, y, task="classification", depth=2).tree
    loaded = Tree.from_dict(json.loads(json.dumps(tree.to_dict())))
    np.testing.assert_array_equal(loaded.missing_go_to_left, tree.missing_go_to_left)
    np.testing.assert_array_equal(loaded.apply(X), tree.apply(X))
    bad = dict(tree.to_dict(), missing_go_to_left=[1, 2] + [0] * (tree.n_nodes - 2))
    with pytest.raises(ValueError, match="missing_go_to_left"):
        Tree.from_dict(bad)


@pytest.mark.parametrize("depth, n_problems", [(1, 5), (2, 5), (2, 40), (3, 4)])
def test_batch_results_equal_single_solves(depth, n_problems):
    """A shared layout (integer weights; 32 or more two-class problems take the vector
    lanes) and per-problem layouts (fractional weights) alike."""
    rng = np.random.default_rng(seed_of("batch", depth, n_problems))
    P = random_problem(rng, "classification", 14, 3, 2, weights="ones")
    X = with_missing(rng, P.X)
    W = rng.integers(0, 3, size=(n_problems, len(X))).astype(float)
    W[:, 0] = 1
    if n_problems < 32:
        W[1] *= 0.5
    batch = solve_batch(X, P.y, W, task="classification", depth=depth)
    for i, (w, got) in enumerate(zip(W, batch)):
        alone = solve(X, P.y, task="classification", depth=depth, sample_weight=w)
        assert got.objective == alone.objective
        assert got.tree.to_dict() == alone.tree.to_dict()
        if i < 5:
            want = brute_force(X, P.y, w, task="classification", depth=depth)
            assert abs(got.objective - want) <= 1e-12 * max(1.0, want)


def test_infinity_is_still_refused():
    X = np.array([[1.0], [np.inf], [np.nan]])
    with pytest.raises(ValueError, match=r"X contains infinity \(first at row 1"):
        solve(X, [0, 1, 0], task="classification")
    with pytest.raises(ValueError, match="infinity"):
        OptimalTreeClassifier().fit(X, [0, 1, 0])


def test_no_finite_value_beyond_the_column_is_refused():
    big = np.finfo(np.float64).max
    X = np.array([[-big], [big], [np.nan]])
    with pytest.raises(ValueError, match="X column 0 has missing values"):
        solve(X, [0, 1, 0], task="classification")


MARKERS = {
    "pd.NA in Int64": lambda: pd.DataFrame(
        {"a": pd.array([1, 2, None, 4, 5, 6], dtype="Int64"), "b": np.arange(6.0)}),
    "pd.NA in Float64": lambda: pd.DataFrame(
        {"b": np.arange(6.0), "c": pd.array([1.0, None, 3, 4, 5, 6], dtype="Float64")}),
    "None in an object column": lambda: pd.DataFrame(
        {"o": pd.Series([1, 2, 3, None, 5, 6], dtype=object), "b": np.arange(6.0)}),
    "pd.NA in an object array": lambda: np.array(
        [[1.0, 0.0], [2.0, 1], [3.0, 2], [4.0, 3], [5.0, 4], [pd.NA, 5]], dtype=object),
}


@pytest.mark.parametrize("case", list(MARKERS))
def test_missing_markers_are_read_as_nan(case):
    y = np.array([0, 1, 0, 1, 1, 0])
    X = MARKERS[case]()
    as_nan = np.asarray(pd.DataFrame(X).astype(object).where(pd.DataFrame(X).notna(), np.nan),
                        dtype=np.float64)
    want = solve(as_nan, y, task="classification", depth=2)
    got = solve(X, y, task="classification", depth=2)
    assert got.objective == want.objective
    assert got.tree.to_dict() == want.tree.to_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = OptimalTreeClassifier(max_depth=2).fit(X, y)
        np.testing.assert_array_equal(clf.predict(X), want.predict(as_nan))
    assert clf.objective_ == want.objective


@pytest.mark.parametrize("Estimator", [OptimalTreeClassifier, OptimalTreeRegressor])
def test_estimators_fit_and_predict_with_nan(Estimator):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.3)
    X[rng.random(X.shape) < 0.3] = np.nan
    X = np.vstack([X, X[:5]])  # duplicates with NaN merge into one weighted row
    y = np.concatenate([y, y[:5]])
    est = Estimator(max_depth=2).fit(X, y)
    task = "classification" if Estimator is OptimalTreeClassifier else "regression"
    want = brute_force(X, y, task=task, depth=2)
    assert abs(est.objective_ - want) <= 1e-9 * max(1.0, want)
    assert est.n_features_in_ == 3 and est.feature_importances_.shape == (3,)
    assert est.tree_.node_sums(X, np.ones(len(X)))[0, 0] == len(X)
    X_new = rng.normal(size=(50, 3))
    X_new[rng.random(X_new.shape) < 0.4] = np.nan
    np.testing.assert_array_equal(est.apply(X_new), route(est.tree_, X_new))
    np.testing.assert_allclose(est.to_sklearn().predict(X_new), est.predict(X_new))
    np.testing.assert_array_equal(est.decision_path(X_new).toarray(),
                                  est.tree_.node_indicator(X_new))
    assert get_tags(est).input_tags.allow_nan


def test_nan_at_predict_for_features_without_nan_in_training():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] > 0.4).astype(int)
    clf = OptimalTreeClassifier(max_depth=1).fit(X, y)
    tree = clf.tree_
    assert tree.missing_go_to_left is None
    heavier = 1 if tree.weighted_n_node_samples[1] > tree.weighted_n_node_samples[2] else 2
    assert clf.apply([[np.nan, 0.0]])[0] == heavier
    sk = clf.to_sklearn()
    np.testing.assert_array_equal(sk.predict([[np.nan, 0.0]]), clf.predict([[np.nan, 0.0]]))


def test_exports_show_where_missing_values_go():
    X = np.array([[1.0], [2.0], [3.0], [np.nan], [np.nan], [4.0]])
    y = np.array([0, 0, 1, 1, 1, 0])
    clf = OptimalTreeClassifier(max_depth=1).fit(X, y)
    text = export_text(clf)
    assert text.count(" or missing") == 1
    left = bool(clf.tree_.missing_go_to_left[0])
    line = next(ln for ln in text.splitlines() if "or missing" in ln)
    assert ("<=" in line) == left
    assert ("or missing" in export_graphviz(clf)) == left
    X_clean = np.array([[1.0], [2.0], [3.0], [5.0], [6.0], [4.0]])
    assert "missing" not in export_text(OptimalTreeClassifier(max_depth=1).fit(X_clean, y))


def test_command_line_reads_empty_cells_and_nan_as_missing(tmp_path, capsys):
    from qbnb_jax._cli import main

    rows = [("1", "", "0"), ("2", "5", "0"), ("", "6", "1"), ("nan", "7", "1"),
            ("3", "NaN", "0"), ("4", "8", "1")]
    data = tmp_path / "data.csv"
    data.write_text("a,b,y\n" + "".join(",".join(r) + "\n" for r in rows))
    tree = str(tmp_path / "tree.json")
    assert main(["fit", str(data), "--target", "y", "--depth", "1", "-q",
                 "--output", tree]) == 0
    X = np.array([[np.nan if c.lower() in ("", "nan") else float(c) for c in r[:2]]
                  for r in rows])
    y = np.array([int(r[2]) for r in rows])
    clf = OptimalTreeClassifier(max_depth=1).fit(X, y)
    assert float(summary_line(capsys.readouterr().out, "objective")) == clf.objective_ == 0
    pred = tmp_path / "pred.csv"
    assert main(["predict", tree, str(data), "--output", str(pred)]) == 0
    assert pred.read_text().split()[1:] == [str(v) for v in clf.predict(X)]
    bad = tmp_path / "inf.csv"
    bad.write_text("a,b,y\n1,inf,0\n2,3,1\n")
    assert main(["fit", str(bad), "--target", "y", "-q"]) == 2
    assert "infinity is not allowed" in capsys.readouterr().err


def summary_line(stdout: str, key: str) -> str:
    return next(line.split(": ", 1)[1] for line in stdout.splitlines()
                if line.startswith(key + ": "))


def test_bagged_ensembles_fit_and_predict_with_nan():
    from qbnb_jax import BaggedOptimalTreeClassifier

    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(int)
    X[rng.random(X.shape) < 0.3] = np.nan
    bag = BaggedOptimalTreeClassifier(n_estimators=3, max_depth=1, random_state=0).fit(X, y)
    proba = bag.predict_proba(X)
    want = np.mean([m.predict_proba(X) for m in bag.estimators_], axis=0)
    np.testing.assert_allclose(proba, want)
    assert all(m.tree_.missing_go_to_left is not None for m in bag.estimators_)


def test_select_depth_scores_rows_with_missing_values():
    from qbnb_jax import select_depth

    rng = np.random.default_rng(9)
    X = rng.normal(size=(24, 2))
    y = (X[:, 0] > 0).astype(int)
    X[rng.random(X.shape) < 0.25] = np.nan
    sel = select_depth(X, y, task="classification", depths=(1, 2), cv=3, random_state=0)
    assert np.isfinite(sel.scores).all() and sel.best_depth in (1, 2)
