"""Float sums over a sample set whose value does not depend on zero terms.

`solve` forms a regression problem's offset, range checks, tolerance, node values and
objective from its positive-weight samples; `solve_batch` forms the same numbers for
many weightings of one `X` at once, on every row, zero-weight rows included
(docs/design.md, "Batching"). Sums that add one term at a time in sample order
(cumulative sums, `np.bincount`) come out bit for bit the same both ways, because a
zero term adds an exact zero; numpy's `sum` pairs terms by position, so zeros would
regroup the others.
"""

from __future__ import annotations

import numpy as np


def sequential_sum(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The sum along `axis`, adding one term at a time in order (float64)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:  # the common case, without the moves below
        return np.cumsum(values)[-1] if len(values) else np.float64(0.0)
    values = np.moveaxis(values, axis, -1)
    if values.shape[-1] == 0:
        return np.zeros(values.shape[:-1])
    # cumsum along a contiguous last axis runs term by term; its last entry is the sum
    return np.cumsum(np.ascontiguousarray(values), axis=-1)[..., -1]


def grouped_sums(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """`(groups,)`: the sum of `values` over each group's entries, in their order
    (`np.bincount` adds each term to its group's total one at a time)."""
    return np.bincount(group.reshape(-1), weights=values.reshape(-1), minlength=groups)
