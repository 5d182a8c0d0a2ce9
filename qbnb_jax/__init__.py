"""qbnb_jax: exact optimal shallow decision trees on continuous features (Quant-BnB)."""

import importlib.metadata

from ._batch import solve_batch as solve_batch, solve_many as solve_many
from ._ensemble import (
    BaggedOptimalTreeClassifier as BaggedOptimalTreeClassifier,
    BaggedOptimalTreeRegressor as BaggedOptimalTreeRegressor,
    DepthSelection as DepthSelection,
    select_depth as select_depth,
)
from ._estimator import (
    OptimalTreeClassifier as OptimalTreeClassifier,
    OptimalTreeRegressor as OptimalTreeRegressor,
)
from ._export import (
    export_graphviz as export_graphviz,
    export_text as export_text,
    load_tree as load_tree,
    plot_tree as plot_tree,
    save_tree as save_tree,
)
from ._solve import SolveResult as SolveResult, solve as solve
from ._tree import Tree as Tree

try:
    __version__ = importlib.metadata.version("qbnb_jax")
except importlib.metadata.PackageNotFoundError:  # a source tree on the path, not installed
    __version__ = "0+unknown"

__all__ = [
    "BaggedOptimalTreeClassifier",
    "BaggedOptimalTreeRegressor",
    "DepthSelection",
    "OptimalTreeClassifier",
    "OptimalTreeRegressor",
    "SolveResult",
    "Tree",
    "export_graphviz",
    "export_text",
    "load_tree",
    "plot_tree",
    "save_tree",
    "select_depth",
    "solve",
    "solve_batch",
    "solve_many",
]
