"""Exporting fitted trees: text (scikit-learn's format), Graphviz DOT, matplotlib, JSON.

Every function here accepts a fitted `OptimalTreeClassifier` / `OptimalTreeRegressor`,
the result of `qbnb_jax.solve`, or a bare `Tree`. Estimators and results know their
class labels (and estimators their feature names); for a bare `Tree` classes are shown
by index unless `class_names` is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
from collections.abc import Callable
from io import StringIO
from typing import Any

import numpy as np

from qbnb_jax._problem.tree import LEAF, Tree

FORMAT = "qbnb_jax.tree"
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class _Model:
    tree: Tree
    classes: np.ndarray | None  # class labels, classification only
    feature_names: list[str] | None
    n_features: int | None


def _unwrap(obj: Any) -> _Model:
    """The tree and what is known about its labels and features (the tree checked)."""
    model = _unwrap_unchecked(obj)
    # The walks below trust preorder and distinct children: a cycle would never end.
    model.tree.check()
    return model


def _unwrap_unchecked(obj: Any) -> _Model:
    if isinstance(obj, Tree):
        return _Model(obj, None, None, None)
    if hasattr(obj, "get_params") and hasattr(obj, "fit"):  # an estimator
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(obj)
        tree = getattr(obj, "tree_", None)
        if not isinstance(tree, Tree):
            raise TypeError(f"{type(obj).__name__} is not a qbnb_jax tree estimator.")
        names = getattr(obj, "feature_names_in_", None)
        n_features = getattr(obj, "n_features_in_", None)
        classes = getattr(obj, "classes_", None) if tree.task == "classification" else None
        return _Model(
            tree,
            None if classes is None else np.asarray(classes),
            None if names is None else [str(name) for name in names],
            None if n_features is None else int(n_features),
        )
    tree = getattr(obj, "tree", None)
    if isinstance(tree, Tree):  # a SolveResult
        classes = getattr(obj, "classes", None)
        n_features = getattr(obj, "n_features", None)
        return _Model(
            tree,
            None if classes is None else np.asarray(classes),
            None,
            None if n_features is None else int(n_features),
        )
    raise TypeError(
        "Expected a fitted OptimalTreeClassifier/OptimalTreeRegressor, a SolveResult or a "
        f"Tree; got {type(obj).__name__}."
    )


def _feature_names(model: _Model, feature_names: Any) -> list[str] | None:
    if feature_names is None:
        return model.feature_names
    names = [str(name) for name in feature_names]
    if model.n_features is not None:
        if len(names) != model.n_features:
            raise ValueError(
                f"feature_names must contain {model.n_features} elements, got {len(names)}"
            )
    else:
        needed = int(model.tree.feature.max(initial=LEAF)) + 1
        if len(names) < needed:
            raise ValueError(
                f"feature_names must contain at least {needed} elements (the tree splits "
                f"on feature {needed - 1}), got {len(names)}"
            )
    return names


def _class_names(model: _Model, class_names: Any) -> list[Any] | None:
    """Labels to show per class column, or None for a regression tree."""
    tree = model.tree
    if tree.task != "classification":
        return None
    n_classes = tree.value.shape[1]
    if class_names is None:
        if model.classes is not None:
            return list(model.classes)
        return list(range(n_classes))
    names = list(class_names)
    if len(names) != n_classes:
        raise ValueError(
            f"class_names must contain as many items as the tree has classes; got "
            f"{len(names)} while the tree has {n_classes} classes."
        )
    return names


def _graph_class_names(model: _Model, class_names: Any) -> list[Any] | None:
    """Class line labels for DOT and plots: None (no line), labels or ``y[i]``."""
    tree = model.tree
    if tree.task != "classification" or class_names is False:
        return None
    if class_names is True or (class_names is None and model.classes is None):
        return [f"y[{i}]" for i in range(tree.value.shape[1])]
    return _class_names(model, class_names)


def _subtree_depths(tree: Tree) -> np.ndarray:
    """Number of levels in the subtree rooted at each node (a leaf has 1)."""
    depths = np.ones(tree.n_nodes, dtype=np.int64)
    # Children come after their parent in preorder, so a reverse sweep sees them first.
    for node in range(tree.n_nodes - 1, -1, -1):
        left = int(tree.children_left[node])
        if left != LEAF:
            depths[node] = 1 + max(depths[left], depths[int(tree.children_right[node])])
    return depths


def export_text(
    tree_or_estimator: Any,
    *,
    feature_names: Any = None,
    class_names: Any = None,
    max_depth: int = 10,
    spacing: int = 3,
    decimals: int = 2,
    show_weights: bool = False,
) -> str:
    """Build a text report of the rules of a tree, in `sklearn.tree.export_text`'s format.

    Parameters
    ----------
    tree_or_estimator : OptimalTreeClassifier, OptimalTreeRegressor, SolveResult or Tree
        The tree to export.
    feature_names : array-like of str, default=None
        Names of the features. If None, the estimator's `feature_names_in_` when it
        has them, else ``"feature_0", "feature_1", ...``.
    class_names : array-like, default=None
        Names of the classes, in the order of the estimator's `classes_`. If None, the
        class labels (or class indices for a bare `Tree`).
    max_depth : int, default=10
        Only the first `max_depth` levels are exported; deeper branches are reported
        as ``truncated branch of depth d``.
    spacing : int, default=3
        Number of spaces between edges.
    decimals : int, default=2
        Number of decimals of thresholds, weights and values.
    show_weights : bool, default=False
        Also print the weighted class counts of each leaf (classification).

    Returns
    -------
    report : str
        One line per split branch and leaf, e.g. ``|--- petal width (cm) <= 0.80``;
        a tree fitted on missing values adds `` or missing`` to the branch they take
        (in DOT and plots, to the split's line when they go left: the True edge).
        Leaves read ``class: c`` (``weights: [..] class: c`` with `show_weights`) for
        classification and ``value: [..]`` (one entry per target) for regression.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from qbnb_jax import OptimalTreeClassifier, export_text
    >>> iris = load_iris()
    >>> clf = OptimalTreeClassifier(max_depth=2).fit(iris.data, iris.target)
    >>> print(export_text(clf, feature_names=iris.feature_names))  # doctest: +SKIP
    |--- petal length (cm) <= 2.45
    |   |--- ...
    """
    model = _unwrap(tree_or_estimator)
    tree = model.tree
    names = _feature_names(model, feature_names)
    classes = _class_names(model, class_names)
    classification = tree.task == "classification"

    def feature_name(node: int) -> str:
        f = int(tree.feature[node])
        return str(names[f]) if names is not None else f"feature_{f}"

    def number(v: float) -> str:
        return "{1:.{0}f}".format(decimals, v)

    report = StringIO()

    def add_leaf(node: int, indent: str) -> None:
        value = tree.value[node]
        if classification:
            text = ""
            if show_weights:
                text = "[" + ", ".join(number(v) for v in value) + "]"
            assert classes is not None
            text += " class: " + str(classes[int(np.argmax(value))])
            report.write(f"{indent} weights: {text}\n" if show_weights else f"{indent}{text}\n")
        else:
            text = "[" + ", ".join(number(v) for v in value) + "]"
            report.write(f"{indent} value: {text}\n")

    subtree_depths: np.ndarray | None = None  # only needed when a branch is truncated
    # An explicit stack rather than recursion: a deep tree must not hit the
    # interpreter's recursion limit. Items are (node, depth) or a line to write.
    stack: list[tuple[int, int] | str] = [(0, 1)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            report.write(item)
            continue
        node, depth = item
        indent = ("|" + " " * spacing) * depth
        indent = indent[:-spacing] + "-" * spacing
        if depth <= max_depth + 1:
            if tree.feature[node] != LEAF:
                name = feature_name(node)
                threshold = number(float(tree.threshold[node]))
                left, right = _missing_marks(tree, node)
                report.write(f"{indent} {name} <= {threshold}{left}\n")
                stack.append((int(tree.children_right[node]), depth + 1))
                stack.append(f"{indent} {name} >  {threshold}{right}\n")
                stack.append((int(tree.children_left[node]), depth + 1))
            else:
                add_leaf(node, indent)
        else:
            if subtree_depths is None:
                subtree_depths = _subtree_depths(tree)
            if subtree_depths[node] == 1:
                add_leaf(node, indent)
            else:
                report.write(f"{indent} truncated branch of depth {subtree_depths[node]}\n")
    return report.getvalue()


def _missing_marks(tree: Tree, node: int) -> tuple[str, str]:
    """What the left and right branch of a split add for missing values: nothing for
    trees that saw none (`Tree.missing_go_to_left` None), else " or missing" on the
    side NaN goes to."""
    if tree.missing_go_to_left is None:
        return "", ""
    mark = " or missing"
    return (mark, "") if tree.missing_go_to_left[node] else ("", mark)


# -- node labels shared by DOT and matplotlib ------------------------------------------


def _format_number(v: float, precision: int) -> str:
    v = float(v)
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(round(v, precision))


def _node_lines(
    model: _Model,
    node: int,
    names: list[str] | None,
    classes: list[Any] | None,
    precision: int,
    node_ids: bool,
    feature_fmt: str,
) -> list[str]:
    tree = model.tree
    lines = []
    if node_ids:
        lines.append(f"node #{node}")
    if tree.feature[node] != LEAF:
        f = int(tree.feature[node])
        feature = str(names[f]) if names is not None else feature_fmt.format(f)
        lines.append(f"{feature} <= {round(float(tree.threshold[node]), precision)}"
                     f"{_missing_marks(tree, node)[0]}")
    lines.append(f"samples = {_format_number(tree.weighted_n_node_samples[node], precision)}")
    value = tree.value[node]
    if tree.task == "classification":
        if np.all(np.mod(value, 1) == 0):
            text = ", ".join(str(int(v)) for v in value)
        else:
            text = ", ".join(str(float(v)) for v in np.around(value, precision))
        lines.append(f"value = [{text}]")
        if classes is not None:
            lines.append(f"class = {classes[int(np.argmax(value))]}")
    else:
        rounded = [str(float(v)) for v in np.around(value, precision)]
        lines.append("value = " + (rounded[0] if len(rounded) == 1 else f"[{', '.join(rounded)}]"))
    return lines


def _color_brew(n: int) -> list[tuple[int, int, int]]:
    """`n` colors with equally spaced hues (as scikit-learn's tree plots)."""
    colors = []
    s, v = 0.75, 0.9
    c = s * v
    m = v - c
    for h in np.arange(25, 385, 360.0 / n).astype(int)[:n]:
        h_bar = h / 60.0
        x = c * (1 - abs((h_bar % 2) - 1))
        rgb = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x), (c, x, 0)]
        r, g, b = rgb[int(h_bar)]
        colors.append((int(255 * (r + m)), int(255 * (g + m)), int(255 * (b + m))))
    return colors


def _fill_colors(tree: Tree) -> list[str]:
    """Per-node fill: majority class tinted by purity, or regression value extremity."""
    out = []
    if tree.task == "classification":
        palette = _color_brew(tree.value.shape[1])
        for node in range(tree.n_nodes):
            counts = tree.value[node]
            total = counts.sum()
            shares = counts / total if total > 0 else np.full_like(counts, 1 / len(counts))
            color = palette[int(np.argmax(shares))]
            top = sorted(shares, reverse=True)
            alpha = 0.0 if len(top) == 1 or top[1] >= 1 else (top[0] - top[1]) / (1 - top[1])
            out.append(_tint(color, alpha))
    else:
        color = _color_brew(1)[0]
        first = tree.value[:, 0]
        lo, hi = float(first.min()), float(first.max())
        for node in range(tree.n_nodes):
            alpha = 0.0 if hi <= lo or tree.value.shape[1] != 1 else (first[node] - lo) / (hi - lo)
            out.append(_tint(color, alpha))
    return out


def _tint(color: tuple[int, int, int], alpha: float) -> str:
    rgb = [int(round(alpha * c + (1 - alpha) * 255, 0)) for c in color]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def export_graphviz(
    tree_or_estimator: Any,
    *,
    feature_names: Any = None,
    class_names: Any = None,
    max_depth: int | None = None,
    filled: bool = False,
    rounded: bool = False,
    node_ids: bool = False,
    precision: int = 3,
    fontname: str = "helvetica",
) -> str:
    """Export a tree in Graphviz DOT format.

    The output follows `sklearn.tree.export_graphviz(..., impurity=False)`: each node
    shows its split, its training weight (``samples``), its value and (classification)
    its majority class; the root's edges are labelled True (left, ``x <= t``) and False.

    Parameters
    ----------
    tree_or_estimator : OptimalTreeClassifier, OptimalTreeRegressor, SolveResult or Tree
        The tree to export.
    feature_names : array-like of str, default=None
        Names of the features; if None, the estimator's `feature_names_in_` when it has
        them, else ``x[0], x[1], ...``.
    class_names : array-like, bool or None, default=None
        Names of the classes. None: the class labels when known, else ``y[i]``;
        True: ``y[i]``; False: no class line.
    max_depth : int or None, default=None
        Nodes deeper than this are drawn as ``(...)``.
    filled : bool, default=False
        Color nodes by majority class (classification) or value (regression).
    rounded : bool, default=False
        Draw boxes with rounded corners.
    node_ids : bool, default=False
        Show the index of each node.
    precision : int, default=3
        Digits after the decimal point for thresholds and values.
    fontname : str, default="helvetica"
        Font of nodes and edges.

    Returns
    -------
    dot : str
        The graph in the DOT language (render with ``dot -Tpng``).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from qbnb_jax import OptimalTreeClassifier, export_graphviz
    >>> X, y = load_iris(return_X_y=True)
    >>> dot = export_graphviz(OptimalTreeClassifier(max_depth=1).fit(X, y))
    >>> dot.splitlines()[0]
    'digraph Tree {'
    """
    model = _unwrap(tree_or_estimator)
    tree = model.tree
    names = _feature_names(model, feature_names)
    classes = _graph_class_names(model, class_names)
    colors = _fill_colors(tree) if filled else None

    def escape(text: str) -> str:
        return text.replace('"', r"\"")

    out = StringIO()
    out.write("digraph Tree {\n")
    out.write("node [shape=box")
    styles = [s for s, on in (("filled", filled), ("rounded", rounded)) if on]
    if styles:
        style = ", ".join(styles)
        out.write(f', style="{style}", color="black"')
    out.write(f', fontname="{fontname}"] ;\n')
    out.write(f'edge [fontname="{fontname}"] ;\n')

    # An explicit stack rather than recursion, so that deep trees export too.
    stack: list[tuple[int, int | None, int]] = [(0, None, 0)]
    while stack:
        node, parent, depth = stack.pop()
        if max_depth is None or depth <= max_depth:
            lines = _node_lines(model, node, names, classes, precision, node_ids, "x[{}]")
            label = "\\n".join(escape(line) for line in lines)
            out.write(f'{node} [label="{label}"')
            if colors is not None:
                out.write(f', fillcolor="{colors[node]}"')
            out.write("] ;\n")
            if parent is not None:
                out.write(f"{parent} -> {node}")
                if parent == 0:
                    if node == tree.children_left[0]:
                        out.write(' [labeldistance=2.5, labelangle=45, headlabel="True"]')
                    else:
                        out.write(' [labeldistance=2.5, labelangle=-45, headlabel="False"]')
                out.write(" ;\n")
            if tree.children_left[node] != LEAF:
                stack.append((int(tree.children_right[node]), node, depth + 1))
                stack.append((int(tree.children_left[node]), node, depth + 1))
        else:
            out.write(f'{node} [label="(...)"')
            if colors is not None:
                out.write(', fillcolor="#C0C0C0"')
            out.write("] ;\n")
            if parent is not None:
                out.write(f"{parent} -> {node} ;\n")

    out.write("}")
    return out.getvalue()


def plot_tree(
    tree_or_estimator: Any,
    ax: Any = None,
    *,
    feature_names: Any = None,
    class_names: Any = None,
    max_depth: int | None = None,
    filled: bool = False,
    node_ids: bool = False,
    precision: int = 3,
    fontsize: float | None = None,
) -> list[Any]:
    """Plot a tree with matplotlib (an optional dependency, imported on first use).

    Parameters
    ----------
    tree_or_estimator : OptimalTreeClassifier, OptimalTreeRegressor, SolveResult or Tree
        The tree to plot.
    ax : matplotlib Axes, default=None
        Axes to draw on (cleared first); the current axes if None.
    feature_names, class_names, max_depth, filled, node_ids, precision
        As in `export_graphviz`.
    fontsize : float, default=None
        Font size of the node labels; matplotlib's default if None.

    Returns
    -------
    annotations : list of matplotlib.text.Text
        One text artist per drawn node.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from qbnb_jax import OptimalTreeClassifier, plot_tree
    >>> X, y = load_iris(return_X_y=True)
    >>> artists = plot_tree(OptimalTreeClassifier().fit(X, y))  # doctest: +SKIP
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plot_tree needs matplotlib: pip install 'qbnb_jax[plot]' or pip install matplotlib"
        ) from err

    model = _unwrap(tree_or_estimator)
    tree = model.tree
    names = _feature_names(model, feature_names)
    classes = _graph_class_names(model, class_names)
    colors = _fill_colors(tree) if filled else None

    x_pos, depth_of = _layout(tree, max_depth)
    width = max(max(x_pos.values()), 1.0)
    height = max(max(depth_of.values()), 1)

    if ax is None:
        ax = plt.gca()
    ax.clear()
    ax.set_axis_off()

    def xy(node: int) -> tuple[float, float]:
        return ((x_pos[node] + 0.5) / (width + 1.0), 1.0 - (depth_of[node] + 0.5) / (height + 1.0))

    parent_of = {
        int(child): node
        for node in x_pos
        for child in (tree.children_left[node], tree.children_right[node])
        if child != LEAF and int(child) in x_pos
    }
    artists = []
    deepest = max(depth_of.values(), default=0)
    for node in sorted(x_pos):
        lines = _node_lines(model, node, names, classes, precision, node_ids, "x[{}]")
        truncated = max_depth is not None and depth_of[node] > max_depth
        text = "(...)" if truncated else "\n".join(lines)
        face = "white"
        if colors is not None:
            face = "#C0C0C0" if truncated else colors[node]
        kwargs = dict(
            ha="center",
            va="center",
            bbox=dict(boxstyle="round", fc=face, ec="black"),
            xycoords="axes fraction",
            # A node's edge starts at its parent's centre: parents are drawn above
            # their children, so each box hides the edges' ends behind its text.
            zorder=3 + deepest - depth_of[node],
        )
        if fontsize is not None:
            kwargs["fontsize"] = fontsize
        parent = parent_of.get(node)
        if parent is None:
            artists.append(ax.annotate(text, xy=xy(node), **kwargs))
        else:
            artists.append(
                ax.annotate(
                    text,
                    xy=xy(parent),
                    xytext=xy(node),
                    textcoords="axes fraction",
                    arrowprops=dict(arrowstyle="<-"),
                    **kwargs,
                )
            )
    return artists


def _layout(tree: Tree, max_depth: int | None) -> tuple[dict[int, float], dict[int, int]]:
    """Horizontal position and depth of each drawn node.

    Leaves (and truncated nodes) are spread left to right, parents centred above
    their children; computed without recursion so that deep trees plot too.
    """
    x_pos: dict[int, float] = {}
    depth_of: dict[int, int] = {0: 0}
    order = []  # drawn nodes in preorder: leaves left to right, parents before children
    stack = [0]
    while stack:
        node = stack.pop()
        order.append(node)
        is_cut = max_depth is not None and depth_of[node] > max_depth
        if tree.children_left[node] != LEAF and not is_cut:
            for child in (int(tree.children_right[node]), int(tree.children_left[node])):
                depth_of[child] = depth_of[node] + 1
                stack.append(child)
    next_leaf = 0.0
    for node in order:
        is_cut = max_depth is not None and depth_of[node] > max_depth
        if tree.children_left[node] == LEAF or is_cut:
            x_pos[node] = next_leaf
            next_leaf += 1.0
    for node in reversed(order):  # children before parents
        if node not in x_pos:
            left, right = int(tree.children_left[node]), int(tree.children_right[node])
            x_pos[node] = (x_pos[left] + x_pos[right]) / 2
    return x_pos, depth_of


# -- JSON ------------------------------------------------------------------------------

# Limits on what `load_tree` reads, so that a corrupt or hostile file is refused with a
# clear message instead of exhausting memory or the interpreter's stack.
MAX_FILE_BYTES = 256 * 2**20
MAX_JSON_NESTING = 32  # a tree file itself nests four levels: file, tree, value, row
MAX_NODES = 2**20
MAX_TREE_DEPTH = 10_000
MAX_FEATURES = 2**31 - 1  # split features are stored as int32
KINDS = ("estimator", "result", "tree")


def _json_label(label: Any) -> Any:
    if isinstance(label, np.generic):
        label = label.item()
    if isinstance(label, (str, bool, int, float)) or label is None:
        return label
    raise ValueError(f"Class label {label!r} cannot be stored in JSON (use str or numbers).")


def _finite_or_none(value: Any) -> float | None:
    """A number for the file; JSON has no NaN or infinity, so those become null.

    (A loaded estimator whose file had no objective holds NaN, and saving it again
    must still give a file that loads.)
    """
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _json_params(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in params.items():
        if isinstance(value, np.generic):
            value = value.item()
        if key == "time_limit" and isinstance(value, float) and math.isinf(value):
            value = None  # "no limit", which JSON cannot write as infinity
        out[key] = value
    return out


def _kind(obj: Any) -> str:
    if isinstance(obj, Tree):
        return "tree"
    return "estimator" if hasattr(obj, "get_params") else "result"


def save_tree(
    estimator_or_result: Any, path: str | os.PathLike, *, feature_names: Any = None
) -> None:
    """Save a fitted tree to a JSON file that `load_tree` reads back.

    The file holds what was saved (estimator, solve result or bare tree), the tree
    arrays, the task, the class labels, the feature names and count (when known), the
    objective, lower bound, gap and status, and the estimator's parameters (the depth
    for a solve result).

    Parameters
    ----------
    estimator_or_result : OptimalTreeClassifier, OptimalTreeRegressor, SolveResult or Tree
        A fitted estimator, the result of `qbnb_jax.solve`, or a bare `Tree`.
    path : str or path-like
        The file to write (overwritten).
    feature_names : array-like of str, default=None
        Feature names to store; defaults to the estimator's `feature_names_in_`.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from qbnb_jax import OptimalTreeClassifier, save_tree, load_tree
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = OptimalTreeClassifier().fit(X, y)
    >>> save_tree(clf, "tree.json")  # doctest: +SKIP
    >>> (load_tree("tree.json").predict(X) == clf.predict(X)).all()  # doctest: +SKIP
    True
    """
    write_text_file(path, tree_json(estimator_or_result, feature_names=feature_names))


def tree_json(estimator_or_result: Any, *, feature_names: Any = None) -> str:
    """The text `save_tree` writes (JSON, ending with a newline)."""
    data = _to_json_dict(estimator_or_result, feature_names)
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


def write_text_file(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all.

    The text goes to a temporary file beside the target, which is then renamed over
    it: an interruption (the command line exits at once on Ctrl-C) never leaves a
    truncated file. A target that is not a regular file (a FIFO, /dev/stdout) is
    written in place.
    """
    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        with open(target, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        return
    temporary = f"{target}.{os.getpid()}.tmp"
    try:
        with open(temporary, "x", encoding="utf-8", newline="") as fh:
            fh.write(text)
        if os.path.exists(target):
            shutil.copymode(target, temporary)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _to_json_dict(obj: Any, feature_names: Any = None) -> dict[str, Any]:
    model = _unwrap(obj)
    names = _feature_names(model, feature_names)
    n_features = (
        model.n_features
        if model.n_features is not None
        else (len(names) if names is not None else None)
    )
    classes = None if model.classes is None else [_json_label(c) for c in model.classes]
    kind = _kind(obj)
    if kind == "estimator":
        objective = getattr(obj, "objective_", None)
        lower_bound = getattr(obj, "lower_bound_", None)
        gap = getattr(obj, "gap_", None)
        status = getattr(obj, "status_", None)
        n_iter = getattr(obj, "n_iter_", None)
        params = _json_params({k: v for k, v in obj.get_params().items() if k != "verbose"})
    elif kind == "tree":
        objective = lower_bound = gap = status = n_iter = params = None
    else:
        objective = getattr(obj, "objective", None)
        lower_bound = getattr(obj, "lower_bound", None)
        gap = getattr(obj, "gap", None)
        status = getattr(obj, "status", None)
        n_iter = (getattr(obj, "stats", None) or {}).get("iterations")
        depth = getattr(obj, "depth", None)
        params = None if depth is None else {"depth": int(depth)}
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "kind": kind,
        "task": model.tree.task,
        "classes": classes,
        "feature_names": names,
        "n_features": n_features,
        "objective": _finite_or_none(objective),
        "lower_bound": _finite_or_none(lower_bound),
        "gap": _finite_or_none(gap),
        "status": None if status is None else str(status),
        "n_iter": None if n_iter is None else int(n_iter),
        "params": params,
        "tree": model.tree.to_dict(),
    }


def load_tree(path: str | os.PathLike) -> Any:
    """Load a tree saved by `save_tree`, as the kind of object that was saved.

    Parameters
    ----------
    path : str or path-like
        A JSON file written by `save_tree`.

    Returns
    -------
    loaded : OptimalTreeClassifier, OptimalTreeRegressor, SolveResult or Tree
        A saved estimator loads as a fitted estimator (``predict``, ``export_text``,
        ... work; refitting is possible too, with the stored parameters). A saved
        `SolveResult` loads as a `SolveResult` whose ``stats`` hold only the iteration
        count. A saved bare `Tree` loads as a `Tree`. Files written before the kind
        was recorded load as estimators.

    Raises
    ------
    ValueError
        If the file is not valid JSON, does not describe a valid tree or exceeds the
        limits (`MAX_FILE_BYTES`, `MAX_JSON_NESTING`, `MAX_NODES`, `MAX_TREE_DEPTH`);
        the message names the file and the problem.
    OSError
        If the file cannot be read.
    """
    return _load(path, _as_saved_kind)


def load_estimator(path: str | os.PathLike) -> Any:
    """Load any file `save_tree` wrote as a fitted estimator (what the CLI predicts with).

    A bare tree's classes are its value columns 0, 1, ... unless the file names them.
    """
    return _load(path, _as_estimator)


@dataclasses.dataclass(frozen=True)
class _Saved:
    """The checked contents of a tree file."""

    kind: str
    tree: Tree
    classes: list[Any] | None
    feature_names: list[str] | None
    n_features: int | None
    objective: float | None
    lower_bound: float | None
    gap: float | None
    status: str | None
    n_iter: int | None
    params: dict[str, Any]


def _load(path: str | os.PathLike, build: Callable[[_Saved], Any]) -> Any:
    data = _read_json(path)
    try:
        return build(_parse_saved(data))
    except (ValueError, OverflowError, TypeError) as err:
        raise ValueError(f"{os.fspath(path)}: {err}") from None


def _as_saved_kind(saved: _Saved) -> Any:
    if saved.kind == "tree":
        return saved.tree
    if saved.kind == "result":
        return _as_result(saved)
    return _as_estimator(saved)


class _NonFiniteNumber(ValueError):
    pass


def _as_estimator(saved: _Saved) -> Any:
    from qbnb_jax._constants import SUPPORTED_DEPTHS
    from qbnb_jax._sklearn.estimator import OptimalTreeClassifier, OptimalTreeRegressor

    tree = saved.tree
    classification = tree.task == "classification"
    cls = OptimalTreeClassifier if classification else OptimalTreeRegressor
    params = dict(saved.params)
    if saved.kind == "result" and "depth" in params:
        params["max_depth"] = params["depth"]
    known = {k: v for k, v in params.items() if k in cls().get_params()}
    # a tree deeper than the solver fits (a file written by hand) still predicts; its
    # estimator would refit at the deepest supported depth
    known.setdefault("max_depth", min(max(tree.max_depth, 1), SUPPORTED_DEPTHS[-1]))
    est = cls(**known)
    est._validate_params()

    est.tree_ = tree
    if saved.n_features is not None:
        est.n_features_in_ = saved.n_features
    if saved.feature_names is not None:
        est.feature_names_in_ = np.asarray(saved.feature_names, dtype=object)
    if classification:
        classes = saved.classes
        if classes is None:
            classes = list(range(tree.value.shape[1]))
        est.classes_ = np.asarray(classes)
        est.n_classes_ = len(classes)
        est.n_outputs_ = 1
    else:
        est.n_outputs_ = int(tree.value.shape[1])
    est.objective_ = _nan_if_none(saved.objective)
    # the penalty per split is ccp_alpha times the root's weight
    est.penalized_objective_ = est.objective_ + float(est.ccp_alpha) * float(
        tree.weighted_n_node_samples[0]) * (tree.n_nodes - tree.n_leaves)
    est.lower_bound_ = _nan_if_none(saved.lower_bound)
    est.gap_ = _nan_if_none(saved.gap)
    est.status_ = "unknown" if saved.status is None else saved.status
    est.n_iter_ = 0 if saved.n_iter is None else saved.n_iter
    est.solve_stats_ = {}
    return est


def _as_result(saved: _Saved) -> Any:
    from qbnb_jax._search.solve import SolveResult

    tree = saved.tree
    n_features = saved.n_features
    if n_features is None:  # not written by save_tree, which always stores it for a result
        n_features = int(tree.feature.max(initial=0)) + 1
    return SolveResult(
        tree=tree,
        objective=_nan_if_none(saved.objective),
        lower_bound=_nan_if_none(saved.lower_bound),
        gap=_nan_if_none(saved.gap),
        status="unknown" if saved.status is None else saved.status,
        stats={} if saved.n_iter is None else {"iterations": saved.n_iter},
        task=tree.task,
        depth=saved.params.get("depth", max(tree.max_depth, 1)),
        classes=None if saved.classes is None else np.asarray(saved.classes),
        n_features=n_features,
    )


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _reject_constant(name: str) -> float:
    raise _NonFiniteNumber(f"{name} is not allowed in a tree file (numbers must be finite).")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFiniteNumber(f"the number {text} is out of range (numbers must be finite).")
    return value


def _read_json(path: str | os.PathLike) -> Any:
    """The parsed JSON of a tree file, refusing files over the size and nesting limits."""
    name = os.fspath(path)
    with open(path, "rb") as fh:
        raw = fh.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"{name}: larger than the {MAX_FILE_BYTES} bytes a tree file may have.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not a UTF-8 text file.") from None
    if _json_nesting(raw) > MAX_JSON_NESTING:
        raise ValueError(
            f"{name}: not a tree file (arrays and objects nested more than "
            f"{MAX_JSON_NESTING} levels deep)."
        )
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NonFiniteNumber as err:
        raise ValueError(f"{name}: {err}") from None
    except ValueError as err:  # JSONDecodeError, or an integer with too many digits
        raise ValueError(f"{name}: not a valid JSON file ({_one_line(err)}).") from None
    except RecursionError:  # the nesting scan should make this unreachable
        raise ValueError(f"{name}: not a tree file (nested too deeply to read).") from None


def _one_line(err: BaseException) -> str:
    return " ".join((str(err) or type(err).__name__).split())


_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_NESTING_CHUNK = 2**20


def _json_nesting(raw: bytes) -> int:
    """Deepest nesting of arrays and objects in JSON text, brackets in strings aside.

    Python's json module recurses once per level, so over-deep input must be refused
    before parsing. This scan runs at C speed (regex, bytes.translate, numpy) in
    bounded memory; UTF-8 never puts these ASCII bytes inside a multi-byte character.
    """
    marks = _ESCAPE.sub(b"", raw).translate(None, _NOT_STRUCTURE)  # an escaped " is text
    level, deepest, quotes = 0, 0, 0
    for start in range(0, len(marks), _NESTING_CHUNK):
        chunk = np.frombuffer(marks[start : start + _NESTING_CHUNK], dtype=np.uint8)
        is_quote = chunk == ord('"')
        outside = (quotes + np.cumsum(is_quote)) % 2 == 0
        opens = ((chunk == ord("[")) | (chunk == ord("{"))) & outside
        closes = ((chunk == ord("]")) | (chunk == ord("}"))) & outside
        levels = level + np.cumsum(opens.astype(np.int64) - closes)
        deepest = max(deepest, int(levels.max()))
        level = int(levels[-1])
        quotes += int(is_quote.sum())
    return deepest


def _is_number(value: Any) -> bool:
    """A JSON number (json gives int or float; bool is not a number here)."""
    return type(value) in (int, float)


def _is_int(value: Any) -> bool:
    return type(value) is int


def _parse_saved(data: Any) -> _Saved:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f'not a qbnb_jax tree file (expected "format": "{FORMAT}").')
    version = data.get("version")
    if not _is_int(version) or version != FORMAT_VERSION:
        raise ValueError(
            f"unsupported file version {version!r} (this qbnb_jax reads version "
            f"{FORMAT_VERSION})."
        )
    kind = data.get("kind", "estimator")  # files from before "kind" held estimators
    if kind not in KINDS:
        raise ValueError(f"'kind' must be one of {', '.join(KINDS)}; got {kind!r}.")
    task = data.get("task")
    if task not in ("classification", "regression"):
        raise ValueError(f"unknown task {task!r}; expected 'classification' or 'regression'.")
    tree = _tree_from_json(data.get("tree"), task)
    names, n_features = _parse_features(data, tree)
    status = data.get("status")
    if status is not None and not isinstance(status, str):
        raise ValueError(f"'status' must be a string or null; got {status!r}.")
    n_iter = data.get("n_iter")
    if n_iter is not None and not (_is_int(n_iter) and n_iter >= 0):
        raise ValueError(f"'n_iter' must be a non-negative integer or null; got {n_iter!r}.")
    return _Saved(
        kind=kind,
        tree=tree,
        classes=_parse_classes(data.get("classes"), tree, kind),
        feature_names=names,
        n_features=n_features,
        objective=_optional_number(data, "objective"),
        lower_bound=_optional_number(data, "lower_bound"),
        gap=_optional_number(data, "gap"),
        status=status,
        n_iter=n_iter,
        params=_parse_params(data.get("params"), kind),
    )


def _optional_number(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if not _is_number(value) or not math.isfinite(_float_or_inf(value)):
        raise ValueError(f"{key!r} must be a finite number or null; got {value!r}.")
    return float(value)


def _float_or_inf(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return math.inf


def _parse_features(data: dict[str, Any], tree: Tree) -> tuple[list[str] | None, int | None]:
    n_features = data.get("n_features")
    if n_features is not None and not (_is_int(n_features) and 1 <= n_features <= MAX_FEATURES):
        raise ValueError(
            f"'n_features' must be an integer from 1 to {MAX_FEATURES} or null; got "
            f"{n_features!r}."
        )
    names = data.get("feature_names")
    if names is not None:
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError("'feature_names' must be a non-empty list of strings or null.")
        if len(set(names)) != len(names):
            raise ValueError("'feature_names' has repeated names.")
        if n_features is not None and len(names) != n_features:
            raise ValueError(
                f"'feature_names' has {len(names)} names but 'n_features' is {n_features}."
            )
        n_features = len(names)
    max_feature = int(tree.feature.max(initial=LEAF))
    if n_features is not None and max_feature >= n_features:
        raise ValueError(
            f"the tree splits on feature {max_feature} but there are only {n_features} features."
        )
    return names, n_features


def _parse_classes(classes: Any, tree: Tree, kind: str) -> list[Any] | None:
    if tree.task == "regression":
        if classes is not None:
            raise ValueError("'classes' must be null for a regression tree.")
        return None
    if classes is None and kind == "tree":  # a bare tree knows its classes by index only
        return None
    n_classes = tree.value.shape[1]
    if not isinstance(classes, list) or len(classes) != n_classes:
        raise ValueError(
            f"'classes' must be a list of {n_classes} labels (one per column of the tree's "
            "value)."
        )
    # Labels of one kind, as np.unique gives them at fit time: mixing would turn the
    # numbers into strings once the labels become an array.
    if not (
        all(isinstance(c, str) for c in classes)
        or all(_is_number(c) for c in classes)
        or all(isinstance(c, bool) for c in classes)
    ):
        raise ValueError("'classes' must hold only strings, only numbers or only booleans.")
    if len({json.dumps(c) for c in classes}) != len(classes):
        raise ValueError("'classes' has repeated labels.")
    return classes


def _parse_params(params: Any, kind: str) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ValueError("'params' must be an object or null.")
    if kind == "result" and "depth" in params:
        depth = params["depth"]
        if not (_is_int(depth) and depth >= 1):
            raise ValueError(f"'params' depth must be a positive integer; got {depth!r}.")
    return params


# -- the 'tree' object: every field type-checked before numpy sees it (numpy would read
# "1.5" or true as a number) ---------------------------------------------------------


def _malformed(message: str) -> ValueError:
    return ValueError(f"Malformed tree description: {message}")


def _tree_from_json(obj: Any, task: str) -> Tree:
    if not isinstance(obj, dict):
        raise ValueError("missing or malformed 'tree' object.")
    n = _node_count(obj)
    tree = Tree(
        children_left=_index_array(obj, "children_left", n),
        children_right=_index_array(obj, "children_right", n),
        feature=_index_array(obj, "feature", n),
        threshold=_number_array(obj, "threshold", n, nulls=True),
        value=_value_array(obj, n),
        weighted_n_node_samples=_number_array(obj, "weighted_n_node_samples", n, nulls=False),
        task=obj.get("task"),
        missing_go_to_left=_missing_directions(obj, n),
    )
    tree.check()
    if tree.task != task:
        raise ValueError(f"the tree's task {tree.task!r} differs from the file's {task!r}.")
    if np.any(tree.weighted_n_node_samples < 0):
        raise ValueError("weighted_n_node_samples must be finite and non-negative.")
    if tree.max_depth > MAX_TREE_DEPTH:
        raise ValueError(
            f"the tree is {tree.max_depth} levels deep; tree files are limited to "
            f"{MAX_TREE_DEPTH}."
        )
    return tree


def _missing_directions(obj: dict[str, Any], n: int) -> np.ndarray | None:
    """`missing_go_to_left`: n booleans; absent in files of trees that saw no missing
    values (or written before they were supported): NaN then goes to the heavier child."""
    values = obj.get("missing_go_to_left")
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != n or not all(
        isinstance(v, bool) for v in values
    ):
        raise _malformed(f"'missing_go_to_left' must be a list of {n} booleans.")
    return np.asarray(values, dtype=bool)


def _node_count(obj: dict[str, Any]) -> int:
    nodes = obj.get("children_left")
    if not isinstance(nodes, list) or not nodes:
        raise _malformed("'children_left' must be a non-empty list (one entry per node).")
    if len(nodes) > MAX_NODES:
        raise ValueError(
            f"the tree has {len(nodes)} nodes; tree files are limited to {MAX_NODES}."
        )
    return len(nodes)


def _index_array(obj: dict[str, Any], name: str, n: int) -> np.ndarray:
    values = obj.get(name)
    if (
        not isinstance(values, list)
        or len(values) != n
        or not all(_is_int(v) and -(2**31) <= v < 2**31 for v in values)
    ):
        raise _malformed(f"{name!r} must be a list of {n} integer indices (one per node).")
    return np.asarray(values, dtype=np.int32)


def _number_array(obj: dict[str, Any], name: str, n: int, *, nulls: bool) -> np.ndarray:
    values = obj.get(name)
    allowed = (int, float, type(None)) if nulls else (int, float)
    what = "numbers or nulls" if nulls else "numbers"
    if not isinstance(values, list) or len(values) != n or not all(
        type(v) in allowed for v in values
    ):
        raise _malformed(f"{name!r} must be a list of {n} {what} (one per node).")
    return _finite_floats([math.nan if v is None else v for v in values], name)


def _value_array(obj: dict[str, Any], n: int) -> np.ndarray:
    rows = obj.get("value")
    width = len(rows[0]) if isinstance(rows, list) and rows and isinstance(rows[0], list) else 0
    if (
        not isinstance(rows, list)
        or len(rows) != n
        or width == 0
        or not all(isinstance(row, list) and len(row) == width for row in rows)
        or not all(_is_number(v) for row in rows for v in row)
    ):
        raise _malformed(
            f"'value' must be a list of {n} rows (one per node) of the same positive "
            "number of numbers."
        )
    return _finite_floats(rows, "value")


def _finite_floats(values: list[Any], name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except OverflowError:  # an integer beyond the float range
        raise _malformed(f"{name!r} holds a number too large for a float.") from None
