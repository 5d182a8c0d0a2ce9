"""Class-ordered sweeps of integer class counts: O(1) work per cut-element, any class count.

The row sweeps of `kernels.py` carry C running counts per (row, cut) through the
positions of feature f's order and take `max_c L_c + max_c (T_c - L_c)` at each one:
O(C) work per cut-element. Every sample has exactly one class, so the same scores
come from one count per sample (docs/design.md, "Class-ordered sweeps"). For a sample
set S, order f's positions stably by class ("class order") and let x_j be sample j's
weight if it is in S, else 0:

- `v(j)`: the prefix sum of x within j's class segment of the class order, i.e.
  `L_{c_j}` right after position j of f's order. Left counts only grow, so
  `A(i) = max_c L_c(i)` is the running maximum of `v` over positions `<= i` of f's
  order: `v(j) <= L_{c_j}(i)` for `j <= i`, and each class's last sample up to i
  attains its count.
- `u(j)`: the suffix sum of x within j's class segment, `P_{c_j} - L_{c_j}` just
  before position j (P: the set's class totals). Right counts only shrink, so
  `B(i) = max_c (P_c - L_c(i)) = max(0, max_{j > i} u(j))`: a reverse running max.
- the best score is `max(max_c P_c, max over valid i of A(i) + B(i))`, and the loss the
  set's weight minus it, as `kernels._loss_from_score` forms it.

Both sides of a cut are such sets, `lo <= key < c` and `c <= key < hi`: 2K columns
of bounds per row. Counts are integers, so every sum is exact in any order, and max is
order free: the scores are the integers the C-count sweeps compute (the segmented
sums are explicit scans; the only reductions are the scans' running maxima).

Layout (docs/design.md, "Execution plans"): positions first, every row and column of
a call in the scans' flat carries; sequential scans over the leading axis are what a
CPU runs fastest (trailing-axis cumulative maxima and sums were several times slower).
What stays costly is the gather of (v, u) into f's order, element by element on XLA's
CPU backend: with the few cuts a row the searches ask for, it outweighs the C-count
sweeps' work below a dozen or more classes (`CLASS_ORDER_FROM`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from qbnb_jax._device.parallel import run_all

# Class counts from which the class-ordered sweeps replace the C-count ones on the
# sequential plan (`kernels.uses_class_order`). With the few cuts a row the searches
# ask for, the class-ordered sweep's cost per sample and row is fixed and dominated by
# the gather into f's order (XLA's CPU gather goes element by element), while the
# C-count sweeps' grows with C: measured with 4 cuts a full row and 8 a window
# (n = 4e3 to 1e4), they break even near 12 to 16 classes.
CLASS_ORDER_FROM = 20
# On orders longer than CLASS_ORDER_MAX_LENGTH this sweep's (position, row, column)
# intermediates outgrow the caches and its gather dominates, so there it takes counts
# of CLASS_ORDER_FROM_LONG classes or more only; fewer take the class lanes (counts of
# 0 or 1 of fewer than 31 classes, one code a sample) or the channels-major walk.
# Measured at depth 2, p = 10 unless said: unit counts of 20 classes, n = 2e4 and 5e4,
# 0.36 -> 0.29 s and 1.44 -> 0.99 s; 30 classes, n = 1e5, p = 20
# (`synth-class30-large`), 7.1 -> 5.9 s; bootstrap counts at n = 5e4, 20 and 30
# classes 1.04 -> 0.46 s and 1.03 -> 0.77 s, while with 40 and 60 classes this sweep
# stays faster (1.01 against 1.82 and 2.63 s). At n = 1e4 the two are even (20 classes)
# or this sweep is faster (30 classes, 0.11 against 0.19 s).
CLASS_ORDER_MAX_LENGTH = 16384
CLASS_ORDER_FROM_LONG = 36


def class_tables(stats: np.ndarray, perm: np.ndarray, layout_of: np.ndarray, bucket: int,
                 dtype, chunk: int = 16) -> dict[str, np.ndarray]:
    """Class-order tables of integer one-hot counts `stats` `(count, n_pad, C)`.

    Problem i is laid out as `perm[layout_of[i]]` `(L, p, n_pad)`. For each problem
    and feature, its order's positions re-sorted stably by class (a sample's class:
    its stat vector's largest channel; any class for zero weight, which adds nothing):

    - `class_sample` `(bucket, p, n_pad)` int32: the sample at each place of the class
      order (its position in f0's order is then `rank[f0][sample]`);
    - `class_weight` `(bucket, p, n_pad)`: the sample weights in class order;
    - `class_start` `(bucket, p, n_pad)` bool: a class's segment begins at this place;
    - `class_place` `(bucket, p, n_pad)` int32: the place in the class order of each
      position of f's order.

    Padding problems keep an identity order of zero weights.
    """
    count, n_pad, C = stats.shape
    p = perm.shape[1]
    ident = np.broadcast_to(np.arange(n_pad, dtype=np.int32), (bucket, p, n_pad))
    out = {"class_sample": ident.copy(), "class_weight": np.zeros((bucket, p, n_pad), dtype),
           "class_start": np.ones((bucket, p, n_pad), bool), "class_place": ident.copy()}
    label_dtype = np.int8 if C < 128 else np.int16  # numpy sorts these by radix
    places = np.arange(n_pad, dtype=np.int32)

    def fill(c0: int) -> None:
        for i in range(c0, min(count, c0 + chunk)):
            order = perm[layout_of[i]]  # (p, n_pad) samples in each feature's order
            label = np.argmax(stats[i], axis=1).astype(label_dtype)[order]
            weight = stats[i].sum(axis=1)[order]
            to_f = np.argsort(label, axis=1, kind="stable").astype(np.int32)
            sorted_label = np.take_along_axis(label, to_f, axis=1)
            new = np.ones((p, n_pad), bool)
            new[:, 1:] = sorted_label[:, 1:] != sorted_label[:, :-1]
            out["class_sample"][i] = np.take_along_axis(order, to_f, axis=1)
            out["class_weight"][i] = np.take_along_axis(weight, to_f, axis=1)
            out["class_start"][i] = new
            np.put_along_axis(out["class_place"][i], to_f,
                              np.broadcast_to(places, (p, n_pad)), axis=1)

    run_all(fill, range(0, count, chunk))
    return out


def class_order_scores(key, weight, start, place, valid, lo, cuts, hi):
    """Best scores of the sets `lo <= key < cut` and `cut <= key < hi` (R rows, K cuts).

    `key`, `weight`, `start` `(n, R)` in class order (`start`: a class segment begins);
    `place` `(n, R)`: the class-order place of each position of f's order; `valid`
    `(n, R)`: a threshold may follow that position; `lo`, `hi` `(R,)`, `cuts` `(R, K)`.
    Returns `(prefix, suffix)` best scores `(R, K)`.

    Columns: the K prefix sets, then the K suffix sets, each with its own bounds.
    Carries are flat vectors of all rows and columns: a step's fixed cost is shared
    by enough lanes (short int16 rows vectorised badly).
    """
    n, R = key.shape
    K = cuts.shape[1]
    M = 2 * K
    dtype = weight.dtype
    zero = jnp.zeros((), dtype)
    lower = jnp.concatenate([jnp.broadcast_to(lo[:, None], (R, K)), cuts], axis=1)
    upper = jnp.concatenate([cuts, jnp.broadcast_to(hi[:, None], (R, K))], axis=1)
    x = jnp.where((key[:, :, None] >= lower[None]) & (key[:, :, None] < upper[None]),
                  weight[:, :, None], zero).reshape(n, R * M)
    end = jnp.concatenate([start[1:], jnp.ones((1, R), bool)], axis=0)

    def left_count(acc, t):  # v: the segment's sum through this place
        x_j, s = t
        acc = jnp.where(jnp.repeat(s, M), zero, acc) + x_j
        return acc, acc

    _, v = jax.lax.scan(left_count, jnp.zeros(R * M, dtype), (x, start))

    def right_count(total, t):  # u = P - v + x: the segment's sum from this place on
        v_j, x_j, e = t
        total = jnp.where(jnp.repeat(e, M), v_j, total)
        return total, total - v_j + x_j

    _, u = jax.lax.scan(right_count, jnp.zeros(R * M, dtype), (v, x, end), reverse=True)
    # into f's order: one gather of a (v, u) pair of rows per row and position
    table = jnp.concatenate([v, u], axis=1).reshape(n, 2, R, M)
    lane = jnp.broadcast_to(jnp.arange(R, dtype=place.dtype)[None, :], (n, R))
    pairs = table.at[place, :, lane].get(mode="promise_in_bounds")  # (n, R, 2, M)
    pairs = pairs.reshape(n, R * 2 * M)

    def right_max(b, pair):  # B after position i, then fold in u(i)
        return jnp.maximum(b, pair.reshape(R, 2, M)[:, 1].reshape(-1)), b

    b_all, b = jax.lax.scan(right_max, jnp.zeros(R * M, dtype), pairs, reverse=True)
    # invalid positions: B so low that no sum with A (>= 0) reaches a valid score
    low = jnp.asarray(jnp.iinfo(dtype).min, dtype)
    b = jnp.where(valid[:, :, None], b.reshape(n, R, M), low).reshape(n, R * M)

    def best_split(carry, t):
        a, best = carry
        pair, b_i = t
        a = jnp.maximum(a, pair.reshape(R, 2, M)[:, 0].reshape(-1))
        return (a, jnp.maximum(best, a + b_i)), None

    # the empty left part, always a candidate, scores max_c P_c = B before position 0
    (_, best), _ = jax.lax.scan(best_split, (jnp.zeros(R * M, dtype), b_all), (pairs, b))
    best = best.reshape(R, M)
    return best[:, :K], best[:, K:]
