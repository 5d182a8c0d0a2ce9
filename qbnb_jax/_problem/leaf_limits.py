"""Least rows and least weight every leaf must hold (`min_samples_leaf`,
`min_weight_fraction_leaf`), with scikit-learn's meaning.

A node is a leaf, or it splits with both children holding at least `min_samples` rows
(of positive weight) and at least `min_weight` weight. Split sides are prefix sums in a
feature's order, so "both sides are large enough" is a contiguous range of cut
positions; docs/design.md, "Leaf limits", says which bounds stay valid under it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class LeafLimits(NamedTuple):
    min_samples: int  # rows of positive weight, at least 1
    min_weight: float  # in the caller's weight units (sklearn: fraction x total weight)

    def allows(self, count, weight):
        """Whether parts with `count` rows and `weight` weight may be leaves."""
        return (count >= self.min_samples) & (weight >= self.min_weight)


# Fractional weights: how far below `frac x total` a part's weight may fall and still
# fit, relative to the total: at least TIE_SLACK, or n_rows x TIE_SLACK_PER_ROW.
TIE_SLACK = 2.0**-40
TIE_SLACK_PER_ROW = 2.0**-52


def leaf_limits(min_samples_leaf, min_weight_fraction_leaf, n_rows: int,
                total_weight: float, fractional: bool = False) -> LeafLimits | None:
    """Validated limits, or None where neither limits anything (the default).

    `min_samples_leaf`: an int >= 1, or a float in (0, 1) meaning `ceil(frac * n_rows)`
    (`n_rows`: the rows passed, as scikit-learn counts them);
    `min_weight_fraction_leaf`: a float in [0, 0.5], times `total_weight`.

    `fractional`: the weights are not all integers. Their sums then round differently
    in another order (the rows permuted, another backend): a part whose weight equals
    the limit in exact arithmetic (class-balanced weights meet such ties often) would
    fit or not by its last bits. The limit is lowered by far more than that rounding
    (`TIE_SLACK` of the total, or `n_rows x TIE_SLACK_PER_ROW` if larger), so such a
    part always fits. Integer weights sum exactly and keep scikit-learn's comparison.
    """
    m = min_samples_leaf
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer, float, np.floating)):
        raise ValueError(f"min_samples_leaf must be an int >= 1 or a float in (0, 1); got {m!r}.")
    if isinstance(m, (int, np.integer)):
        if m < 1:
            raise ValueError(f"min_samples_leaf must be an int >= 1 or a float in (0, 1); "
                             f"got {m!r}.")
        min_samples = int(m)
    else:
        if not 0.0 < m < 1.0:
            raise ValueError(f"min_samples_leaf must be an int >= 1 or a float in (0, 1); "
                             f"got {m!r}.")
        min_samples = max(1, math.ceil(float(m) * n_rows))
    frac = min_weight_fraction_leaf
    if (isinstance(frac, (bool, np.bool_)) or not isinstance(frac, (int, float, np.integer,
                                                                     np.floating))
            or not 0.0 <= frac <= 0.5):
        raise ValueError(f"min_weight_fraction_leaf must be a float in [0, 0.5]; got {frac!r}.")
    min_weight = float(frac) * float(total_weight)
    if fractional and min_weight > 0:
        min_weight -= max(TIE_SLACK, n_rows * TIE_SLACK_PER_ROW) * float(total_weight)
    # One row of positive weight is what every nonempty part holds anyway.
    if min_samples <= 1 and min_weight <= 0.0:
        return None
    return LeafLimits(min_samples, min_weight)


def root_cut_range(limits: LeafLimits, cut_pos: np.ndarray, order_weight: np.ndarray,
                   n_thresholds: int) -> tuple[int, int]:
    """`(t_min, t_max)`: the root threshold indices whose both sides may be leaves
    (`t_min > t_max`: none).

    `cut_pos` `(n+1,)`: samples left of each threshold index (every sample has positive
    weight); `order_weight` `(n,)`: the weights in the root feature's order. Sides only
    grow (left) or shrink (right) with t, so the valid indices are contiguous.
    """
    n = len(order_weight)
    cum = np.zeros(n + 1)
    np.cumsum(order_weight, out=cum[1:])
    t = np.arange(n_thresholds + 1)
    k = cut_pos[: n_thresholds + 1]
    ok = limits.allows(k, cum[k]) & limits.allows(n - k, cum[-1] - cum[k])
    if not ok.any():
        return 1, 0
    return int(t[ok][0]), int(t[ok][-1])
