"""Rows that repeat one another, merged into one weighted row (docs/design.md, "Repeated
rows").

Every tree sends equal feature vectors to the same leaf, so rows with equal features and
equal class have the loss of one row weighing their summed (integer) weight. The set of
distinct values of every feature stays the same, and so do the thresholds, the sums at
every valid cut and the order of the cuts: the search takes the same path on the merged
rows (bound "w1" sizes sub-cuts by sample counts, so its path may differ) to the same
optimum, in fewer positions per sweep.
"""

from __future__ import annotations

import numpy as np

# Merged only when at least this share of the rows goes: a second presort of the
# merged rows is then repaid by the shorter sweeps (at a tenth, occupancy at depth 2 was
# slower merged: its padded length barely fell).
MIN_SHARE_MERGED = 0.25
_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: a bijection of the key modulo 2**64


def repeated_row_groups(value_rank: np.ndarray, changes: np.ndarray, codes: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray] | None:
    """Groups of rows with equal features and class, or None when merging does not pay.

    `value_rank`: each row's dense value rank per feature `(p, n)`; `changes`: where
    each feature's sorted values rise `(p, n - 1)` (`data.stable_order`); `codes`: class
    codes `(n,)`. Returns `(first, group)`: each group's first row, ascending, and
    every row's group index.
    """
    p, n = value_rank.shape
    if n < 2 or p == 0 or changes.all(axis=1).any():  # a feature tells every row apart
        return None
    sizes = changes.sum(axis=1, dtype=np.int64) + 1
    exact = np.sum(np.log2(sizes.astype(np.float64))) + np.log2(codes.max(initial=0) + 1) < 62
    with np.errstate(over="ignore"):
        if exact:  # a mixed-radix number of the ranks: equal keys, equal rows
            key = codes.astype(np.int64)
            for f in range(p):
                key = key * sizes[f] + value_rank[f]
        else:  # a hash; rows of one key are compared below
            key = codes.astype(np.uint64)
            for f in range(p):
                key = (key ^ value_rank[f].astype(np.uint64)) * _HASH_MULTIPLIER
    # Most data has too few repeats: the count of distinct keys, from a plain sort
    # (a tenth of `np.unique`'s time with indices), decides that first.
    ordered = np.sort(key)
    if 1 + np.count_nonzero(ordered[1:] != ordered[:-1]) > (1 - MIN_SHARE_MERGED) * n:
        return None
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first)  # groups in order of their first rows
    renumber = np.empty_like(order)
    renumber[order] = np.arange(len(order))
    first, group = first[order], renumber[group]
    if not exact:
        lead = first[group]
        if not (np.array_equal(value_rank[:, lead], value_rank)
                and np.array_equal(codes[lead], codes)):
            return None  # two rows of one hash differ: leave the rows as they are
    return first, group
