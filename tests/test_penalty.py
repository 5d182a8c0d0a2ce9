"""The split penalty (`ccp_alpha`) against a brute force with the same rule.

`PrunedBruteForce` (tests/helpers.py) minimises `loss + penalty * splits` over trees of
depth at most d, nodes free to stay leaves, straight from the definition.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BruteForce, PrunedBruteForce, random_problem, seed_of

import qbnb_jax

ALPHAS = [0.005, 0.02, 0.05, 0.1, 0.3]
BOUNDS = ["w0", "w1", "w2", "l2"]
CASES = [
    (task, k, depth, weights)
    for task, k in [("classification", 2), ("classification", 3), ("classification", 4),
                    ("regression", 1), ("regression", 2)]
    for depth in (1, 2, 3)
    for weights in ("ones", "int", "float")
]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-7 * max(1.0, abs(a), abs(b))


def _check(problem, task, depth, alpha, bound="w0", s=3):
    W = float(problem.w.sum())
    oracle = PrunedBruteForce(problem.X, problem.y, problem.w, task, penalty=alpha * W)
    expected = oracle.pruned(depth)
    result = qbnb_jax.solve(problem.X, problem.y, task=task, depth=depth,
                            sample_weight=problem.w, ccp_alpha=alpha, bound=bound, s=s)
    tree = result.tree
    splits = tree.n_nodes - tree.n_leaves
    assert result.status == "optimal"
    assert tree.max_depth <= depth
    assert _close(result.penalized_objective, expected), (result, expected)
    assert _close(result.penalized_objective, result.objective + alpha * W * splits)
    assert result.lower_bound <= result.penalized_objective + 1e-12
    assert result.gap <= 1e-7 * max(1.0, expected)
    return result


@pytest.mark.parametrize("task,k,depth,weights", CASES)
def test_matches_pruned_brute_force(task, k, depth, weights):
    rng = np.random.default_rng(seed_of("penalty", task, k, depth, weights))
    for draw in range(3 if depth < 3 else 2):
        n = int(rng.integers(6, 13 if depth == 3 else 22))
        problem = random_problem(rng, task, n, int(rng.integers(1, 4)), k=k, weights=weights)
        if problem.w.sum() == 0:
            continue
        alpha = float(rng.choice(ALPHAS))
        bound = BOUNDS[(draw + depth) % len(BOUNDS)]
        _check(problem, task, depth, alpha, bound=bound, s=int(rng.integers(2, 5)))


def test_penalty_stops_early():
    """A leaf that gains nothing from a split stays a leaf, above the last level too."""
    X = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]])
    y = np.array([0, 0, 0, 0, 1, 1, 1, 0])  # one split on the left side gains nothing
    unpenalised = qbnb_jax.solve(X, y, task="classification", depth=2)
    assert unpenalised.objective == 0
    result = qbnb_jax.solve(X, y, task="classification", depth=2, ccp_alpha=0.1)
    # the stump (loss 1, 0.8 for its split) loses to the right child's split (0.8 more)
    assert result.tree.n_leaves == 3
    assert result.objective == 0
    assert _close(result.penalized_objective, 2 * 0.1 * 8)
    big = qbnb_jax.solve(X, y, task="classification", depth=2, ccp_alpha=1.0)
    assert big.tree.n_leaves == 1 and big.objective == 3


def test_larger_problem_prunes_and_matches():
    """More samples, so the W1/W2 windows and slack shrinking run on real pieces."""
    rng = np.random.default_rng(7)
    for task, k in [("classification", 3), ("regression", 1)]:
        problem = random_problem(rng, task, 60, 3, k=k, weights="float")
        for bound in BOUNDS:
            _check(problem, task, 2, 0.02, bound=bound)


@pytest.mark.parametrize("task,k", [("classification", 3), ("regression", 2)])
def test_zero_penalty_is_the_perfect_tree_problem(task, k):
    rng = np.random.default_rng(seed_of("penalty zero", task))
    problem = random_problem(rng, task, 14, 2, k=k, weights="int")
    oracle = PrunedBruteForce(problem.X, problem.y, problem.w, task)
    perfect = BruteForce(problem.X, problem.y, problem.w, task)
    for depth in (1, 2, 3):
        assert _close(oracle.pruned(depth), perfect.best(depth))
        result = qbnb_jax.solve(problem.X, problem.y, task=task, depth=depth,
                                sample_weight=problem.w, ccp_alpha=0.0)
        assert result.penalized_objective == result.objective


@pytest.mark.parametrize("alpha", [-0.1, np.nan, np.inf, "0.1", True, None])
def test_bad_ccp_alpha(alpha):
    X, y = np.arange(6.0)[:, None], np.array([0, 1, 0, 1, 1, 0])
    with pytest.raises(ValueError, match="ccp_alpha"):
        qbnb_jax.solve(X, y, task="classification", ccp_alpha=alpha)


def test_appendix_route_refuses_a_penalty():
    X, y = np.arange(6.0)[:, None], np.array([0, 1, 0, 1, 1, 0])
    with pytest.raises(ValueError, match="ccp_alpha"):
        qbnb_jax.solve(X, y, task="classification", depth=3, route="appendix", ccp_alpha=0.1)


LEAF_CASES = [
    (task, k, depth, leaves, weights)
    for task, k in [("classification", 2), ("classification", 4), ("regression", 1),
                    ("regression", 2)]
    for depth, leaves in [(1, 2), (2, 2), (2, 3), (2, 4), (3, 2), (3, 3), (3, 5), (3, 8)]
    for weights in ("int", "float")
]


@pytest.mark.parametrize("task,k,depth,leaves,weights", LEAF_CASES)
def test_max_leaf_nodes_matches_brute_force(task, k, depth, leaves, weights):
    rng = np.random.default_rng(seed_of("leaves", task, k, depth, leaves, weights))
    for draw in range(3 if depth < 3 else 1):
        n = int(rng.integers(6, 12 if depth == 3 else 22))
        problem = random_problem(rng, task, n, int(rng.integers(1, 4)), k=k, weights=weights)
        if problem.w.sum() == 0:
            continue
        alpha = float(rng.choice([0.0, 0.0, 0.01, 0.05]))
        oracle = PrunedBruteForce(problem.X, problem.y, problem.w, task,
                                  penalty=alpha * problem.w.sum())
        expected = oracle.pruned(depth, leaves)
        result = qbnb_jax.solve(problem.X, problem.y, task=task, depth=depth,
                                sample_weight=problem.w, ccp_alpha=alpha,
                                max_leaf_nodes=leaves, bound=BOUNDS[draw % len(BOUNDS)])
        assert result.status == "optimal"
        assert result.tree.n_leaves <= leaves
        assert _close(result.penalized_objective, expected), (result, expected)
        assert result.lower_bound <= result.penalized_objective + 1e-12


def test_three_leaves_beat_a_stump_and_lose_to_four():
    X = np.arange(8.0)[:, None]
    y = np.array([0, 0, 1, 1, 1, 0, 0, 1])  # runs 00 111 00 1
    three = qbnb_jax.solve(X, y, task="classification", depth=2, max_leaf_nodes=3)
    assert three.tree.n_leaves == 3
    assert qbnb_jax.solve(X, y, task="classification", depth=1).objective == 2
    assert three.objective == 1
    assert qbnb_jax.solve(X, y, task="classification", depth=2).objective == 0


@pytest.mark.parametrize("leaves", [1, 0, 2.0, "3", True])
def test_bad_max_leaf_nodes(leaves):
    X, y = np.arange(6.0)[:, None], np.array([0, 1, 0, 1, 1, 0])
    with pytest.raises(ValueError, match="max_leaf_nodes"):
        qbnb_jax.solve(X, y, task="classification", max_leaf_nodes=leaves)


def test_unsupported_leaf_budget_is_refused():
    X, y = np.arange(6.0)[:, None], np.array([0, 1, 0, 1, 1, 0])
    with pytest.raises(ValueError, match="max_leaf_nodes=5 with depth=4"):
        qbnb_jax.solve(X, y, task="classification", depth=4, max_leaf_nodes=5)
    with pytest.raises(ValueError, match="max_leaf_nodes=5 needs route='recursion'"):
        qbnb_jax.solve(X, y, task="classification", depth=3, max_leaf_nodes=5,
                       route="appendix")


def test_estimators_pass_the_pruning_options():
    from qbnb_jax import OptimalTreeClassifier, OptimalTreeRegressor

    rng = np.random.default_rng(3)
    for est, task, k in [(OptimalTreeClassifier, "classification", 3),
                         (OptimalTreeRegressor, "regression", 1)]:
        problem = random_problem(rng, task, 20, 2, k=k, weights="float")
        model = est(max_depth=2, ccp_alpha=0.02, max_leaf_nodes=3).fit(
            problem.X, problem.y, sample_weight=problem.w)
        expected = PrunedBruteForce(problem.X, problem.y, problem.w, task,
                                    penalty=0.02 * problem.w.sum()).pruned(2, 3)
        assert model.get_n_leaves() <= 3
        assert _close(model.penalized_objective_, expected)
        assert model.lower_bound_ <= model.penalized_objective_ + 1e-12


@pytest.mark.parametrize("name,value", [("ccp_alpha", -1.0), ("ccp_alpha", np.inf),
                                        ("max_leaf_nodes", 1), ("max_leaf_nodes", 2.5)])
def test_estimator_refuses_bad_pruning_options(name, value):
    from qbnb_jax import OptimalTreeClassifier

    with pytest.raises(ValueError, match=name):
        OptimalTreeClassifier(**{name: value}).fit(np.arange(6.0)[:, None], [0, 1] * 3)


@pytest.mark.parametrize("depth,leaves", [(2, None), (2, 3), (3, None), (3, 5)])
def test_time_limit_keeps_a_valid_bound(depth, leaves):
    rng = np.random.default_rng(seed_of("penalty time", depth, leaves))
    problem = random_problem(rng, "classification", 12, 3, k=3, weights="float")
    alpha = 0.02
    expected = PrunedBruteForce(problem.X, problem.y, problem.w, "classification",
                                penalty=alpha * problem.w.sum()).pruned(depth, leaves)
    result = qbnb_jax.solve(problem.X, problem.y, task="classification", depth=depth,
                            sample_weight=problem.w, ccp_alpha=alpha, max_leaf_nodes=leaves,
                            time_limit=1e-9)
    assert result.status == "time_limit"
    assert result.lower_bound <= expected + 1e-9
    assert result.penalized_objective >= expected - 1e-9
    assert result.tree.n_leaves <= (leaves or 2**depth)


def test_pruned_trees_export(tmp_path):
    """A non-perfect tree goes through to_sklearn, the text export and a tree file."""
    from qbnb_jax import OptimalTreeClassifier, export_text, load_tree, save_tree

    X = np.arange(8.0)[:, None]
    y = np.array([0, 0, 0, 0, 1, 1, 1, 0])
    clf = OptimalTreeClassifier(max_depth=3, ccp_alpha=0.1).fit(X, y)
    assert clf.get_n_leaves() == 3 and clf.get_depth() == 2
    np.testing.assert_array_equal(clf.to_sklearn().predict(X), clf.predict(X))
    assert export_text(clf).count("class:") == 3
    save_tree(clf, tmp_path / "tree.json")
    loaded = load_tree(tmp_path / "tree.json")
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
    assert loaded.ccp_alpha == 0.1
    assert _close(loaded.penalized_objective_, clf.penalized_objective_)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_depth4_penalty_matches_brute_force(task):
    rng = np.random.default_rng(seed_of("penalty depth 4", task))
    for leaves in (None, 2):
        problem = random_problem(rng, task, 8, 2, k=2, weights="float")
        if problem.w.sum() == 0:
            continue
        oracle = PrunedBruteForce(problem.X, problem.y, problem.w, task,
                                  penalty=0.02 * problem.w.sum())
        result = qbnb_jax.solve(problem.X, problem.y, task=task, depth=4,
                                sample_weight=problem.w, ccp_alpha=0.02, max_leaf_nodes=leaves)
        assert _close(result.penalized_objective, oracle.pruned(4, leaves))


def test_three_leaf_progress_reports_one_solve():
    X = np.arange(8.0)[:, None]
    y = np.array([0, 0, 1, 1, 1, 0, 0, 1])
    seen = []
    result = qbnb_jax.solve(X, y, task="classification", depth=2, max_leaf_nodes=3,
                            progress=seen.append)
    assert seen and seen[-1]["incumbent"] == result.penalized_objective == 1
    assert all(info["active"] + info["solved"] == 1 for info in seen)
