"""Independent brute force of optimal depth-1, 2 and 3 regression trees (numpy only).

Used as a reference by the tests and by ``python -m qbnb_jax.bench --check-regression``.
It shares no code with the solver: every root feature and cut and, below each root cut,
every child feature and cut is evaluated (no pruning, no bounds). For a pair (root feature
j, child feature f) the statistics of all the parts ``{x_j <= v, x_f <= u}`` form a 2-D
prefix-sum grid over (distinct values of j) x (distinct values of f); it is built row by
row in cache-sized blocks and every cell is scored with vectorised numpy.

A cut of feature ``f`` sends ``x[f] <= v`` left; only cuts between consecutive distinct
values of ``f`` (over the whole training set) are distinct partitions, so only those are
enumerated. The loss is the sum over leaves and targets of squared deviations from the leaf
mean (SSE), optionally sample weighted. A split that leaves one side empty is a leaf, so
"no split" is always among the candidates and trees of smaller depth are covered.

Cost for depth 2: ``O(sum_{j,f} d_j * d_f * (m + 1))`` operations (``d_f`` distinct values
of feature f, ``m`` targets; at most ``O(p^2 n^2 m)``) and ``O(block)`` extra memory.
query1 (n = 8000, p = 3) takes about 5 s, concrete (n = 824, p = 8) about 0.2 s.
"""

from __future__ import annotations

import numpy as np

__all__ = ["depth0_sse", "depth1_sse", "depth2_sse", "depth3_sse"]

# Cells per block of the (root value x child value) grid: 512 KiB per float64 array,
# small enough for the temporaries to stay in cache.
_BLOCK_ELEMS = 1 << 16


def _prepare(X, y, sample_weight):
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError("X must be 2-D")
    y = np.asarray(y, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != X.shape[0]:
        raise ValueError("y must be (n,) or (n, m) with n = X.shape[0]")
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, np.float64)
    if w.shape != (n,):
        raise ValueError("sample_weight must be (n,)")
    # SSE is invariant to a shift of each target: centre for numerical accuracy.
    total_w = w.sum()
    if total_w > 0:
        y = y - (w[:, None] * y).sum(0) / total_w
    return X, y, w


def _sse(cnt, s, ss):
    """SSE from weight ``cnt``, per-target sums ``s`` (..., m) and total sum of squares."""
    with np.errstate(divide="ignore", invalid="ignore"):
        red = np.where(cnt > 0, (s * s).sum(-1) / np.where(cnt > 0, cnt, 1.0), 0.0)
    return np.maximum(ss - red, 0.0)


def depth0_sse(X, y, sample_weight=None) -> float:
    """SSE of a single leaf."""
    _, y, w = _prepare(X, y, sample_weight)
    wy = w[:, None] * y
    return float(_sse(w.sum(), wy.sum(0), (wy * y).sum()))


def _cut_mask(xs_sorted):
    """Boolean (n + 1,): prefix length t is a valid cut (t = 0 and t = n are 'no split')."""
    n = xs_sorted.shape[0]
    valid = np.zeros(n + 1, dtype=bool)
    valid[0] = valid[n] = True
    if n > 1:
        valid[1:n] = xs_sorted[1:] > xs_sorted[:-1]
    return valid


def depth1_sse(X, y, sample_weight=None) -> float:
    """Optimal SSE of a tree of depth at most 1."""
    X, y, w = _prepare(X, y, sample_weight)
    n, p = X.shape
    wy = w[:, None] * y
    wyy = (wy * y).sum(1)
    best = float(_sse(w.sum(), wy.sum(0), wyy.sum()))
    for f in range(p):
        order = np.argsort(X[:, f], kind="stable")
        valid = _cut_mask(X[order, f])
        zc = np.zeros(1)
        c = np.concatenate([zc, np.cumsum(w[order])])
        s = np.concatenate([np.zeros((1, y.shape[1])), np.cumsum(wy[order], 0)])
        q = np.concatenate([zc, np.cumsum(wyy[order])])
        tot = _sse(c, s, q)  # left part
        rest = _sse(c[-1] - c, s[-1] - s, q[-1] - q)  # right part
        best = min(best, float((tot + rest)[valid].min()))
    return best


def _groups(x):
    """Dense rank of each value of ``x`` among its distinct values, and their number."""
    uniq, inv = np.unique(x, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), int(uniq.size)


def depth2_sse(X, y, sample_weight=None) -> float:
    """Optimal SSE of a regression tree of depth at most 2 (exhaustive enumeration).

    ``X`` is (n, p), ``y`` is (n,) or (n, m) (multi-target: SSE summed over targets),
    ``sample_weight`` optional (n,), non-negative. Returns the minimum total SSE.

    For a root cut (feature ``j``, after its ``a``-th distinct value) and a child cut
    (feature ``f``, after its ``t``-th distinct value), the weight ``c`` and target sums
    ``s`` of the part ``{x_j <= v_a, x_f <= u_t}`` are a 2-D prefix sum over the
    (distinct value of j) x (distinct value of f) grid, computed by blocks of rows. A node
    with weight ``C``, sums ``S`` and weighted sum of squares ``Q`` split into (c, s) and
    (C - c, S - s) has SSE ``Q - |S|^2/C - |s C - S c|^2 / (C c (C - c))``, so the best
    child cut maximises the last term; ``t`` = last value is the "no split" candidate.
    """
    X, y, w = _prepare(X, y, sample_weight)
    n, p = X.shape
    m = y.shape[1]
    wy = w[:, None] * y
    wyy = (wy * y).sum(1)
    best = float(_sse(w.sum(), wy.sum(0), wyy.sum()))
    if n < 2 or p == 0:
        return best
    positive = w[w > 0]
    if positive.size == 0:
        return best
    # Any non-empty part has weight >= w_min; an empty one computed by subtraction is
    # rounding noise far below it. Guarding denominators with these keeps 0/0 at ~0.
    w_min = float(positive.min())

    groups = [_groups(X[:, f]) for f in range(p)]
    # Per feature: prefix sums over its distinct values of the weight and target sums.
    full_c, full_s = [], []
    for g, d in groups:
        full_c.append(np.cumsum(np.bincount(g, w, minlength=d)))
        full_s.append(
            np.stack([np.cumsum(np.bincount(g, wy[:, t], minlength=d)) for t in range(m)])
        )
    tot_c, tot_s, tot_q = w.sum(), wy.sum(0), wyy.sum()

    for j in range(p):
        gj, dj = groups[j]
        if dj < 2:
            continue
        order = np.argsort(gj, kind="stable")
        gjs = gj[order]
        bounds = np.searchsorted(gjs, np.arange(dj + 1))
        # Root cut a: left child = values of j up to the a-th (a = dj - 1: no split).
        cl_c = full_c[j]  # (dj,)
        cl_s = full_s[j].T  # (dj, m)
        cl_q = np.cumsum(np.bincount(gj, wyy, minlength=dj))
        cr_c, cr_s, cr_q = tot_c - cl_c, tot_s[None, :] - cl_s, tot_q - cl_q
        gain_l = np.zeros(dj)
        gain_r = np.zeros(dj)
        # Per sample in j-order: its weight and weighted targets, stacked (k = m + 1).
        vals = np.concatenate([w[:, None], wy], 1)[order]
        k = m + 1
        for f in range(p):
            gf, df = groups[f]
            gf_o = gf[order].tolist()
            rows = max(1, _BLOCK_ELEMS // df)
            fc, fs = full_c[f], full_s[f]
            carry = np.zeros((k, df))
            buf = (np.empty((min(rows, dj), df)), np.empty((min(rows, dj), df)))
            for a0 in range(0, dj, rows):
                a1 = min(dj, a0 + rows)
                nb = a1 - a0
                # Rows of the 2-D prefix grid: row a = row a - 1 + the steps of the
                # samples whose j-value is the a-th (a step adds on columns >= g_f).
                blk = np.empty((k, nb, df))
                prev = carry
                for r in range(nb):
                    cur = blk[:, r, :]
                    cur[...] = prev
                    for i in range(bounds[a0 + r], bounds[a0 + r + 1]):
                        cur[:, gf_o[i] :] += vals[i][:, None]
                    prev = cur
                carry = blk[:, -1, :].copy()
                pc, ps = blk[0], blk[1:]
                bb = (buf[0][:nb], buf[1][:nb])
                gain_l[a0:a1] = np.maximum(gain_l[a0:a1], _best_gain(pc, ps, w_min, bb))
                np.subtract(fc, pc, out=pc)
                np.subtract(fs[:, None, :], ps, out=ps)
                gain_r[a0:a1] = np.maximum(gain_r[a0:a1], _best_gain(pc, ps, w_min, bb))
        # SSE of a child split (c, s) | (C - c, S - s) = Q - |S|^2/C - gain.
        sse_l = cl_q - (cl_s * cl_s).sum(1) / np.maximum(cl_c, w_min) - gain_l
        sse_r = cr_q - (cr_s * cr_s).sum(1) / np.maximum(cr_c, w_min) - gain_r
        best = min(best, float((np.maximum(sse_l, 0.0) + np.maximum(sse_r, 0.0)).min()))
    return best


def _best_gain(pc, ps, w_min, buf):
    """Row-wise max over columns t of |s_t C - S c_t|^2 / (C c_t (C - c_t)).

    ``pc`` (B, d): prefix weights of a child's parts along a feature's distinct values,
    last column = the child's total ``C``; ``ps`` (m, B, d) the same for target sums;
    ``buf``: two scratch arrays of shape (B, d).
    """
    big_c = pc[:, -1:]
    num, tmp = buf
    for i, st in enumerate(ps):
        np.multiply(pc, st[:, -1:], out=tmp)
        if i == 0:
            np.multiply(st, big_c, out=num)
            num -= tmp
            num *= num
        else:
            tmp -= st * big_c
            tmp *= tmp
            num += tmp
    np.subtract(big_c, pc, out=tmp)
    tmp *= pc
    # Both parts non-empty => c (C - c) >= w_min^2 / 2; an empty part gives ~0 / guard.
    np.maximum(tmp, 0.5 * w_min * w_min, out=tmp)
    num /= tmp
    return num.max(1) / np.maximum(big_c[:, 0], w_min)


def depth3_sse(X, y, sample_weight=None) -> float:
    """Optimal SSE of a tree of depth at most 3: every root cut, each side by `depth2_sse`.

    ``O(sum_j d_j)`` depth-2 brute forces: meant for small samples (n of a few dozen).
    """
    X, y, w = _prepare(X, y, sample_weight)
    best = depth2_sse(X, y, w)  # a root that sends everything one way
    for j in range(X.shape[1]):
        for v in np.unique(X[:, j])[:-1]:
            left = X[:, j] <= v
            best = min(best, depth2_sse(X[left], y[left], w[left])
                       + depth2_sse(X[~left], y[~left], w[~left]))
    return best
