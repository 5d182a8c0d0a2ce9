"""qbnb_jax: exact optimal shallow decision trees on continuous features (Quant-BnB).

The public names load on first use, so `qbnb --help` and a Ctrl-C during start-up
answer without importing JAX.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

_EXPORTS = {
    "solve_batch": "._batch",
    "solve_many": "._batch",
    "BaggedOptimalTreeClassifier": "._ensemble",
    "BaggedOptimalTreeRegressor": "._ensemble",
    "DepthSelection": "._ensemble",
    "select_depth": "._ensemble",
    "OptimalTreeClassifier": "._estimator",
    "OptimalTreeRegressor": "._estimator",
    "export_graphviz": "._export",
    "export_text": "._export",
    "load_tree": "._export",
    "plot_tree": "._export",
    "save_tree": "._export",
    "SolveResult": "._solve",
    "solve": "._solve",
    "Tree": "._tree",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from ._batch import solve_batch, solve_many
    from ._ensemble import (
        BaggedOptimalTreeClassifier,
        BaggedOptimalTreeRegressor,
        DepthSelection,
        select_depth,
    )
    from ._estimator import OptimalTreeClassifier, OptimalTreeRegressor
    from ._export import export_graphviz, export_text, load_tree, plot_tree, save_tree
    from ._solve import SolveResult, solve
    from ._tree import Tree


def __getattr__(name: str):
    if name == "__version__":
        from importlib import metadata

        try:
            value = metadata.version("qbnb_jax")
        except metadata.PackageNotFoundError:  # a source tree on the path, not installed
            value = "0+unknown"
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
