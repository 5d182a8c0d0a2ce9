"""The slack bound over child-feature pairs of many pieces (docs/design.md, "Bounds and
why they are valid", slack bound).

For one piece of a root interval, with per-child-feature losses `pa, pb` (prefix side
at the piece's ends) and `sa, sb` (suffix side) and the piece's slack `W`, a pair of
child features (f1, f2) is bounded below by

    pair(f1, f2) = max(pa[f1] + sb[f2], (pb[f1] + sa[f2]) - W).

The search keeps f1 (left child) when some kept f2 gives a pair that can still beat the
incumbent, f2 likewise, and raises the piece's bound to the least pair. Two exact ways
to compute this:

- `dense`: every pair, `O(p^2)` per piece: cheapest for the usual few features;
- `sorted`: `O(p log p)` per piece, for many features: both terms of `pair` are
  monotone in each feature's loss, so "some f2 with pa[f1] + sb[f2] passing and
  (pb[f1] + sa[f2]) - W passing" is "the least `sa` among the f2 whose `sb` passes",
  a prefix minimum over f2 sorted by `sb`, found by binary search with the same
  floating-point expressions the dense form evaluates.

The incumbent test is `x < limit` (monotone: true for small x).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Features from which pieces use the sorted form (the dense form's p^2 work and memory
# grows past its log factor there).
SORTED_FROM = 48
# Pair-table elements per block of the dense form: 1 MB of float64 per array, which
# stays in cache.
PAIR_BLOCK_ELEMENTS = 1 << 17


class PairInputs(NamedTuple):
    """Per piece (N pieces, p child features)."""

    pa: np.ndarray  # (N, p) prefix-side loss at the piece's low end
    pb: np.ndarray  # (N, p) ... at its high end
    sa: np.ndarray  # (N, p) suffix-side loss at the low end
    sb: np.ndarray  # (N, p) ... at the high end
    width: np.ndarray  # (N,) the piece's slack W
    limit: np.ndarray  # (N,) the incumbent: a pair bound below it can beat it


class PairOutcome(NamedTuple):
    keep_left: np.ndarray  # (N, p) bool
    keep_right: np.ndarray  # (N, p) bool
    least: np.ndarray  # (N,) the least pair bound over all pairs


def pair_bounds(inputs: PairInputs, keep_left: np.ndarray, keep_right: np.ndarray
                ) -> PairOutcome:
    """Kept child features and each piece's least pair bound (see the module)."""
    if inputs.pa.shape[1] >= SORTED_FROM:
        return sorted_pair_bounds(inputs, keep_left, keep_right)
    return dense_pair_bounds(inputs, keep_left, keep_right)


def dense_pair_bounds(inputs: PairInputs, keep_left: np.ndarray, keep_right: np.ndarray
                      ) -> PairOutcome:
    pa, pb, sa, sb, width, limit = inputs
    N, p = pa.shape
    out_left = np.empty_like(keep_left)
    out_right = np.empty_like(keep_right)
    least = np.empty(N)
    step = max(1, PAIR_BLOCK_ELEMENTS // (p * p))
    for b0 in range(0, N, step):
        b = slice(b0, b0 + step)
        pair = np.maximum(pa[b][:, :, None] + sb[b][:, None, :],
                          pb[b][:, :, None] + sa[b][:, None, :] - width[b][:, None, None])
        ok = ((pair < limit[b][:, None, None])
              & keep_left[b][:, :, None] & keep_right[b][:, None, :])
        out_left[b], out_right[b] = ok.any(axis=2), ok.any(axis=1)
        least[b] = pair.min(axis=(1, 2))
    return PairOutcome(out_left, out_right, least)


def _take(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    return np.take_along_axis(a, index, axis=1)


def _passing_prefix(passes, ascending: np.ndarray) -> np.ndarray:
    """`(N, q)` counts: for each query, the length of the prefix of its row of
    `ascending` `(N, p)` on which `passes(query_index, values)` holds (it holds on a
    prefix: the test is monotone). A vectorised binary search."""
    N, p = ascending.shape
    lo = np.zeros((N, p), dtype=np.int64)
    hi = np.full((N, p), p, dtype=np.int64)
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        ok = passes(_take(ascending, np.minimum(mid, p - 1))) & open_
        lo = np.where(ok, mid + 1, lo)
        hi = np.where(ok | ~open_, hi, mid)


def _keep_side(own_first: np.ndarray, own_second: np.ndarray, other_first: np.ndarray,
               other_second: np.ndarray, other_kept: np.ndarray, tests) -> np.ndarray:
    """Whether each feature has a kept partner passing both pair terms.

    The partner's first loss enters a term `own_first + other_first` that must pass,
    and its second loss a term `(own_second + other_second) - W`: both monotone in the
    partner's losses, so the best partner among those passing the first term is the
    one with the least second loss (a prefix minimum in `other_first` order).
    """
    first_test, second_test = tests
    order = np.argsort(other_first, axis=1, kind="stable")
    first_sorted = _take(other_first, order)
    second_sorted = _take(np.where(other_kept, other_second, np.inf), order)
    least_second = np.minimum.accumulate(second_sorted, axis=1)
    count = _passing_prefix(lambda partner: first_test(own_first + partner), first_sorted)
    best = _take(least_second, np.maximum(count - 1, 0))
    return (count > 0) & second_test(own_second, best)


def sorted_pair_bounds(inputs: PairInputs, keep_left: np.ndarray, keep_right: np.ndarray
                       ) -> PairOutcome:
    pa, pb, sa, sb, width, limit = inputs
    limit, w = limit[:, None], width[:, None]

    def passes(x):  # the incumbent test
        return x < limit

    # left f1: partners f2 pass pa[f1] + sb[f2] and (pb[f1] + sa[f2]) - W
    left = keep_left & _keep_side(
        pa, pb, sb, sa, keep_right,
        (passes, lambda own, partner: passes(own + partner - w)))
    # right f2: partners f1 pass pa[f1] + sb[f2] and (pb[f1] + sa[f2]) - W
    right = keep_right & _keep_side(
        sb, sa, pa, pb, keep_left,
        (passes, lambda own, partner: passes(partner + own - w)))
    return PairOutcome(left, right, _least_pair(inputs))


def _least_pair(inputs: PairInputs) -> np.ndarray:
    """`min over (f1, f2) of max(a1 + b2, c1 + d2)` with a = pa, b = sb, c = pb and
    d = sa - W, in `O(p log p)` per piece.

    For a partner f2 with `e2 = d2 - b2 <= a1 - c1` the first term is the larger, so
    the best such partner has the least b; otherwise the second is, and the best has
    the least d. Sorting partners by e gives both as a prefix and a suffix minimum.
    Exact for integer losses; for float losses each term may round differently from
    the dense form's by an ulp.
    """
    with np.errstate(invalid="ignore"):  # inf - inf where a loss is infinite: masked
        return _least_pair_finite(inputs)


def _least_pair_finite(inputs: PairInputs) -> np.ndarray:
    a, b, c = inputs.pa, inputs.sb, inputs.pb
    d = inputs.sa - inputs.width[:, None]
    # an infinite loss (a feature not swept) makes every pair through it infinite
    partner = np.isfinite(b) & np.isfinite(d)
    b, d = np.where(partner, b, np.inf), np.where(partner, d, np.inf)
    e = np.where(partner, d - b, np.inf)
    order = np.argsort(e, axis=1, kind="stable")
    e_sorted = _take(e, order)
    least_b = np.minimum.accumulate(_take(b, order), axis=1)
    least_d = np.minimum.accumulate(_take(d, order)[:, ::-1], axis=1)[:, ::-1]
    own = np.isfinite(a) & np.isfinite(c)
    delta = np.where(own, a - c, 0.0)
    p = a.shape[1]
    below = _passing_prefix(lambda partner: partner <= delta, e_sorted)  # e <= delta
    from_ = _passing_prefix(lambda partner: partner < delta, e_sorted)  # first e >= delta
    first = np.where(below > 0, a + _take(least_b, np.maximum(below - 1, 0)), np.inf)
    second = np.where(from_ < p, c + _take(least_d, np.minimum(from_, p - 1)), np.inf)
    return np.where(own, np.minimum(first, second), np.inf).min(axis=1)
