"""qbnb_jax: exact optimal shallow decision trees on continuous features (Quant-BnB)."""

import importlib.metadata

from ._solve import SolveResult as SolveResult, solve as solve
from ._tree import Tree as Tree

__version__ = importlib.metadata.version("qbnb_jax")

__all__ = ["SolveResult", "Tree", "solve"]
