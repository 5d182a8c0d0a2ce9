"""Missing values (NaN) in X as ordinary features (docs/design.md, "Missing values").

A split of feature f at threshold t that sends missing values left is the split of a
virtual feature f_L, x_f with NaN replaced by a value below every real value, at t; one
sending them right is a split of f_R, NaN replaced by a value above every real value.
So the trees whose splits each choose a threshold and a missing direction are exactly
the trees over the virtual features, and the search solves that ordinary problem. Only
columns with NaN are doubled: column f becomes f_L in place, f_R is appended. The
solved tree is then mapped back to the original features (`original_tree`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from qbnb_jax._problem.tree import LEAF, Tree


@dataclasses.dataclass(frozen=True, eq=False)
class MissingColumns:
    """How the virtual features of a problem map to the caller's features."""

    n_features: int  # the caller's p
    original: np.ndarray  # int64 (p_virtual,): the caller's feature of each virtual one
    missing_left: np.ndarray  # bool (p_virtual,): NaN went left (its sentinel is low)
    # float64 (p_virtual,): the value NaN became; NaN for features without missing values
    sentinel: np.ndarray


def virtual_features(X: np.ndarray) -> tuple[np.ndarray, MissingColumns | None]:
    """`(X_virtual, columns)` for features `X` `(n, p)` that may hold NaN; `(X, None)`
    when none does. A column with NaN only is constant (no split uses it)."""
    nan = np.isnan(X)
    with_nan = np.flatnonzero(nan.any(axis=0))
    if len(with_nan) == 0:
        return X, None
    p = X.shape[1]
    X_left = X.copy()
    appended, original, sentinel = [], list(range(p)), np.full(p, np.nan)
    for j in with_nan:
        real = X[~nan[:, j], j]
        if len(real) == 0:
            X_left[:, j] = 0.0
            continue
        below, above = _sentinels(float(real.min()), float(real.max()), int(j))
        X_left[nan[:, j], j] = below
        right = X[:, j].copy()
        right[nan[:, j]] = above
        appended.append(right)
        original.append(int(j))
        sentinel[j] = below
        sentinel = np.append(sentinel, above)
    X_virtual = np.column_stack([X_left, *appended]) if appended else X_left
    missing_left = np.zeros(len(original), dtype=bool)
    missing_left[with_nan] = True
    return X_virtual, MissingColumns(n_features=p, original=np.asarray(original, np.int64),
                                     missing_left=missing_left, sentinel=sentinel)


def _sentinels(lo: float, hi: float, column: int) -> tuple[float, float]:
    """Finite values below and above the real values `[lo, hi]` of a column.

    Any such values make the search exact; these are far enough out that a split
    separating the missing values from the rest of a node puts its threshold (the
    midpoint with the node's nearest real value) outside `[lo, hi]`, so that no real
    training value falls on the missing side's half of the gap. Near float64's limits
    the neighbouring floats are used instead.
    """
    from qbnb_jax._problem.data import midpoint  # data.py imports this module

    with np.errstate(over="ignore", invalid="ignore"):
        reach = max(hi - lo, abs(lo), abs(hi), 1.0)
        below, above = lo - reach, hi + reach
    with np.errstate(over="ignore"):
        if not (np.isfinite(below) and midpoint(below, hi) < lo):
            below = float(np.nextafter(lo, -np.inf))
        if not (np.isfinite(above) and midpoint(lo, above) >= hi):
            above = float(np.nextafter(hi, np.inf))
    if not (np.isfinite(below) and np.isfinite(above)):
        raise ValueError(
            f"X column {column} has missing values (NaN) and values at the limit of float64 "
            f"({lo:.17g} to {hi:.17g}), so no finite value lies beyond them to stand for the "
            "missing ones. Rescale the column.")
    return float(below), float(above)


def original_tree(tree: Tree, X: np.ndarray, weight: np.ndarray,
                  columns: MissingColumns) -> Tree:
    """A tree over the virtual features (`X` the virtual training features, `weight`
    their weights) as one over the caller's features.

    Its splits keep their thresholds (real values route as before) and send NaN where
    the virtual feature sent its sentinel: a kept split is never at +-inf (it would
    send all training weight one way and be collapsed), so f_L's low sentinel is at or
    below its threshold and f_R's high one above. A node that no training NaN of its
    feature reached sends NaN to its heavier child (`Tree.missing_directions`), as
    scikit-learn does.
    """
    internal = tree.feature != LEAF
    feature = tree.feature.copy()
    feature[internal] = columns.original[tree.feature[internal]]
    directions = tree.missing_directions().copy()
    doubled = np.flatnonzero(~np.isnan(columns.sentinel[: columns.n_features]))
    if len(doubled):
        # weight of each doubled feature's NaN rows reaching each node
        nan_weight = (X[:, doubled] == columns.sentinel[doubled]) * weight[:, None]
        reached = tree.node_sums(X, nan_weight)  # (n_nodes, len(doubled))
        slot = np.full(columns.n_features, -1)
        slot[doubled] = np.arange(len(doubled))
        for node in np.flatnonzero(internal):
            j = slot[feature[node]]
            if j >= 0 and reached[node, j] > 0:
                directions[node] = columns.missing_left[tree.feature[node]]
    return dataclasses.replace(tree, feature=feature, missing_go_to_left=directions)
