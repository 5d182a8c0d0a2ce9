"""Frontier records: the alive tuples of a search and the pieces an iteration cuts.

A frontier is a few parallel arrays over its T tuples; these records name them and
give their shapes, so that the searches pass one record rather than the arrays.
`Frontier` is the depth-2 frontier of `_search/depth2.py` (many problems at once),
`RootFrontier` that of the deeper search over the root split (`_search/deep.py`), whose
`TupleCuts` holds one tuple's cuts of an iteration; `Pieces`, `PieceFeatures` and
`PieceBounds` describe the pieces between a tuple's cuts.
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


class TupleCuts(NamedTuple):
    """One root tuple's cuts in an iteration of the deep search (`_search/deep.py`) and
    the bounds of its two sides at those solved so far (filled in as they are)."""

    cuts: np.ndarray  # (s,) int64: threshold indices inside the tuple, ascending
    prefix: np.ndarray  # (s,) float: bound of P, the left side's best loss, where solved
    suffix: np.ndarray  # (s,) float: bound of S, the right side's
    solved: np.ndarray  # (s,) bool

    @classmethod
    def unsolved(cls, cuts: np.ndarray) -> TupleCuts:
        return cls(cuts, np.empty(len(cuts)), np.empty(len(cuts)),
                   np.zeros(len(cuts), dtype=bool))

    def with_ends(self, lo: int, hi: int, ends: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(cuts, left, right)`: the solved cuts between the tuple's ends lo - 1 and
        hi + 1, with the bounds of P and S at each (at the ends, the carried `ends`
        `P_lo, S_lo, P_hi, S_hi`)."""
        at = self.solved
        return (np.concatenate([[lo - 1], self.cuts[at], [hi + 1]]),
                np.concatenate([[ends[0]], self.prefix[at], [ends[2]]]),
                np.concatenate([[ends[1]], self.suffix[at], [ends[3]]]))
