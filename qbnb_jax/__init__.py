"""qbnb_jax: exact optimal shallow decision trees on continuous features (Quant-BnB).

The public names load on first use, so `qbnb --help` and a Ctrl-C during start-up
answer without importing JAX.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

_EXPORTS = {
    "solve_batch": "._search.batch",
    "solve_many": "._search.batch",
    "BaggedOptimalTreeClassifier": "._sklearn.ensemble",
    "BaggedOptimalTreeRegressor": "._sklearn.ensemble",
    "DepthSelection": "._sklearn.ensemble",
    "select_depth": "._sklearn.ensemble",
    "OptimalTreeClassifier": "._sklearn.estimator",
    "OptimalTreeRegressor": "._sklearn.estimator",
    "export_graphviz": "._sklearn.export",
    "export_text": "._sklearn.export",
    "load_tree": "._sklearn.export",
    "plot_tree": "._sklearn.export",
    "save_tree": "._sklearn.export",
    "SolveResult": "._search.solve",
    "solve": "._search.solve",
    "Tree": "._problem.tree",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the names, for type checkers (redundant aliases: re-exported)
    from qbnb_jax._problem.tree import Tree as Tree
    from qbnb_jax._search.batch import solve_batch as solve_batch, solve_many as solve_many
    from qbnb_jax._search.solve import SolveResult as SolveResult, solve as solve
    from qbnb_jax._sklearn.ensemble import (
        BaggedOptimalTreeClassifier as BaggedOptimalTreeClassifier,
        BaggedOptimalTreeRegressor as BaggedOptimalTreeRegressor,
        DepthSelection as DepthSelection,
        select_depth as select_depth,
    )
    from qbnb_jax._sklearn.estimator import (
        OptimalTreeClassifier as OptimalTreeClassifier,
        OptimalTreeRegressor as OptimalTreeRegressor,
    )
    from qbnb_jax._sklearn.export import (
        export_graphviz as export_graphviz,
        export_text as export_text,
        load_tree as load_tree,
        plot_tree as plot_tree,
        save_tree as save_tree,
    )


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
