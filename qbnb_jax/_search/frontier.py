"""Frontier records: the alive tuples of a search and the pieces an iteration cuts.

A frontier is a few parallel arrays over its T tuples; these records name them and
give their shapes, so that the searches pass one record rather than the arrays.
`Frontier` is the depth-2 frontier of `_search/depth2.py` (many problems at once),
`RootFrontier` that of the deeper search over the root split (`_search/deep.py`); `Pieces`,
`PieceFeatures` and `PieceBounds` describe the pieces between a tuple's cuts.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Frontier(NamedTuple):
    """Alive tuples `(problem, f0, [lo, hi], F1, F2)`, T of them, in frontier order.

    A tuple's root cuts lo..hi lie strictly between two ends, lo - 1 and hi + 1, that
    were evaluated before (or are trivial): what is carried of them are lower bounds
    (see `depth2.Depth2Search.step`).
    """

    problem: np.ndarray  # (T,) int64: the tuple's problem, an index into the search
    root: np.ndarray  # (T,) int64: f0
    lo: np.ndarray  # (T,) int64: first root threshold index inside the tuple
    hi: np.ndarray  # (T,) int64: last one
    left_features: np.ndarray  # (T, p) bool: F1
    right_features: np.ndarray  # (T, p) bool: F2
    # (T, 4, p) float64: (P_lo, S_lo, P_hi, S_hi), bounds at the ends per child feature
    ends: np.ndarray
    lower_bound: np.ndarray  # (T,) float64: of every tree in the tuple

    @property
    def size(self) -> int:
        return len(self.problem)

    def take(self, index) -> Frontier:
        return Frontier(*(field[index] for field in self))

    @staticmethod
    def concatenate(parts: list[Frontier]) -> Frontier:
        return Frontier(*(np.concatenate(field) for field in zip(*parts)))


class CutLosses(NamedTuple):
    """Best-stump losses of each child feature on both sides of a block's cuts (the
    tuples' ends first and last, as carried bounds)."""

    prefix: np.ndarray  # (T, cuts, p): L1(prefix_t, f); inf where f is not in F1
    suffix: np.ndarray  # (T, cuts, p): L1(suffix_t, f); inf where f is not in F2


class Pieces(NamedTuple):
    """The pieces between consecutive cuts of each tuple of a block, `(T, pieces)`."""

    lo: np.ndarray  # int64: threshold index of the piece's left cut
    hi: np.ndarray  # int64: of its right cut
    child_lo: np.ndarray  # int64: the root cuts still open in the piece, child_lo..child_hi
    child_hi: np.ndarray
    lower_bound: np.ndarray  # float64: of every tree with a root cut in the piece
    alive: np.ndarray  # bool: whether the piece becomes a child


class PieceFeatures(NamedTuple):
    """Child features still allowed per piece, `(T, pieces, p)` bool."""

    left: np.ndarray  # F1 of the piece's child
    right: np.ndarray  # F2


class PieceBounds(NamedTuple):
    """Side bounds at the two cuts of each piece, minimised over the allowed child
    features, `(T, pieces)`: `prefix_lo = P_a`, `prefix_hi = P_b`, and so on."""

    prefix_lo: np.ndarray
    prefix_hi: np.ndarray
    suffix_lo: np.ndarray
    suffix_hi: np.ndarray


class RootFrontier(NamedTuple):
    """Alive tuples `(f0, [lo, hi])` of a deep search, T of them.

    Root cuts at threshold indices lo..hi lie between two ends lo - 1 and hi + 1
    where bounds of both sides are known (see `deep.DeepSearch.solve_deep`).
    """

    root: np.ndarray  # (T,) int64: f0
    lo: np.ndarray  # (T,) int64
    hi: np.ndarray  # (T,) int64
    lower_bound: np.ndarray  # (T,) float64: of every tree in the tuple
    ends: np.ndarray  # (T, 4) float64: (p_lo, s_lo, p_hi, s_hi), side bounds at the ends

    @property
    def size(self) -> int:
        return len(self.root)

    def take(self, index) -> RootFrontier:
        return RootFrontier(*(field[index] for field in self))

    @staticmethod
    def concatenate(parts: list[RootFrontier]) -> RootFrontier:
        return RootFrontier(*(np.concatenate(field) for field in zip(*parts)))
