"""Bagged optimal trees and cross-validated depth selection.

Both fit many trees to one data set that differ only in their sample weights
(bootstrap counts, fold masks), so each fits all its trees of one depth with a single
`qbnb_jax.solve_batch` call, which shares the presorting and compiled kernels among
them. The estimators follow the conventions of `_sklearn/estimator.py` and reuse its
validation; fitted trees are host `Tree`s, so fitted estimators pickle.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from qbnb_jax._problem.data import (
    as_feature_matrix,
    as_sample_weight,
    as_targets,
    check_task,
    encode_labels,
    missing_as_nan,
)
from qbnb_jax._problem.tree import Tree
from qbnb_jax._search.solve import SUPPORTED_DEPTHS, SolveResult
from qbnb_jax._sklearn.estimator import (
    _PARAMETER_CONSTRAINTS,
    OptimalTreeClassifier,
    OptimalTreeRegressor,
    _BaseOptimalTree,
    _canonical_rows,
    _check_sample_weight,
    _is_int,
    _is_real,
    _solver_time_limit,
    solver_depth,
)

_BAGGING_CONSTRAINTS = {
    "n_estimators": (lambda v: _is_int(v) and v >= 1, "an int in the range [1, inf)"),
    "max_samples": (
        lambda v: v is None or (_is_int(v) and v >= 1) or (_is_real(v) and 0 < v <= 1),
        "None, an int in the range [1, inf) or a float in the range (0, 1]",
    ),
    "bootstrap": (lambda v: isinstance(v, (bool, np.bool_)), "a bool"),
    "random_state": (
        lambda v: v is None
        or isinstance(v, np.random.RandomState)
        or (_is_int(v) and 0 <= v < 2**32),
        "None, an int in the range [0, 2**32) or a numpy RandomState",
    ),
    **{name: _PARAMETER_CONSTRAINTS[name] for name in ("max_depth", "bound", "time_limit")},
}


def _get_solve_batch() -> Callable[..., list[SolveResult]]:
    """`qbnb_jax.solve_batch`, looked up at call time (the package imports this module)."""
    import qbnb_jax

    return qbnb_jax.solve_batch


class _BaseBaggedOptimalTree(BaseEstimator):
    """Shared parameters, bootstrap draws and fitting."""

    _task: str = ""
    _parameter_constraints = _BAGGING_CONSTRAINTS
    _validate_params = _BaseOptimalTree._validate_params

    def __init__(
        self,
        *,
        n_estimators: int = 10,
        max_depth: int = 2,
        max_samples: int | float | None = None,
        bootstrap: bool = True,
        random_state: int | np.random.RandomState | None = None,
        bound: str = "w0",
        time_limit: float | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.max_samples = max_samples
        self.bootstrap = bootstrap
        self.random_state = random_state
        self.bound = bound
        self.time_limit = time_limit

    def _n_draws(self, n: int) -> int:
        """Samples drawn per tree out of `n` rows, as `max_samples` asks."""
        if self.max_samples is None:
            return n
        if _is_int(self.max_samples):
            draws = int(self.max_samples)
        else:
            draws = max(1, int(self.max_samples * n))
        if not self.bootstrap and draws > n:
            raise ValueError(
                f"max_samples={self.max_samples!r} asks for {draws} samples without "
                f"replacement (bootstrap=False), but the training data has only {n} "
                "distinct samples with positive weight."
            )
        return draws

    def _sample_weights(self, n: int, rng: np.random.RandomState) -> np.ndarray:
        """How often each of `n` rows is drawn for each tree, `(n_estimators, n)`.

        Bootstrap counts (with replacement) or 0/1 masks (without), drawn tree by tree
        from `rng`; `fit` multiplies them by the sample weights.
        """
        draws = self._n_draws(n)
        counts = np.zeros((self.n_estimators, n))
        for row in counts:
            if self.bootstrap:
                row += np.bincount(rng.randint(n, size=draws), minlength=n)
            else:
                row[rng.choice(n, size=draws, replace=False)] = 1.0
        return counts

    def _member(self, result: SolveResult, label_attrs: dict[str, Any]):
        """One fitted tree as a fitted single-tree estimator, as scikit-learn's bagging
        holds its members."""
        single = OptimalTreeClassifier if self._task == "classification" else OptimalTreeRegressor
        member = single(max_depth=self.max_depth, bound=self.bound, time_limit=self.time_limit)
        member._adopt(result, label_attrs)
        member.n_features_in_ = self.n_features_in_
        if hasattr(self, "feature_names_in_"):
            member.feature_names_in_ = self.feature_names_in_
        return member

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def _validate_X_predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return validate_data(self, missing_as_nan(X), dtype=np.float64, reset=False,
                             ensure_all_finite="allow-nan")

    def _fit(self, X: Any, y: Any, sample_weight: Any) -> _BaseBaggedOptimalTree:
        self._validate_params()
        X, y = self._validate_data_fit(X, y)
        sw = _check_sample_weight(sample_weight, X.shape[0])
        y_cols, label_attrs = self._encode_y(y)
        # Draw from the merged, sorted distinct rows (as the single tree solves them),
        # so that the draws, and hence the ensemble, do not depend on the row order or
        # on whether a sample is repeated or weighted.
        Xc, yc, wc = _canonical_rows(X, y_cols, sw)
        wc = np.ones(Xc.shape[0]) if wc is None else wc
        keep = wc > 0  # zero-weight rows must not take draws from the others
        Xc, yc, wc = Xc[keep], yc[keep], wc[keep]
        weights = self._sample_weights(Xc.shape[0], check_random_state(self.random_state))
        y_solve = yc[:, 0].astype(np.int64) if self._task == "classification" else yc
        results = _get_solve_batch()(
            Xc,
            y_solve,
            weights * wc,
            task=self._task,
            depth=solver_depth(self.max_depth),
            bound=self.bound,
            time_limit=_solver_time_limit(self.time_limit),
        )
        for name, value in label_attrs.items():
            setattr(self, name, value)
        self.estimators_ = [self._member(result, label_attrs) for result in results]
        self.objectives_ = np.array([r.objective for r in results], dtype=np.float64)
        self.statuses_ = np.array([r.status for r in results])
        stopped = int(np.sum(self.statuses_ != "optimal"))
        if stopped:
            warnings.warn(
                f"{type(self).__name__}: {stopped} of {len(results)} trees stopped before "
                "proving optimality. Increase time_limit for proved optima.",
                ConvergenceWarning,
                stacklevel=3,
            )
        return self


class BaggedOptimalTreeClassifier(ClassifierMixin, _BaseBaggedOptimalTree):
    """A bagging ensemble of exactly optimal shallow classification trees.

    Each tree is an `OptimalTreeClassifier`-style optimum of depth `max_depth` on a
    bootstrap sample (or a subsample) of the training data; all trees are solved in
    one batched call. The ensemble predicts the mean of the trees' class shares.

    Parameters
    ----------
    n_estimators : int, default=10
        Number of trees.
    max_depth : int or None, default=2
        Depth of every tree (1 to 8, None: 8; 3 and deeper cost much more).
    max_samples : int, float or None, default=None
        Samples drawn for each tree: None draws as many as there are (distinct)
        training samples, an int that many, a float in (0, 1] that fraction of them.
    bootstrap : bool, default=True
        Draw with replacement (a sample drawn k times gets k times its weight). False
        draws a subsample without replacement, so `max_samples` must not exceed the
        number of samples.
    random_state : int, RandomState instance or None, default=None
        Seeds the draws; an int makes `fit` reproducible.
    bound : {"w0", "w1", "w2", "l2"}, default="w0"
        The lower bound used to prune each search; changes speed, never results.
    time_limit : float or None, default=None
        Passed to the solver for the trees; a tree stopped by it keeps its best tree
        so far, `statuses_` says which, and a `ConvergenceWarning` is issued.

    Attributes
    ----------
    estimators_ : list of OptimalTreeClassifier
        The fitted trees, each a fitted `OptimalTreeClassifier` (its `tree_` value
        columns follow `classes_`; a class a tree never saw has zero counts).
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted.
    n_classes_ : int
        Number of classes.
    n_outputs_ : int
        Always 1.
    n_features_in_ : int
        Number of features seen during `fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during `fit`. Defined only when `X` has feature names
        that are all strings (for example a pandas DataFrame).
    objectives_ : ndarray of shape (n_estimators,)
        Each tree's weighted misclassification on its own weighted sample.
    statuses_ : ndarray of shape (n_estimators,)
        Each tree's solver status, ``"optimal"`` or ``"time_limit"``.

    See Also
    --------
    OptimalTreeClassifier : A single optimal tree.
    sklearn.ensemble.BaggingClassifier : Bagging of any estimator.

    Notes
    -----
    As in `OptimalTreeClassifier`, identical ``(x, y)`` rows are merged (weights
    summed) and rows sorted first; samples are then drawn uniformly from these distinct
    rows with positive weight, and a tree's weight for a row is its draw count times
    the row's weight. So `sample_weight` acts like repetition: a weight of 2 and a
    repeated sample give the same ensemble, whatever the row order.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from qbnb_jax import BaggedOptimalTreeClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = BaggedOptimalTreeClassifier(n_estimators=5, random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:1]).round(2)
    array([[1., 0., 0.]])
    """

    _task = "classification"
    # The single tree's label validation and encoding, reused as they are.
    _validate_data_fit = OptimalTreeClassifier._validate_data_fit
    _encode_y = OptimalTreeClassifier._encode_y

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = False
        tags.classifier_tags.multi_label = False
        return tags

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> BaggedOptimalTreeClassifier:
        """Draw the samples and fit every tree in one batched solve.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training features; finite numbers or NaN (missing).
        y : array-like of shape (n_samples,)
            Class labels: any sortable values.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative sample weights. None means unit weights.

        Returns
        -------
        self : BaggedOptimalTreeClassifier
            The fitted estimator.
        """
        return self._fit(X, y, sample_weight)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Mean over the trees of the class shares in each sample's leaf.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The input samples.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Rows sum to 1; columns follow `classes_`.
        """
        X = self._validate_X_predict(X)
        return np.mean([est.tree_.predict_proba(X) for est in self.estimators_], axis=0)

    def predict(self, X: Any) -> np.ndarray:
        """Predict the class of largest mean share (ties: lowest index in `classes_`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The input samples.

        Returns
        -------
        y : ndarray of shape (n_samples,)
            The predicted labels.
        """
        proba = self.predict_proba(X)  # checks that the estimator is fitted
        return self.classes_.take(np.argmax(proba, axis=1), axis=0)


class BaggedOptimalTreeRegressor(RegressorMixin, _BaseBaggedOptimalTree):
    """A bagging ensemble of exactly optimal shallow regression trees.

    Each tree minimises the weighted squared error (summed over targets) of a depth
    `max_depth` tree on a bootstrap sample (or a subsample) of the training data; all
    trees are solved in one batched call. The ensemble predicts the trees' mean.

    Parameters
    ----------
    n_estimators : int, default=10
        Number of trees.
    max_depth : int or None, default=2
        Depth of every tree (1 to 8, None: 8; 3 and deeper cost much more).
    max_samples : int, float or None, default=None
        Samples drawn for each tree: None draws as many as there are (distinct)
        training samples, an int that many, a float in (0, 1] that fraction of them.
    bootstrap : bool, default=True
        Draw with replacement (a sample drawn k times gets k times its weight). False
        draws a subsample without replacement, so `max_samples` must not exceed the
        number of samples.
    random_state : int, RandomState instance or None, default=None
        Seeds the draws; an int makes `fit` reproducible.
    bound : {"w0", "w1", "w2", "l2"}, default="w0"
        The lower bound used to prune each search; changes speed, never results.
    time_limit : float or None, default=None
        Passed to the solver for the trees; a tree stopped by it keeps its best tree
        so far, `statuses_` says which, and a `ConvergenceWarning` is issued.

    Attributes
    ----------
    estimators_ : list of OptimalTreeRegressor
        The fitted trees, each a fitted `OptimalTreeRegressor` (its `tree_` value holds
        each node's weighted target means).
    n_outputs_ : int
        Number of target columns.
    n_features_in_ : int
        Number of features seen during `fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during `fit`. Defined only when `X` has feature names
        that are all strings.
    objectives_ : ndarray of shape (n_estimators,)
        Each tree's weighted sum of squared errors on its own weighted sample.
    statuses_ : ndarray of shape (n_estimators,)
        Each tree's solver status, ``"optimal"`` or ``"time_limit"``.

    See Also
    --------
    OptimalTreeRegressor : A single optimal tree.
    sklearn.ensemble.BaggingRegressor : Bagging of any estimator.

    Notes
    -----
    Identical ``(x, y)`` rows are merged and sorted before drawing, as in
    `BaggedOptimalTreeClassifier`, so a weight of 2 and a repeated sample give the same
    ensemble.

    Examples
    --------
    >>> import numpy as np
    >>> from qbnb_jax import BaggedOptimalTreeRegressor
    >>> X = np.arange(8.0).reshape(-1, 1)
    >>> y = np.array([0.0, 0.0, 1.0, 1.0, 5.0, 5.0, 9.0, 9.0])
    >>> reg = BaggedOptimalTreeRegressor(n_estimators=4, random_state=0).fit(X, y)
    >>> reg.predict([[0.0], [7.0]]).shape
    (2,)
    """

    _task = "regression"
    # The single tree's target validation and encoding, reused as they are.
    _validate_data_fit = OptimalTreeRegressor._validate_data_fit
    _encode_y = OptimalTreeRegressor._encode_y

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> BaggedOptimalTreeRegressor:
        """Draw the samples and fit every tree in one batched solve.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training features; finite numbers or NaN (missing).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets; finite numbers.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative sample weights. None means unit weights.

        Returns
        -------
        self : BaggedOptimalTreeRegressor
            The fitted estimator.
        """
        return self._fit(X, y, sample_weight)

    def predict(self, X: Any) -> np.ndarray:
        """Predict the mean over the trees of each sample's leaf value.

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
        values = np.mean([est.tree_.predict_value(X) for est in self.estimators_], axis=0)
        return values[:, 0].copy() if self.n_outputs_ == 1 else values


# -- depth selection ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class DepthSelection:
    """What `select_depth` returns.

    **Fields:**

    - `task`: `"classification"` (scores are accuracies) or `"regression"` (mean
      squared errors).
    - `depths`: the depths compared, in the order given.
    - `scores`: held-out scores `(len(depths), cv)`, one per depth and fold.
    - `mean_scores`: `(len(depths),)`, the mean over folds.
    - `best_depth`: highest mean accuracy / lowest mean squared error; ties go to
      the smaller depth.
    - `folds`: `(n,)`, the fold of each sample (-1 for samples of zero weight, which
      are neither trained on nor scored).
    - `results`: depth -> the `SolveResult` of each fold (trained on all other folds).
    """

    task: str
    depths: tuple[int, ...]
    scores: np.ndarray
    mean_scores: np.ndarray
    best_depth: int
    folds: np.ndarray
    results: dict[int, list[SolveResult]]

    def __repr__(self) -> str:
        metric = "accuracy" if self.task == "classification" else "mse"
        means = ", ".join(f"{d}: {m:.6g}" for d, m in zip(self.depths, self.mean_scores))
        return (
            f"DepthSelection(best_depth={self.best_depth}, cv={self.scores.shape[1]}, "
            f"mean_{metric}={{{means}}})"
        )


def _check_depths(depths: Any) -> tuple[int, ...]:
    try:
        depths = tuple(depths)
    except TypeError:
        raise ValueError(f"depths must be a sequence of depths; got {depths!r}.") from None
    if not depths:
        raise ValueError("depths is empty: give at least one depth to compare.")
    for depth in depths:
        if not _is_int(depth) or depth not in SUPPORTED_DEPTHS:
            raise ValueError(
                f"depths must hold depths among {SUPPORTED_DEPTHS}; got {depth!r}."
            )
    if len(set(depths)) != len(depths):
        raise ValueError(f"depths must be distinct; got {depths!r}.")
    return tuple(int(d) for d in depths)


def _assign_folds(
    n: int, strata: np.ndarray | None, cv: int, rng: np.random.RandomState
) -> np.ndarray:
    """Fold index `0..cv-1` of each of `n` samples; fold sizes differ by at most one.

    Dealing the samples round-robin in random order balances the fold sizes; with
    `strata` (class codes), sorting that order by class first makes each class's
    samples a contiguous run, so every fold also gets the floor or the ceiling of
    each class's count / cv (stratification).
    """
    order = rng.permutation(n)
    if strata is not None:
        order = order[np.argsort(strata[order], kind="stable")]
    folds = np.empty(n, dtype=np.int64)
    folds[order] = np.arange(n) % cv
    return folds


def select_depth(
    X,
    y,
    *,
    task: str,
    depths: Sequence[int] = (1, 2, 3),
    cv: int = 5,
    random_state: int | np.random.RandomState | None = None,
    sample_weight=None,
    **solve_options: Any,
) -> DepthSelection:
    """Choose a tree depth by k-fold cross-validation of optimal trees.

    For each depth, the `cv` fold-training problems (all samples but one fold's) are
    solved in one `solve_batch` call; each fold's tree is scored on its held-out
    fold.

    **Arguments:**

    - `X`, `y`, `task`: as for `solve`.
    - `depths`: the depths to compare (each 1 to 8, distinct).
    - `cv`: number of folds, from 2 to the number of samples with positive weight.
      Folds are stratified by class for classification.
    - `random_state`: seeds the fold assignment (None: fresh randomness).
    - `sample_weight`: non-negative weights `(n,)`; they weight both training and
      scoring, and zero-weight samples are left out of every fold.
    - `solve_options`: `bound`, `s`, `time_limit`, `progress`, passed to `solve_batch`.

    **Returns:** a `DepthSelection`; scores are weighted accuracy (classification) or
    weighted mean squared error averaged over targets (regression) on held-out rows.

    !!! Example
        ```python
        selection = qbnb_jax.select_depth(X, y, task="classification", depths=(1, 2, 3))
        selection.best_depth, selection.mean_scores
        ```
    """
    task = check_task(task)
    depths = _check_depths(depths)
    X = as_feature_matrix(X)
    n = X.shape[0]
    weight, _ = as_sample_weight(sample_weight, n)
    if task == "classification":
        classes, codes = encode_labels(y, n)
        truth: np.ndarray = classes[codes]
    else:
        truth = as_targets(y, n)
    scored = np.nonzero(weight > 0)[0]
    if not _is_int(cv) or cv < 2:
        raise ValueError(f"cv must be an integer >= 2 (the number of folds); got {cv!r}.")
    if cv > len(scored):
        raise ValueError(
            f"cv={cv} exceeds the {len(scored)} samples with positive weight: every fold "
            "needs at least one."
        )

    folds = np.full(n, -1, dtype=np.int64)
    strata = codes[scored] if task == "classification" else None
    folds[scored] = _assign_folds(len(scored), strata, cv, check_random_state(random_state))
    train_weights = np.stack([np.where(folds == k, 0.0, weight) for k in range(cv)])

    scores = np.empty((len(depths), cv))
    results: dict[int, list[SolveResult]] = {}
    for i, depth in enumerate(depths):
        results[depth] = _get_solve_batch()(
            X, y, train_weights, task=task, depth=depth, **solve_options
        )
        for k, result in enumerate(results[depth]):
            scores[i, k] = _held_out_score(result, X, truth, weight, folds == k)
    mean_scores = scores.mean(axis=1)
    best = mean_scores.max() if task == "classification" else mean_scores.min()
    best_depth = min(d for d, m in zip(depths, mean_scores) if m == best)
    return DepthSelection(
        task=task,
        depths=depths,
        scores=scores,
        mean_scores=mean_scores,
        best_depth=best_depth,
        folds=folds,
        results=results,
    )


def _held_out_score(
    result: SolveResult, X: np.ndarray, truth: np.ndarray, weight: np.ndarray, test: np.ndarray
) -> float:
    """Weighted accuracy or mean squared error of `result.tree` on the rows in `test`."""
    tree: Tree = result.tree
    if result.task == "classification":
        per_row = (result.classes[tree.predict(X[test])] == truth[test]).astype(np.float64)
    else:
        per_row = np.mean((tree.predict_value(X[test]) - truth[test]) ** 2, axis=1)
    return float(np.average(per_row, weights=weight[test]))
