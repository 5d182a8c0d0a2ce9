"""The paper's bounds, computed literally (tests/helpers.py), obey Lemma key-ineq.

W0 <= W1_{s'} <= W2 <= L2 <= V_s for every tuple phi = (f0, [a,b], f1, f2), and L2 over the
full root range, minimised over (f0, f1, f2), is the depth-2 optimum of the brute force.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import PaperQuantities, brute_force, equispaced, random_problem, seed_of

CASES = [
    ("classification", 2, "ones"),
    ("classification", 3, "int"),
    ("classification", 4, "float"),
    ("regression", 1, "ones"),
    ("regression", 2, "int"),
    ("regression", 3, "float"),
]


def test_equispaced():
    assert equispaced(0, 10, 3) == [0, 3, 6, 10]
    assert equispaced(2, 4, 2) == [2, 3, 4]
    assert equispaced(5, 6, 1) == [5, 6]
    assert equispaced(1, 8, 7) == list(range(1, 9))
    for a in range(6):
        for b in range(a + 1, 12):
            for s in range(1, b - a + 1):
                t = equispaced(a, b, s)
                assert len(t) == s + 1 and t[0] == a and t[-1] == b
                assert all(t[j] < t[j + 1] for j in range(s))  # strictly increasing


@pytest.mark.parametrize("task,k,weights", CASES)
def test_key_inequality(task, k, weights):
    """100 random tuples per case (600 in all) on 20 random problems per case."""
    rng = np.random.default_rng(seed_of(task, k, weights))
    n_tuples = 0
    n_strict = 0
    for _ in range(20):
        n, p = int(rng.integers(2, 26)), int(rng.integers(1, 4))
        P = random_problem(rng, task, n, p, k, weights=weights)
        Q = PaperQuantities(P.X, P.y, P.w, task)
        tol = 1e-9 * max(1.0, Q.ref_L0(Q.all()))
        for _ in range(5):
            f0, f1, f2 = (int(v) for v in rng.integers(0, p, size=3))
            u = int(Q.u[f0])
            a, b = sorted(int(v) for v in rng.integers(0, u + 1, size=2))
            if rng.random() < 0.3:
                a, b = 0, u
            phi = (f0, a, b, f1, f2)
            w0, w2, l2 = Q.ref_W0(phi), Q.ref_W2(phi), Q.ref_L2(Q.all(), phi)
            assert w0 <= w2 + tol and w2 <= l2 + tol, (phi, w0, w2, l2)
            n_strict += l2 > w0 + tol
            if a == b:  # only one root threshold: every bound is exact
                assert w0 == pytest.approx(l2, abs=tol) and w2 == pytest.approx(l2, abs=tol)
            for s_prime in sorted({1, int(rng.integers(1, b - a + 1)), b - a}) if b > a else []:
                w1 = Q.ref_W1(phi, s_prime)
                assert w0 <= w1 + tol and w1 <= w2 + tol, (phi, s_prime, w0, w1, w2)
                if s_prime == 1:  # both sides of the middle are empty: W1_1 == W0
                    assert w1 == pytest.approx(w0, abs=tol)
                n_tuples += 1
            for s in sorted({1, int(rng.integers(1, b - a + 1))}) if b > a else []:
                assert Q.ref_V(phi, s) >= l2 - tol  # V_s is an upper bound
            if b - a <= 1:  # V over every threshold of [a, b] is L2 itself
                if b > a:
                    assert Q.ref_V(phi, 1) == pytest.approx(l2, abs=tol)
    assert n_tuples >= 100
    assert n_strict >= 5  # the bounds are not all trivially tight


@pytest.mark.parametrize("task,k,weights", CASES)
def test_L2_full_range_is_depth2_optimum(task, k, weights):
    """min over (f0, f1, f2) of L2([n], f0, [0, u(f0)], f1, f2) == brute force (8 per case)."""
    rng = np.random.default_rng(7 + seed_of(task, k, weights))
    for it in range(8):
        n, p = int(rng.integers(1, 16)), int(rng.integers(1, 4))
        P = random_problem(rng, task, n, p, k, weights=weights)
        Q = PaperQuantities(P.X, P.y, P.w, task)
        tol = 1e-9 * max(1.0, Q.ref_L0(Q.all()))
        l2 = min(
            Q.ref_L2(Q.all(), (f0, 0, int(Q.u[f0]), f1, f2))
            for f0 in range(p)
            for f1 in range(p)
            for f2 in range(p)
        )
        assert l2 == pytest.approx(brute_force(P.X, P.y, P.w, task=task, depth=2), abs=tol), it
        l1 = min(Q.ref_L1(Q.all(), f) for f in range(p))
        assert l1 == pytest.approx(brute_force(P.X, P.y, P.w, task=task, depth=1), abs=tol), it
