"""A fitted tree as flat host arrays (the layout of ``sklearn.tree._tree.Tree``).

Nodes are stored in depth-first preorder: node 0 is the root, a node's left subtree
comes before its right subtree. Leaves have ``feature == LEAF`` and
``children_left == children_right == LEAF``. A sample goes left when
``x[feature] <= threshold``; a missing value (NaN) goes left when the node's
``missing_go_to_left`` says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np

LEAF = -1
Task = Literal["classification", "regression"]


@dataclasses.dataclass(frozen=True, eq=False)
class Tree:
    """A binary decision tree held in numpy arrays.

    **Attributes:**

    - `children_left`, `children_right`: int32 `(n_nodes,)`, `LEAF` (-1) at leaves.
    - `feature`: int32 `(n_nodes,)`, the split feature, `LEAF` at leaves.
    - `threshold`: float64 `(n_nodes,)`, the split threshold, NaN at leaves.
    - `value`: float64 `(n_nodes, k)`. Classification: weighted class counts in the node
      (`k` = number of classes, columns in encoded-class order). Regression: weighted
      mean of each target (`k` = number of targets).
    - `weighted_n_node_samples`: float64 `(n_nodes,)`, training weight in the node.
    - `task`: `"classification"` or `"regression"`.
    - `missing_go_to_left`: bool `(n_nodes,)`, where a NaN in the split feature goes
      (False at leaves); None: every node sends NaN to the child with more training
      weight (the right one on ties), scikit-learn's rule for splits that saw no
      missing values (`missing_directions`).
    """

    children_left: np.ndarray
    children_right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    weighted_n_node_samples: np.ndarray
    task: Task
    missing_go_to_left: np.ndarray | None = None

    @property
    def n_nodes(self) -> int:
        return int(self.feature.shape[0])

    @property
    def n_leaves(self) -> int:
        return int(np.sum(self.children_left == LEAF))

    def missing_directions(self) -> np.ndarray:
        """Bool `(n_nodes,)`: whether a NaN goes left at each node (False at leaves)."""
        if self.missing_go_to_left is not None:
            return self.missing_go_to_left
        internal = self.feature != LEAF
        w = self.weighted_n_node_samples
        heavier_left = np.zeros(self.n_nodes, dtype=bool)
        heavier_left[internal] = (w[self.children_left[internal]]
                                  > w[self.children_right[internal]])
        return heavier_left

    def _goes_left(self, x: np.ndarray, node) -> np.ndarray:
        """Whether values `x` of the split feature of nodes `node` go left."""
        left = x <= self.threshold[node]
        nan = np.isnan(x)
        if nan.any():
            left = np.where(nan, self.missing_directions()[node], left)
        return left

    def node_indicator(self, X: np.ndarray) -> np.ndarray:
        """Bool `(n_samples, n_nodes)`: which nodes each row of `X` passes through."""
        X = np.asarray(X, dtype=np.float64)
        reach = np.zeros((X.shape[0], self.n_nodes), dtype=bool)
        reach[:, 0] = True
        for node in range(self.n_nodes):  # preorder: a parent comes before its children
            f = self.feature[node]
            if f == LEAF:
                continue
            left = self._goes_left(X[:, f], node)
            reach[:, self.children_left[node]] = reach[:, node] & left
            reach[:, self.children_right[node]] = reach[:, node] & ~left
        return reach

    def node_sums(self, X: np.ndarray, values: np.ndarray) -> np.ndarray:
        """`(n_nodes, k)`: per node, the sum of `values` `(n, k)` over the rows of `X` that
        pass through it (each row's leaf by `apply`, then children summed into parents:
        O(n + n_nodes), unlike a row-by-node indicator)."""
        values = np.asarray(values, dtype=np.float64).reshape(len(X), -1)
        sums = np.zeros((self.n_nodes, values.shape[1]))
        np.add.at(sums, self.apply(X), values)
        for node in range(self.n_nodes - 1, -1, -1):  # preorder reversed: children first
            if self.feature[node] != LEAF:
                sums[node] = sums[self.children_left[node]] + sums[self.children_right[node]]
        return sums

    def impurity_decrease(self, impurity: np.ndarray, n_features: int) -> np.ndarray:
        """Per feature, the weighted impurity decrease of its splits, normalised to sum
        to 1 (scikit-learn's `feature_importances_`); `impurity`: per node."""
        w = self.weighted_n_node_samples
        out = np.zeros(n_features)
        for node in np.flatnonzero(self.feature != LEAF):
            left, right = self.children_left[node], self.children_right[node]
            out[self.feature[node]] += (w[node] * impurity[node] - w[left] * impurity[left]
                                        - w[right] * impurity[right])
        total = out.sum()
        return out / total if total > 0 else out

    @property
    def max_depth(self) -> int:
        depth = np.zeros(self.n_nodes, dtype=np.int64)
        for node in range(self.n_nodes):  # preorder: parents come first
            for child in (self.children_left[node], self.children_right[node]):
                if child != LEAF:
                    depth[child] = depth[node] + 1
        return int(depth.max(initial=0))

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Index of the leaf each row of `X` (n, p) lands in, shape (n,)."""
        X = np.asarray(X, dtype=np.float64)
        node = np.zeros(X.shape[0], dtype=np.int64)
        # each node's rows split in two (one column read per node, not one gather of
        # every row's feature per level)
        stack = [(0, np.arange(X.shape[0]))]
        while stack:
            at, rows = stack.pop()
            f = self.feature[at]
            if f == LEAF:
                node[rows] = at
                continue
            left = self._goes_left(X[rows, f], at)
            stack.append((self.children_left[at], rows[left]))
            stack.append((self.children_right[at], rows[~left]))
        return node

    def predict_value(self, X: np.ndarray) -> np.ndarray:
        """Leaf `value` row of each sample, shape (n, k)."""
        return self.value[self.apply(X)]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Encoded class (lowest index on ties) or target means (n, m)."""
        values = self.predict_value(X)
        if self.task == "classification":
            return np.argmax(values, axis=1)
        return values

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class shares of the training weight in each sample's leaf, shape (n, C)."""
        if self.task != "classification":
            raise ValueError("predict_proba is only defined for classification trees.")
        counts = self.predict_value(X)
        totals = counts.sum(axis=1, keepdims=True)
        uniform = np.full_like(counts, 1.0 / counts.shape[1])
        return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), uniform)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description of the tree (see `Tree.from_dict`);
        `missing_go_to_left` only when the tree has its own."""
        described = {
            "task": self.task,
            "children_left": self.children_left.tolist(),
            "children_right": self.children_right.tolist(),
            "feature": self.feature.tolist(),
            "threshold": [None if np.isnan(t) else float(t) for t in self.threshold],
            "value": self.value.tolist(),
            "weighted_n_node_samples": self.weighted_n_node_samples.tolist(),
        }
        if self.missing_go_to_left is not None:
            described["missing_go_to_left"] = self.missing_go_to_left.tolist()
        return described

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tree:
        """Rebuild a tree from `to_dict` output, checking that it is a valid tree.

        Descriptions without `missing_go_to_left` (written before missing values were
        supported) send NaN to each node's heavier child."""
        def indices(name: str) -> np.ndarray:
            values = np.asarray(data[name], dtype=np.float64)
            if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(
                values != np.round(values)
            ) or np.any(np.abs(values) >= 2**31):
                raise ValueError(f"{name} must be a list of integer node or feature indices")
            return values.astype(np.int32)

        try:
            tree = cls(
                children_left=indices("children_left"),
                children_right=indices("children_right"),
                feature=indices("feature"),
                threshold=np.asarray(
                    [np.nan if t is None else t for t in data["threshold"]], dtype=np.float64
                ),
                value=np.asarray(data["value"], dtype=np.float64),
                weighted_n_node_samples=np.asarray(
                    data["weighted_n_node_samples"], dtype=np.float64
                ),
                task=data["task"],
                missing_go_to_left=_directions(data.get("missing_go_to_left")),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise ValueError(f"Malformed tree description: {err}") from None
        tree.check()
        return tree

    def check(self) -> None:
        """Raise `ValueError` unless the arrays describe one well-formed binary tree."""
        n = self.n_nodes
        if self.task not in ("classification", "regression"):
            raise ValueError(f"Malformed tree: unknown task {self.task!r}.")
        for name in ("children_left", "children_right", "threshold", "weighted_n_node_samples"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"Malformed tree: {name} must have shape ({n},).")
        missing = self.missing_go_to_left
        if missing is not None and (missing.shape != (n,) or missing.dtype != bool):
            raise ValueError(f"Malformed tree: missing_go_to_left must be bool ({n},).")
        if self.value.ndim != 2 or self.value.shape[0] != n or n == 0:
            raise ValueError(f"Malformed tree: value must have shape ({n}, k) with n >= 1.")
        leaf = self.feature == LEAF
        if np.any(leaf != (self.children_left == LEAF)) or np.any(
            leaf != (self.children_right == LEAF)
        ):
            raise ValueError("Malformed tree: leaves and children disagree.")
        if not np.all(np.isfinite(self.value)) or not np.all(
            np.isfinite(self.weighted_n_node_samples)
        ):
            raise ValueError("Malformed tree: values and weights must be finite numbers.")
        if np.any(~leaf & ~np.isfinite(self.threshold)):
            raise ValueError("Malformed tree: an internal node has no finite threshold.")
        children = np.concatenate([self.children_left[~leaf], self.children_right[~leaf]])
        if np.any(children <= 0) or np.any(children >= n) or len(set(children.tolist())) != len(
            children
        ):
            raise ValueError("Malformed tree: children must be distinct nodes 1..n_nodes-1.")
        if len(children) != n - 1:
            raise ValueError("Malformed tree: every node but the root must have one parent.")
        parents = np.nonzero(~leaf)[0]
        if np.any(self.children_left[parents] <= parents) or np.any(
            self.children_right[parents] <= parents
        ):
            raise ValueError("Malformed tree: nodes must be in preorder (child after parent).")
        if np.any(self.feature[~leaf] < 0):
            raise ValueError("Malformed tree: negative split feature.")


def _directions(values) -> np.ndarray | None:
    """`missing_go_to_left` of a tree description: a list of booleans, or absent."""
    if values is None:
        return None
    if not isinstance(values, list) or not all(isinstance(v, bool) for v in values):
        raise ValueError("missing_go_to_left must be a list of booleans")
    return np.asarray(values, dtype=bool)
