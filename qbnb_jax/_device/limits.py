"""The sweep of problems with leaf limits (`min_samples_leaf`, `min_weight_fraction_leaf`).

`sweep_limited` is `sweep_full` for problems whose stumps may only split where both
parts hold enough rows and weight (`_problem/leaf_limits.py`). A cut column asks for
either the unconstrained best stump U (a bound that grows with the set, as the
search's monotone bounds need) or the constrained one C (what a tree achieves, and
what the slack bounds may use): docs/design.md, "Leaf limits". Both come from the same
prefix sums; a column is constrained where its cut is encoded as `-(c + 1)`, so the
runner's padding and cut blocks treat the columns alike.

Exact as the other kernels (module docstring of `kernels.py`): prefix sums are explicit
scans, reduced only with max.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, Shaped

from qbnb_jax._device.kernels import (
    SweepData,
    _loss_from_score,
    _masked_prefix_sums,
    _root_positions,
    _score,
)
from qbnb_jax._problem.data import Problem


class LimitData(eqx.Module):
    """`SweepData` plus what the limits read.

    - `sorted_size`: `(P, p, n, 2)`, each sample's (1, weight) in each feature's order
      (padding samples and problems 0);
    - `minimum`: `(2,)`, the least rows and weight of a leaf.
    """

    sweep: SweepData
    sorted_size: Float[Array, "P p n 2"]
    minimum: Float[Array, " 2"]


def limit_data(problems: list[Problem], sweep: SweepData) -> LimitData:
    """What `sweep_limited` reads for `problems`, problem i laid out as layout i of
    `sweep` (one problem, or `SweepData.from_problems(problems, problems, ...)`); all
    share the same limits."""
    limits = problems[0].leaf_limits
    n_pad = sweep.length
    perm = np.asarray(sweep.perm)  # (L, p, n_pad): padding after every real sample
    size = np.zeros((sweep.sorted_scan.shape[0], perm.shape[1], n_pad, 2))
    for i, problem in enumerate(problems):
        one = np.zeros((n_pad, 2))
        one[: problem.n, 0] = problem.weight > 0
        one[: problem.n, 1] = problem.weight
        size[i] = one[perm[i]]
    return LimitData(sweep=sweep, sorted_size=jnp.asarray(size),
                     minimum=jnp.asarray([float(limits.min_samples), limits.min_weight]))


def _limited_row(ld: LimitData, i: Array, f0: Array, f: Array, cuts: Array
                 ) -> tuple[Array, Array]:
    data = ld.sweep
    limited = cuts < 0
    cuts = jnp.where(limited, -cuts - 1, cuts)
    lay = data.layout_of[i]
    key = _root_positions(data, lay, f0, f)
    # one more cut past every position: the prefix sums of the whole set in f's order
    every = jnp.append(cuts, data.length)
    sums = _masked_prefix_sums(data, data.sorted_scan[i, f], key, every)  # (n, K+1, S)
    sizes = _masked_prefix_sums(data, ld.sorted_size[i, f], key, every)  # (n, K+1, 2)
    valid = data.cut_valid[lay, f, 1:]

    def best(left, total, size_left, size_total):
        """Best score over the valid positions; at the limited columns, only where
        both parts of the split may be leaves (position 0, no split, always)."""
        score = _score(data, left, total)  # (n, K)
        fits = jnp.all((size_left >= ld.minimum) & (size_total[None] - size_left >= ld.minimum),
                       axis=-1)
        allowed = valid[:, None] & (fits | ~limited[None, :])
        at_zero = _score(data, jnp.zeros_like(left[:1]), total)[0]
        low = jnp.asarray(jnp.iinfo(score.dtype).min if jnp.issubdtype(score.dtype, jnp.integer)
                          else -jnp.inf, score.dtype)
        return jnp.maximum(jnp.max(jnp.where(allowed, score, low), axis=0), at_zero)

    left, whole = sums[:, :-1], sums[:, -1]
    size_left, size_whole = sizes[:, :-1], sizes[:, -1]
    pre_scan, pre_size = left[-1], size_left[-1]
    prefix = best(left, pre_scan, size_left, pre_size)
    suffix = best(whole[:, None] - left, whole[-1][None] - pre_scan,
                  size_whole[:, None] - size_left, size_whole[-1][None] - pre_size)
    pre_tot = data.root_cum[i, f0, cuts]  # (K, C)
    suf_tot = data.root_cum[i, f0, -1][None] - pre_tot
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


@jax.jit
def sweep_limited(
    ld: LimitData,
    problem: Int[Array, " rows"],
    f0: Int[Array, " rows"],
    f: Int[Array, " rows"],
    cuts: Int[Array, "rows K"],
) -> tuple[Shaped[Array, "rows K"], Shaped[Array, "rows K"]]:
    """`sweep_full` under leaf limits: `(prefix, suffix)` losses `(rows, K)`, the
    constrained best stump where a cut is given as `-(c + 1)`, else the unconstrained."""
    return jax.vmap(functools.partial(_limited_row, ld))(problem, f0, f, cuts)
