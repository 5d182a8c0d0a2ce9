"""scikit-learn estimators around `qbnb_jax.solve`.

`OptimalTreeClassifier` and `OptimalTreeRegressor` follow the conventions of
`sklearn.tree.DecisionTreeClassifier`: a keyword-only `__init__` that stores its
parameters verbatim, all validation in `fit`, `validate_data` /
`check_is_fitted` from scikit-learn's public API, and fitted attributes with a trailing
underscore. The fitted tree (`tree_`) is a `qbnb_jax._problem.tree.Tree` of host numpy arrays,
so estimators pickle and `clone` like any scikit-learn estimator.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from collections.abc import Callable
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from qbnb_jax._constants import BOUNDS, SUPPORTED_DEPTHS
from qbnb_jax._problem.data import check_values, missing_as_nan, weight_values
from qbnb_jax._problem.tree import LEAF, Tree


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


# name -> (accepts value?, what the value must be). Checked at the start of `fit`.
_PARAMETER_CONSTRAINTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_depth": (lambda v: v is None or (_is_int(v) and v in SUPPORTED_DEPTHS),
                  f"None or an int in the range [{SUPPORTED_DEPTHS[0]}, {SUPPORTED_DEPTHS[-1]}]"),
    "bound": (lambda v: isinstance(v, str) and v in BOUNDS, f"a str among {list(BOUNDS)}"),
    "time_limit": (
        lambda v: v is None or (_is_real(v) and not math.isnan(v) and v > 0),
        "None or a float in the range (0, inf]",
    ),
    "verbose": (
        lambda v: isinstance(v, bool) or (_is_int(v) and v >= 0),
        "a bool or an int in the range [0, inf)",
    ),
    "s": (lambda v: _is_int(v) and v >= 2, "an int in the range [2, inf)"),
    "min_samples_leaf": (
        lambda v: (_is_int(v) and v >= 1) or (_is_real(v) and not _is_int(v) and 0 < v < 1),
        "an int in the range [1, inf) or a float in the range (0.0, 1.0)"),
    "min_weight_fraction_leaf": (lambda v: _is_real(v) and 0 <= v <= 0.5,
                                 "a float in the range [0.0, 0.5]"),
    "ccp_alpha": (lambda v: _is_real(v) and math.isfinite(v) and v >= 0,
                  "a float in the range [0, inf)"),
    "max_leaf_nodes": (lambda v: v is None or (_is_int(v) and v >= 2),
                       "None or an int in the range [2, inf)"),
    "max_gap": (lambda v: v is None or (_is_real(v) and 0 <= v <= 1),
                "None or a float in the range [0, 1]"),
}


def solver_depth(max_depth: int | None) -> int:
    """`max_depth` as `solve` takes it: None is the deepest supported depth."""
    return SUPPORTED_DEPTHS[-1] if max_depth is None else int(max_depth)


def _solver_time_limit(time_limit: Any) -> float | None:
    """`time_limit` as `solve` takes it: a float, or None for no limit (also for inf)."""
    if time_limit is None or math.isinf(time_limit):
        return None
    return float(time_limit)


def _get_solve() -> Callable[..., Any]:
    """`qbnb_jax.solve`, looked up at call time (the package imports this module)."""
    import qbnb_jax

    return qbnb_jax.solve


def format_progress(info: dict[str, Any]) -> str:
    """One human-readable line for a `progress` dict of `qbnb_jax.solve`."""

    def num(key: str, fmt: str) -> str:
        value = info.get(key)
        if value is None:
            return "-"
        try:
            return format(value, fmt)
        except (TypeError, ValueError):
            return str(value)

    return (
        f"iter {num('iteration', '>4')}  frontier {num('frontier', '>8')}  "
        f"incumbent {num('incumbent', '.6g')}  lower bound {num('lower_bound', '.6g')}  "
        f"gap {num('gap', '.3g')}  elapsed {num('elapsed', '.2f')}s"
    )


def print_progress(info: dict[str, Any]) -> None:
    """A `progress` callback that prints `format_progress(info)` to stderr."""
    print(format_progress(info), file=sys.stderr, flush=True)


def _canonical_rows(
    X: np.ndarray, y_cols: np.ndarray, sample_weight: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Merge identical `(x, y)` rows (summing weights) and sort rows lexicographically.

    The optimal objective is unchanged, but the solver then sees the same problem
    whatever the row order and whether a sample is repeated or weighted, so ties
    between equally good trees are broken the same way in all those cases.
    Returns `(X, y_cols, weights)`; `weights` is None when every merged weight is 1
    and no weights were given. Missing values (NaN) are equal to each other here.
    """
    missing = np.isnan(X)
    if missing.any():  # NaN != NaN: rows are told apart by a flag and a 0 in its place
        Z = np.concatenate([missing, np.where(missing, 0.0, X), y_cols], axis=1)
    else:
        Z = np.concatenate([X, y_cols], axis=1)
    rows, inverse = np.unique(Z, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    weights = np.ones(X.shape[0]) if sample_weight is None else sample_weight
    merged = np.bincount(inverse, weights=weights, minlength=rows.shape[0])
    if sample_weight is None and rows.shape[0] == X.shape[0]:
        merged_out = None
    else:
        merged_out = merged
    p = X.shape[1]
    if missing.any():
        flags, rows = rows[:, :p] != 0, rows[:, p:]
        rows[:, :p][flags] = np.nan
    return rows[:, :p], rows[:, p:], merged_out


def _check_sample_weight(sample_weight: Any, n: int) -> np.ndarray | None:
    if sample_weight is None:
        return None
    w = weight_values(sample_weight, n)  # the types `solve` accepts, refused alike
    if w.shape != (n,):
        raise ValueError(f"sample_weight.shape == {w.shape}, expected {(n,)}!")
    if not np.all(np.isfinite(w)):
        raise ValueError("sample_weight contains NaN or infinity.")
    if np.any(w < 0):
        raise ValueError("Negative values in data passed to sample_weight.")
    if not np.any(w > 0):
        raise ValueError("sample_weight is zero everywhere: there is nothing to fit.")
    return w


def _widen_classes(tree: Tree, solved_classes: Any, n_classes: int) -> Tree:
    """Give `tree.value` one column per class code `0..n_classes-1`.

    The solver numbers the classes it saw; a class whose samples all have zero weight
    may be missing there but is still in `classes_`.
    """
    if solved_classes is None:
        return tree
    codes = np.asarray(solved_classes).astype(np.int64)
    if tree.value.shape[1] == n_classes and np.array_equal(codes, np.arange(n_classes)):
        return tree
    value = np.zeros((tree.n_nodes, n_classes))
    value[:, codes] = tree.value
    return dataclasses.replace(tree, value=value)


class _BaseOptimalTree(BaseEstimator):
    """Shared parameters, fitting and tree accessors."""

    _task: str = ""
    _parameter_constraints = _PARAMETER_CONSTRAINTS

    def __init__(
        self,
        *,
        max_depth: int = 2,
        bound: str = "w0",
        time_limit: float | None = None,
        verbose: bool | int = False,
        s: int = 3,
        min_samples_leaf: int | float = 1,
        min_weight_fraction_leaf: float = 0.0,
        ccp_alpha: float = 0.0,
        max_leaf_nodes: int | None = None,
        max_gap: float | None = None,
    ) -> None:
        self.max_depth = max_depth
        self.bound = bound
        self.time_limit = time_limit
        self.verbose = verbose
        self.s = s
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.ccp_alpha = ccp_alpha
        self.max_leaf_nodes = max_leaf_nodes
        self.max_gap = max_gap

    # -- validation -------------------------------------------------------------

    def _validate_params(self) -> None:
        for name, (accepts, expected) in self._parameter_constraints.items():
            value = getattr(self, name)
            if not accepts(value):
                raise ValueError(
                    f"The {name!r} parameter of {type(self).__name__} must be {expected}. "
                    f"Got {value!r} instead."
                )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def _validate_X_predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, missing_as_nan(X), dtype=np.float64, reset=False,
                          ensure_all_finite="allow-nan")
        needed = int(self.tree_.feature.max(initial=LEAF)) + 1
        if X.shape[1] < needed:  # only possible for trees loaded without n_features_in_
            raise ValueError(
                f"X has {X.shape[1]} features, but the tree splits on feature {needed - 1}."
            )
        return X

    # -- fitting ---------------------------------------------------------------

    def _encode_y(self, y: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Float columns `(n, k)` to merge rows on, and the label attributes to set."""
        raise NotImplementedError  # pragma: no cover - abstract

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "tree_")

    def _weigh_classes(self, y: np.ndarray, sample_weight: np.ndarray | None):
        """Sample weights with any per-class weights folded in (classifiers)."""
        return sample_weight

    def _fit(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> _BaseOptimalTree:
        """`fit` with an explicit progress callback (used by the command line)."""
        self._validate_params()
        X, y = self._validate_data_fit(X, y)
        n = X.shape[0]
        sw = self._weigh_classes(y, _check_sample_weight(sample_weight, n))
        y_cols, label_attrs = self._encode_y(y)  # float (n, k): class codes or targets
        if self.min_samples_leaf == 1:
            Xc, yc, wc = _canonical_rows(X, y_cols, sw)
        else:  # merged rows would count as one row of a leaf
            Xc, yc, wc = X, y_cols, sw

        if self._task == "classification":
            y_solve: np.ndarray = yc[:, 0].astype(np.int64)
        elif yc.shape[1] == 1:
            y_solve = yc[:, 0]
        else:
            y_solve = yc

        if progress is None and self.verbose:
            progress = print_progress
        result = _get_solve()(
            Xc,
            y_solve,
            task=self._task,
            depth=solver_depth(self.max_depth),
            sample_weight=wc,
            bound=self.bound,
            s=self.s,
            time_limit=_solver_time_limit(self.time_limit),
            progress=progress,
            **self._leaf_limits(),
            **self._pruning_options(),
            max_gap=None if self.max_gap is None else float(self.max_gap),
        )
        self._adopt(result, label_attrs)
        self._node_impurity = self._impurity_of_nodes(Xc, yc, wc)
        self._node_samples = self.tree_.node_sums(X, np.ones(len(X)))[:, 0].astype(np.int64)
        if self.status_ == "time_limit":
            warnings.warn(
                f"{type(self).__name__} stopped with status {self.status_!r} before proving "
                f"optimality: objective {self.objective_:.6g}, lower bound "
                f"{self.lower_bound_:.6g}. Increase time_limit for a proved optimum.",
                ConvergenceWarning,
                stacklevel=3,
            )
        return self

    def _leaf_limits(self) -> dict[str, Any]:
        """The leaf limits for `solve`, only where they limit (so that a `solve`
        without them, such as a test's stand-in, is called as before)."""
        limits = {}
        if self.min_samples_leaf != 1:
            limits["min_samples_leaf"] = self.min_samples_leaf
        if self.min_weight_fraction_leaf != 0:
            limits["min_weight_fraction_leaf"] = self.min_weight_fraction_leaf
        return limits
    def _pruning_options(self) -> dict[str, Any]:
        """`ccp_alpha` and `max_leaf_nodes` for `solve`, left out at their defaults."""
        options: dict[str, Any] = {}
        if self.ccp_alpha:
            options["ccp_alpha"] = float(self.ccp_alpha)
        if self.max_leaf_nodes is not None:
            options["max_leaf_nodes"] = int(self.max_leaf_nodes)
        return options

    def _adopt(self, result: Any, label_attrs: dict[str, Any]) -> None:
        """Take the fitted attributes from a `SolveResult` of this estimator's task
        (`fit`, and the members of a bagged ensemble)."""
        tree = result.tree
        if self._task == "classification":
            tree = _widen_classes(tree, result.classes, len(label_attrs["classes_"]))
        for name, value in label_attrs.items():
            setattr(self, name, value)
        self.tree_ = tree
        self.objective_ = float(result.objective)
        penalized = getattr(result, "penalized_objective", None)
        self.penalized_objective_ = float(result.objective if penalized is None else penalized)
        self.lower_bound_ = float(result.lower_bound)
        self.gap_ = float(result.gap)
        self.status_ = str(result.status)
        stats = dict(getattr(result, "stats", None) or {})
        self.n_iter_ = int(stats.get("iterations", 0))
        self.solve_stats_ = stats

    # -- accessors -------------------------------------------------------------

    def apply(self, X: Any) -> np.ndarray:
        """Return the index of the leaf that each sample lands in.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The input samples.

        Returns
        -------
        X_leaves : ndarray of shape (n_samples,)
            For each sample, the index of its leaf in `tree_` (nodes are numbered in
            depth-first preorder, the root is 0).
        """
        X = self._validate_X_predict(X)
        return self.tree_.apply(X)

    def decision_path(self, X: Any):
        """Return the nodes each sample passes through, as scikit-learn's trees do.

        Returns
        -------
        indicator : sparse matrix of shape (n_samples, n_nodes)
            Nonzero where the sample passes through the node (CSR, as scikit-learn).
        """
        from scipy.sparse import csr_matrix

        X = self._validate_X_predict(X)
        return csr_matrix(self.tree_.node_indicator(X).astype(np.int64))

    @property
    def feature_importances_(self) -> np.ndarray:
        """Weighted impurity decrease of each feature's splits, normalised to sum to 1
        (scikit-learn's definition: Gini impurity for classifiers, squared error for
        regressors, from the training data)."""
        check_is_fitted(self)
        impurity = self._known_node_impurity()
        if impurity is None:
            raise AttributeError(
                "feature_importances_ needs the node impurities of the training data, "
                "which a tree loaded from a file does not carry")
        return self.tree_.impurity_decrease(impurity, self.n_features_in_)

    def _impurity_of_nodes(self, X: np.ndarray, y_cols: np.ndarray, w: np.ndarray | None):
        """Per node: Gini impurity (classification, from the class counts) or the mean
        over targets of the weighted variance (regression, from the training rows)."""
        tree = self.tree_
        if self._task == "classification":
            total = np.maximum(tree.weighted_n_node_samples, 1e-300)[:, None]
            return 1.0 - np.sum((tree.value / total) ** 2, axis=1)
        w = (np.ones(len(X)) if w is None else w)[:, None]
        k = y_cols.shape[1]
        sums = tree.node_sums(X, np.hstack([w, w * y_cols, w * y_cols**2]))
        weight = np.maximum(sums[:, :1], 1e-300)
        mean, square = sums[:, 1 : 1 + k] / weight, sums[:, 1 + k :] / weight
        return np.maximum(square - mean**2, 0.0).mean(axis=1)

    def to_sklearn(self):
        """The fitted tree as a fitted scikit-learn `DecisionTreeClassifier` or
        `DecisionTreeRegressor`, with the same splits and predictions, so that
        scikit-learn's own `plot_tree`, `export_graphviz` and `export_text` draw it.

        Node impurities and sample counts are those of the training data (Gini for a
        classifier, squared error for a regressor), as scikit-learn stores them.
        scikit-learn's `predict` compares float32 copies of X with the (float64)
        thresholds: a value within float32 rounding of a threshold (about 1e-7
        relative) can go the other way than in this estimator's `predict`, and
        training values that differ only below float32 precision cannot be told
        apart there.
        """
        from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
        from sklearn.tree._tree import NODE_DTYPE, TREE_LEAF, TREE_UNDEFINED, Tree as SklearnTree

        check_is_fitted(self)
        impurity = self._node_impurity_or_nan()
        tree = self.tree_
        leaf = tree.feature == LEAF
        nodes = np.zeros(tree.n_nodes, dtype=NODE_DTYPE)
        nodes["left_child"] = np.where(leaf, TREE_LEAF, tree.children_left)
        nodes["right_child"] = np.where(leaf, TREE_LEAF, tree.children_right)
        nodes["feature"] = np.where(leaf, TREE_UNDEFINED, tree.feature)
        nodes["threshold"] = np.where(leaf, TREE_UNDEFINED, tree.threshold)
        nodes["impurity"] = impurity
        samples = getattr(self, "_node_samples", None)
        nodes["n_node_samples"] = (np.rint(tree.weighted_n_node_samples) if samples is None
                                   else samples)
        nodes["weighted_n_node_samples"] = tree.weighted_n_node_samples
        nodes["missing_go_to_left"] = tree.missing_directions() & ~leaf
        classification = self._task == "classification"
        if classification:  # scikit-learn keeps each node's class shares
            total = np.maximum(tree.weighted_n_node_samples, 1e-300)[:, None]
            values = (tree.value / total)[:, None, :]
            outputs, classes = 1, np.array([len(self.classes_)], dtype=np.intp)
            model = DecisionTreeClassifier(max_depth=max(tree.max_depth, 1))
        else:
            values = tree.value[:, :, None]
            outputs = tree.value.shape[1]
            classes = np.ones(outputs, dtype=np.intp)
            model = DecisionTreeRegressor(max_depth=max(tree.max_depth, 1))
        fitted = SklearnTree(self.n_features_in_, classes, outputs)
        fitted.__setstate__({"max_depth": tree.max_depth, "node_count": tree.n_nodes,
                             "nodes": nodes, "values": np.ascontiguousarray(values)})
        model.tree_ = fitted
        model.n_features_in_ = self.n_features_in_
        model.n_outputs_ = outputs
        model.max_features_ = self.n_features_in_
        if hasattr(self, "feature_names_in_"):
            model.feature_names_in_ = self.feature_names_in_
        if classification:
            model.classes_ = self.classes_
            model.n_classes_ = len(self.classes_)
        return model

    def _known_node_impurity(self) -> np.ndarray | None:
        """The training data's node impurities; None for a regressor loaded from a file
        (a classifier's follow from its class counts)."""
        impurity = getattr(self, "_node_impurity", None)
        if impurity is None and self._task == "classification":
            impurity = self._impurity_of_nodes(None, None, None)
        return impurity

    def _node_impurity_or_nan(self) -> np.ndarray:
        impurity = self._known_node_impurity()
        return np.full(self.tree_.n_nodes, np.nan) if impurity is None else impurity

    def get_depth(self) -> int:
        """Return the depth of the fitted tree (a single leaf has depth 0)."""
        check_is_fitted(self)
        return self.tree_.max_depth

    def get_n_leaves(self) -> int:
        """Return the number of leaves of the fitted tree."""
        check_is_fitted(self)
        return self.tree_.n_leaves


class OptimalTreeClassifier(ClassifierMixin, _BaseOptimalTree):
    """An exactly optimal shallow classification tree (Quant-BnB).

    Among all binary trees of depth `max_depth` with axis-aligned splits
    ``x[f] <= t``, finds one that minimises the (weighted) number of misclassified
    training samples, and proves it optimal by branch and bound (Mazumder, Meng and
    Wang, "Quant-BnB", ICML 2022). Features are used as continuous values; thresholds
    are midpoints between consecutive distinct training values of a feature.

    Parameters
    ----------
    max_depth : int or None, default=2
        Depth of the tree, 1 to 8 (None: 8, the deepest supported). The tree is
        perfect (every leaf at this depth), but a split may send all samples one way,
        so the optimum is never worse than a shallower tree's.
    bound : {"w0", "w1", "w2", "l2"}, default="w0"
        The lower bound used to prune the search (see the paper). It changes the speed
        of the search, never its result.
    time_limit : float or None, default=None
        Stop after this many seconds and keep the best tree found so far; `status_`
        is then ``"time_limit"`` and a `ConvergenceWarning` is issued. None means no
        limit.
    verbose : bool or int, default=False
        Print one progress line per branch-and-bound iteration (at depth 3 and deeper
        also within one, as bounds are proved) to stderr.
    s : int, default=3
        How finely each root interval is cut per iteration (about s quantile
        pieces; see `qbnb_jax.solve`).
    min_samples_leaf : int or float, default=1
        Every leaf holds at least this many training rows (a float in (0, 1): that
        fraction of the rows, rounded up), as in scikit-learn; the tree is optimal
        among the trees that respect it. Identical rows are then not merged before
        solving.
    min_weight_fraction_leaf : float, default=0.0
        Every leaf holds at least this fraction (0 to 0.5) of the total sample
        weight (class weights included), as in scikit-learn.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, multiplied into the sample weights as scikit-learn's
        trees do: ``{label: weight}``, or "balanced" for
        ``n_samples / (n_classes * count of the label)``. The tree is optimal for the
        weighted misclassification.
    ccp_alpha : float, default=0.0
        Penalty per split, in scikit-learn's units: the tree minimises the training
        loss divided by the total sample weight plus ``ccp_alpha`` times its number of
        splits, over trees of depth at most `max_depth` (nodes may stay leaves). 0
        gives the perfect-tree problem. Exact, like the unpenalised solve.
    max_leaf_nodes : int or None, default=None
        At most this many leaves (None: no limit). Exact at depths 1 to 3; at depth 4
        and deeper only 2 is supported (other limits below ``2 ** max_depth`` raise a
        ValueError).
    max_gap : float or None, default=None
        Stop once the proved relative gap ``(objective - lower bound) / objective``
        is at most this (0 to 1); `status_` is then ``"gap_limit"`` (``"optimal"``
        when the gap is 0). None solves to optimality.

    Attributes
    ----------
    tree_ : Tree
        The fitted tree as flat numpy arrays; ``tree_.value`` holds the weighted class
        counts of each node, columns in the order of `classes_`.
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted.
    n_classes_ : int
        Number of classes.
    n_features_in_ : int
        Number of features seen during `fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during `fit`. Defined only when `X` has feature names
        that are all strings (for example a pandas DataFrame).
    n_outputs_ : int
        Always 1 (multi-output classification is not supported).
    objective_ : float
        Training loss of `tree_`: the weighted number of misclassified samples.
    lower_bound_ : float
        Proved lower bound on the loss of any tree of depth `max_depth`; equals
        `objective_` when `status_` is ``"optimal"``.
    penalized_objective_ : float
        What was minimised: `objective_` plus ``ccp_alpha`` times the total sample
        weight per split (`objective_` when ``ccp_alpha=0``); `lower_bound_` and `gap_`
        refer to it.
    gap_ : float
        The optimality gap reported by the solver (0 when optimal).
    status_ : str
        ``"optimal"``, ``"time_limit"`` or ``"gap_limit"``.
    n_iter_ : int
        Number of branch-and-bound iterations.
    solve_stats_ : dict
        The solver's statistics (iterations, frontier sizes, compile and solve time).

    See Also
    --------
    OptimalTreeRegressor : The regression counterpart.
    sklearn.tree.DecisionTreeClassifier : A greedy (CART) tree.

    Notes
    -----
    Identical ``(x, y)`` rows are merged (their weights summed) and rows are sorted
    before solving, so the fitted tree does not depend on the row order, and a sample
    with weight 2 gives the same tree as the sample repeated twice. Samples with zero
    weight are ignored (they add no candidate thresholds).

    A leaf predicts its class of largest weight; ties go to the class with the lowest
    index in `classes_`. ``predict_proba`` returns the class shares of the training
    weight in the leaf.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from qbnb_jax import OptimalTreeClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = OptimalTreeClassifier(max_depth=2).fit(X, y)
    >>> clf.status_
    'optimal'
    >>> clf.objective_
    6.0
    >>> clf.predict(X[:3])
    array([0, 0, 0])
    """

    _task = "classification"
    _parameter_constraints = {
        **_PARAMETER_CONSTRAINTS,
        "class_weight": (lambda v: v is None or v == "balanced" or isinstance(v, dict),
                         'None, "balanced" or a dict {label: weight}'),
    }

    def __init__(
        self,
        *,
        max_depth: int = 2,
        bound: str = "w0",
        time_limit: float | None = None,
        verbose: bool | int = False,
        s: int = 3,
        min_samples_leaf: int | float = 1,
        min_weight_fraction_leaf: float = 0.0,
        class_weight: dict | str | None = None,
        ccp_alpha: float = 0.0,
        max_leaf_nodes: int | None = None,
        max_gap: float | None = None,
    ) -> None:
        super().__init__(max_depth=max_depth, bound=bound, time_limit=time_limit,
                         verbose=verbose, s=s, min_samples_leaf=min_samples_leaf,
                         min_weight_fraction_leaf=min_weight_fraction_leaf,
                         ccp_alpha=ccp_alpha, max_leaf_nodes=max_leaf_nodes,
                         max_gap=max_gap)
        self.class_weight = class_weight

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = False
        tags.classifier_tags.multi_label = False
        return tags

    def _weigh_classes(self, y: np.ndarray, sample_weight: np.ndarray | None):
        if self.class_weight is None:
            return sample_weight
        from sklearn.utils.class_weight import compute_sample_weight

        weights = compute_sample_weight(self.class_weight, y)
        return weights if sample_weight is None else weights * sample_weight

    def _validate_data_fit(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        check_values(X, "X", allow_missing=True)  # what scikit-learn's conversion misreads
        X, y = validate_data(self, missing_as_nan(X), y, dtype=np.float64,
                             ensure_all_finite="allow-nan")
        try:
            check_classification_targets(y)
        except TypeError as err:  # e.g. None among string labels: they cannot be sorted
            raise ValueError(f"The labels in y cannot be sorted: {err}") from None
        return X, y

    def _encode_y(self, y: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        try:
            classes, codes = np.unique(y, return_inverse=True)
        except TypeError as err:
            raise ValueError(f"The labels in y cannot be sorted: {err}") from None
        attrs = {"classes_": classes, "n_classes_": len(classes), "n_outputs_": 1}
        return codes.reshape(-1, 1).astype(np.float64), attrs

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> OptimalTreeClassifier:
        """Find an optimal classification tree for the training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training features; finite numbers or NaN (missing: each split learns
            which side they go to).
        y : array-like of shape (n_samples,)
            Class labels: any sortable values (ints, strings, ...).
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative sample weights. None means unit weights.

        Returns
        -------
        self : OptimalTreeClassifier
            The fitted estimator.
        """
        return self._fit(X, y, sample_weight)

    def predict(self, X: Any) -> np.ndarray:
        """Predict the class of each sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The input samples.

        Returns
        -------
        y : ndarray of shape (n_samples,)
            The majority class of each sample's leaf (ties: lowest index in `classes_`).
        """
        X = self._validate_X_predict(X)
        return self.classes_.take(self.tree_.predict(X), axis=0)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Predict class probabilities: the class shares of the weight in the leaf.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The input samples.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Rows sum to 1; columns follow `classes_`. A leaf that received no training
            weight predicts the uniform distribution.
        """
        X = self._validate_X_predict(X)
        return self.tree_.predict_proba(X)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Logarithm of `predict_proba` (``-inf`` for classes absent from the leaf).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The input samples.

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))


class OptimalTreeRegressor(RegressorMixin, _BaseOptimalTree):
    """An exactly optimal shallow regression tree (Quant-BnB).

    Among all binary trees of depth `max_depth` with axis-aligned splits
    ``x[f] <= t``, finds one that minimises the (weighted) sum of squared errors,
    summed over all target columns, and proves it optimal by branch and bound
    (Mazumder, Meng and Wang, "Quant-BnB", ICML 2022).

    Parameters
    ----------
    max_depth : int or None, default=2
        Depth of the tree, 1 to 8 (None: 8, the deepest supported). The tree is
        perfect, but a split may send all samples one way, so the optimum is never
        worse than a shallower tree's.
    bound : {"w0", "w1", "w2", "l2"}, default="w0"
        The lower bound used to prune the search. It changes the speed of the
        search, never its result.
    time_limit : float or None, default=None
        Stop after this many seconds and keep the best tree found so far; `status_`
        is then ``"time_limit"`` and a `ConvergenceWarning` is issued.
    verbose : bool or int, default=False
        Print one progress line per branch-and-bound iteration (at depth 3 and deeper
        also within one, as bounds are proved) to stderr.
    s : int, default=3
        How finely each root interval is cut per iteration (about s quantile
        pieces; see `qbnb_jax.solve`).
    min_samples_leaf : int or float, default=1
        Every leaf holds at least this many training rows (a float in (0, 1): that
        fraction of the rows, rounded up), as in scikit-learn; the tree is optimal
        among the trees that respect it. Identical rows are then not merged before
        solving.
    min_weight_fraction_leaf : float, default=0.0
        Every leaf holds at least this fraction (0 to 0.5) of the total sample
        weight (class weights included), as in scikit-learn.
    ccp_alpha : float, default=0.0
        Penalty per split, in scikit-learn's units: the tree minimises the training
        loss divided by the total sample weight plus ``ccp_alpha`` times its number of
        splits, over trees of depth at most `max_depth` (nodes may stay leaves). 0
        gives the perfect-tree problem. Exact, like the unpenalised solve.
    max_leaf_nodes : int or None, default=None
        At most this many leaves (None: no limit). Exact at depths 1 to 3; at depth 4
        and deeper only 2 is supported (other limits below ``2 ** max_depth`` raise a
        ValueError).
    max_gap : float or None, default=None
        Stop once the proved relative gap ``(objective - lower bound) / objective``
        is at most this (0 to 1); `status_` is then ``"gap_limit"`` (``"optimal"``
        when the gap is 0). None solves to optimality.

    Attributes
    ----------
    tree_ : Tree
        The fitted tree as flat numpy arrays; ``tree_.value`` holds the weighted mean
        of each target in each node.
    n_features_in_ : int
        Number of features seen during `fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during `fit`. Defined only when `X` has feature names
        that are all strings.
    n_outputs_ : int
        Number of target columns.
    objective_ : float
        Training loss of `tree_`: the weighted sum of squared errors.
    lower_bound_ : float
        Proved lower bound on the loss of any tree of depth `max_depth`.
    penalized_objective_ : float
        What was minimised: `objective_` plus ``ccp_alpha`` times the total sample
        weight per split (`objective_` when ``ccp_alpha=0``); `lower_bound_` and `gap_`
        refer to it.
    gap_ : float
        The optimality gap reported by the solver (0 when optimal).
    status_ : str
        ``"optimal"``, ``"time_limit"`` or ``"gap_limit"``.
    n_iter_ : int
        Number of branch-and-bound iterations.
    solve_stats_ : dict
        The solver's statistics (iterations, frontier sizes, compile and solve time).

    See Also
    --------
    OptimalTreeClassifier : The classification counterpart.
    sklearn.tree.DecisionTreeRegressor : A greedy (CART) tree.

    Notes
    -----
    Identical ``(x, y)`` rows are merged (their weights summed) and rows are sorted
    before solving, so the fitted tree does not depend on the row order, and a sample
    with weight 2 gives the same tree as the sample repeated twice.

    Examples
    --------
    >>> import numpy as np
    >>> from qbnb_jax import OptimalTreeRegressor
    >>> X = np.arange(8.0).reshape(-1, 1)
    >>> y = np.array([0.0, 0.0, 1.0, 1.0, 5.0, 5.0, 9.0, 9.0])
    >>> reg = OptimalTreeRegressor(max_depth=2).fit(X, y)
    >>> reg.objective_
    0.0
    >>> reg.predict([[2.5], [6.5]])
    array([1., 9.])
    """

    _task = "regression"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _validate_data_fit(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        check_values(X, "X", allow_missing=True)  # what scikit-learn's conversion misreads
        check_values(y, "y")
        return validate_data(self, missing_as_nan(X), y, dtype=np.float64, multi_output=True,
                             y_numeric=True, ensure_all_finite="allow-nan")

    def _encode_y(self, y: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        y = np.asarray(y, dtype=np.float64)
        y2 = y.reshape(-1, 1) if y.ndim == 1 else y
        return y2, {"n_outputs_": int(y2.shape[1])}

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> OptimalTreeRegressor:
        """Find an optimal regression tree for the training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training features; finite numbers or NaN (missing: each split learns
            which side they go to).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets; finite numbers.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative sample weights. None means unit weights.

        Returns
        -------
        self : OptimalTreeRegressor
            The fitted estimator.
        """
        return self._fit(X, y, sample_weight)

    def predict(self, X: Any) -> np.ndarray:
        """Predict the target(s) of each sample: the weighted mean in its leaf.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The input samples.

        Returns
        -------
        y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
            One column per target; a 1-D array when there is a single target.
        """
        X = self._validate_X_predict(X)
        values = self.tree_.predict_value(X)
        if self.n_outputs_ == 1:
            return values[:, 0].copy()
        return values
