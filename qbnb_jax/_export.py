"""Exporting fitted trees: text (scikit-learn's format), Graphviz DOT, matplotlib, JSON.

Every function here accepts a fitted `OptimalTreeClassifier` / `OptimalTreeRegressor`,
the result of `qbnb_jax.solve`, or a bare `Tree`. Estimators and results know their
class labels (and estimators their feature names); for a bare `Tree` classes are shown
by index unless `class_names` is given.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from io import StringIO
from numbers import Integral, Real
from typing import Any

import numpy as np

from ._tree import LEAF, Tree

FORMAT = "qbnb_jax.tree"
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class _Model:
    tree: Tree
    classes: np.ndarray | None  # class labels, classification only
    feature_names: list[str] | None
    n_features: int | None


def _unwrap(obj: Any) -> _Model:
    """The tree and what is known about its labels and features."""
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


def _subtree_depth(tree: Tree, node: int) -> int:
    """Number of levels in the subtree rooted at `node` (a leaf has 1)."""
    if tree.children_left[node] == LEAF:
        return 1
    return 1 + max(
        _subtree_depth(tree, int(tree.children_left[node])),
        _subtree_depth(tree, int(tree.children_right[node])),
    )


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
        One line per split branch and leaf, e.g. ``|--- petal width (cm) <= 0.80``.
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

    def recurse(node: int, depth: int) -> None:
        indent = ("|" + " " * spacing) * depth
        indent = indent[:-spacing] + "-" * spacing
        if depth <= max_depth + 1:
            if tree.feature[node] != LEAF:
                name = feature_name(node)
                threshold = number(float(tree.threshold[node]))
                report.write(f"{indent} {name} <= {threshold}\n")
                recurse(int(tree.children_left[node]), depth + 1)
                report.write(f"{indent} {name} >  {threshold}\n")
                recurse(int(tree.children_right[node]), depth + 1)
            else:
                add_leaf(node, indent)
        else:
            subtree_depth = _subtree_depth(tree, node)
            if subtree_depth == 1:
                add_leaf(node, indent)
            else:
                report.write(f"{indent} truncated branch of depth {subtree_depth}\n")

    recurse(0, 1)
    return report.getvalue()


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
        lines.append(f"{feature} <= {round(float(tree.threshold[node]), precision)}")
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

    def recurse(node: int, parent: int | None, depth: int) -> None:
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
                recurse(int(tree.children_left[node]), node, depth + 1)
                recurse(int(tree.children_right[node]), node, depth + 1)
        else:
            out.write(f'{node} [label="(...)"')
            if colors is not None:
                out.write(', fillcolor="#C0C0C0"')
            out.write("] ;\n")
            if parent is not None:
                out.write(f"{parent} -> {node} ;\n")

    recurse(0, None, 0)
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

    # Layout: leaves (or truncated nodes) spread left to right, parents centred above.
    x_pos: dict[int, float] = {}
    depth_of: dict[int, int] = {}
    next_leaf = [0.0]

    def layout(node: int, depth: int) -> None:
        depth_of[node] = depth
        is_cut = max_depth is not None and depth > max_depth
        if tree.children_left[node] == LEAF or is_cut:
            x_pos[node] = next_leaf[0]
            next_leaf[0] += 1.0
            return
        left, right = int(tree.children_left[node]), int(tree.children_right[node])
        layout(left, depth + 1)
        layout(right, depth + 1)
        x_pos[node] = (x_pos[left] + x_pos[right]) / 2

    layout(0, 0)
    width = max(next_leaf[0] - 1.0, 1.0)
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


# -- JSON ------------------------------------------------------------------------------


def _json_label(label: Any) -> Any:
    if isinstance(label, np.generic):
        label = label.item()
    if isinstance(label, (str, bool, int, float)) or label is None:
        return label
    raise ValueError(f"Class label {label!r} cannot be stored in JSON (use str or numbers).")


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def save_tree(
    estimator_or_result: Any, path: str | os.PathLike, *, feature_names: Any = None
) -> None:
    """Save a fitted tree to a JSON file that `load_tree` reads back.

    The file holds the tree arrays, the task, the class labels, the feature names and
    count (when known), the objective, lower bound, gap and status, and the estimator's
    parameters.

    Parameters
    ----------
    estimator_or_result : OptimalTreeClassifier, OptimalTreeRegressor or SolveResult
        A fitted estimator or the result of `qbnb_jax.solve`.
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
    data = _to_json_dict(estimator_or_result, feature_names)
    text = json.dumps(data, indent=1)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


def _to_json_dict(obj: Any, feature_names: Any = None) -> dict[str, Any]:
    model = _unwrap(obj)
    names = _feature_names(model, feature_names)
    n_features = (
        model.n_features
        if model.n_features is not None
        else (len(names) if names is not None else None)
    )
    classes = None if model.classes is None else [_json_label(c) for c in model.classes]
    is_estimator = hasattr(obj, "get_params")
    if is_estimator:
        objective = getattr(obj, "objective_", None)
        lower_bound = getattr(obj, "lower_bound_", None)
        gap = getattr(obj, "gap_", None)
        status = getattr(obj, "status_", None)
        n_iter = getattr(obj, "n_iter_", None)
        params = {k: v for k, v in obj.get_params().items() if k != "verbose"}
    elif isinstance(obj, Tree):
        objective = lower_bound = gap = status = n_iter = params = None
    else:
        objective = getattr(obj, "objective", None)
        lower_bound = getattr(obj, "lower_bound", None)
        gap = getattr(obj, "gap", None)
        status = getattr(obj, "status", None)
        n_iter = (getattr(obj, "stats", None) or {}).get("iterations")
        params = None
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "task": model.tree.task,
        "classes": classes,
        "feature_names": names,
        "n_features": n_features,
        "objective": _optional_float(objective),
        "lower_bound": _optional_float(lower_bound),
        "gap": _optional_float(gap),
        "status": None if status is None else str(status),
        "n_iter": None if n_iter is None else int(n_iter),
        "params": params,
        "tree": model.tree.to_dict(),
    }


def load_tree(path: str | os.PathLike) -> Any:
    """Load a tree saved by `save_tree` as a fitted estimator.

    Parameters
    ----------
    path : str or path-like
        A JSON file written by `save_tree`.

    Returns
    -------
    estimator : OptimalTreeClassifier or OptimalTreeRegressor
        A fitted estimator (``predict``, ``export_text``, ... work; refitting is
        possible too, with the stored parameters).

    Raises
    ------
    ValueError
        If the file is not valid JSON or does not describe a valid tree; the message
        names the file and the problem.
    OSError
        If the file cannot be read.
    """
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{os.fspath(path)}: not a UTF-8 text file.") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{os.fspath(path)}: not a valid JSON file ({err}).") from None
    try:
        return _from_json_dict(data)
    except (ValueError, OverflowError, TypeError) as err:
        raise ValueError(f"{os.fspath(path)}: {err}") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _from_json_dict(data: Any) -> Any:
    from ._estimator import OptimalTreeClassifier, OptimalTreeRegressor

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f'not a qbnb_jax tree file (expected "format": "{FORMAT}").')
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"unsupported file version {data.get('version')!r} (this qbnb_jax reads "
            f"version {FORMAT_VERSION})."
        )
    task = data.get("task")
    if task not in ("classification", "regression"):
        raise ValueError(f"unknown task {task!r}; expected 'classification' or 'regression'.")
    if not isinstance(data.get("tree"), dict):
        raise ValueError("missing or malformed 'tree' object.")
    tree = Tree.from_dict(data["tree"])
    if tree.task != task:
        raise ValueError(f"the tree's task {tree.task!r} differs from the file's {task!r}.")
    if not np.all(np.isfinite(tree.weighted_n_node_samples)) or np.any(
        tree.weighted_n_node_samples < 0
    ):
        raise ValueError("weighted_n_node_samples must be finite and non-negative.")

    classes = data.get("classes")
    if task == "classification":
        if not isinstance(classes, list) or len(classes) != tree.value.shape[1]:
            raise ValueError(
                f"'classes' must be a list of {tree.value.shape[1]} labels (one per column "
                "of the tree's value)."
            )
        if any(isinstance(c, (list, dict)) for c in classes):
            raise ValueError("'classes' must hold strings or numbers.")
        if len({json.dumps(c) for c in classes}) != len(classes):
            raise ValueError("'classes' has repeated labels.")
    elif classes is not None:
        raise ValueError("'classes' must be null for a regression tree.")

    n_features = data.get("n_features")
    names = data.get("feature_names")
    if n_features is not None and (
        not isinstance(n_features, Integral) or n_features < 1 or isinstance(n_features, bool)
    ):
        raise ValueError(f"'n_features' must be a positive integer or null; got {n_features!r}.")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("'feature_names' must be a list of strings or null.")
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

    for key in ("objective", "lower_bound", "gap"):
        value = data.get(key)
        if value is not None and not _is_number(value):
            raise ValueError(f"{key!r} must be a number or null; got {value!r}.")
    status = data.get("status")
    if status is not None and not isinstance(status, str):
        raise ValueError(f"'status' must be a string or null; got {status!r}.")
    n_iter = data.get("n_iter")
    if n_iter is not None and (not isinstance(n_iter, Integral) or isinstance(n_iter, bool)):
        raise ValueError(f"'n_iter' must be an integer or null; got {n_iter!r}.")
    params = data.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ValueError("'params' must be an object or null.")

    cls = OptimalTreeClassifier if task == "classification" else OptimalTreeRegressor
    known = {k: v for k, v in params.items() if k in cls().get_params()}
    if "max_depth" not in known:
        known["max_depth"] = max(tree.max_depth, 1)
    est = cls(**known)
    est._validate_params()

    est.tree_ = tree
    if n_features is not None:
        est.n_features_in_ = int(n_features)
    if names is not None:
        est.feature_names_in_ = np.asarray(names, dtype=object)
    if task == "classification":
        est.classes_ = np.asarray(classes)
        est.n_classes_ = len(classes)
        est.n_outputs_ = 1
    else:
        est.n_outputs_ = int(tree.value.shape[1])
    nan = math.nan
    est.objective_ = nan if data.get("objective") is None else float(data["objective"])
    est.lower_bound_ = nan if data.get("lower_bound") is None else float(data["lower_bound"])
    est.gap_ = nan if data.get("gap") is None else float(data["gap"])
    est.status_ = "unknown" if status is None else status
    est.n_iter_ = 0 if n_iter is None else int(n_iter)
    est.solve_stats_ = {}
    return est
