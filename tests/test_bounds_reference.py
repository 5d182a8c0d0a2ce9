"""The paper's bounds, computed literally (tests/helpers.py), obey Lemma key-ineq.

W0 <= W1_{s'} <= W2 <= L2 <= V_s for every tuple phi = (f0, [a,b], f1, f2), and L2 over the
full root range, minimised over (f0, f1, f2), is the depth-2 optimum of the brute force.
One test per random problem; each group's problems (and tuples) are drawn in sequence
from one seeded generator, once per session. tests/test_bound_kernels.py compares the
library's own bounds with these quantities.
"""

from __future__ import annotations

import functools

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


KEY_PROBLEMS, TUPLES = 20, 5  # per case


@functools.cache
def key_cases(task, k, weights) -> tuple:
    """The case's `KEY_PROBLEMS` problems, each with `TUPLES` tuples
    `(phi, s' values, s values)`, drawn in sequence from the case's generator."""
    rng = np.random.default_rng(seed_of(task, k, weights))
    out = []
    for _ in range(KEY_PROBLEMS):
        n, p = int(rng.integers(2, 26)), int(rng.integers(1, 4))
        P = random_problem(rng, task, n, p, k, weights=weights)
        u_of = [len(np.unique(P.X[:, f])) for f in range(p)]
        plan = []
        for _ in range(TUPLES):
            f0, f1, f2 = (int(v) for v in rng.integers(0, p, size=3))
            u = u_of[f0]
            a, b = sorted(int(v) for v in rng.integers(0, u + 1, size=2))
            if rng.random() < 0.3:
                a, b = 0, u
            s_primes = sorted({1, int(rng.integers(1, b - a + 1)), b - a}) if b > a else []
            s_values = sorted({1, int(rng.integers(1, b - a + 1))}) if b > a else []
            plan.append(((f0, a, b, f1, f2), s_primes, s_values))
        out.append((P, tuple(plan)))
    return tuple(out)


def quantities(P):
    Q = PaperQuantities(P.X, P.y, P.w, P.task)
    return Q, 1e-9 * max(1.0, Q.ref_L0(Q.all()))


@pytest.mark.parametrize("it", range(KEY_PROBLEMS))
@pytest.mark.parametrize("task,k,weights", CASES)
def test_key_inequality(task, k, weights, it):
    """5 random tuples on each of 20 random problems per case (100 per case, 600 in all)."""
    P, plan = key_cases(task, k, weights)[it]
    Q, tol = quantities(P)
    for phi, s_primes, s_values in plan:
        _, a, b, _, _ = phi
        w0, w2, l2 = Q.ref_W0(phi), Q.ref_W2(phi), Q.ref_L2(Q.all(), phi)
        assert w0 <= w2 + tol and w2 <= l2 + tol, (phi, w0, w2, l2)
        if a == b:  # only one root threshold: every bound is exact
            assert w0 == pytest.approx(l2, abs=tol) and w2 == pytest.approx(l2, abs=tol)
        for s_prime in s_primes:
            w1 = Q.ref_W1(phi, s_prime)
            assert w0 <= w1 + tol and w1 <= w2 + tol, (phi, s_prime, w0, w1, w2)
            if s_prime == 1:  # both sides of the middle are empty: W1_1 == W0
                assert w1 == pytest.approx(w0, abs=tol)
        for s in s_values:
            assert Q.ref_V(phi, s) >= l2 - tol  # V_s is an upper bound
        if b - a <= 1:  # V over every threshold of [a, b] is L2 itself
            if b > a:
                assert Q.ref_V(phi, 1) == pytest.approx(l2, abs=tol)


@pytest.mark.parametrize("task,k,weights", CASES)
def test_key_inequality_is_not_vacuous(task, k, weights):
    """`test_key_inequality` checks at least 100 (tuple, s') pairs per case, and the
    bounds are not all trivially tight: L2 > W0 for at least 5 tuples."""
    n_tuples = n_strict = 0
    for P, plan in key_cases(task, k, weights):
        Q, tol = quantities(P)
        for phi, s_primes, _ in plan:
            n_tuples += len(s_primes)
            n_strict += Q.ref_L2(Q.all(), phi) > Q.ref_W0(phi) + tol
    assert n_tuples >= 100
    assert n_strict >= 5


@functools.cache
def optimum_cases(task, k, weights, count: int = 8) -> tuple:
    rng = np.random.default_rng(7 + seed_of(task, k, weights))
    out = []
    for _ in range(count):
        n, p = int(rng.integers(1, 16)), int(rng.integers(1, 4))
        out.append(random_problem(rng, task, n, p, k, weights=weights))
    return tuple(out)


@pytest.mark.parametrize("it", range(8))
@pytest.mark.parametrize("task,k,weights", CASES)
def test_L2_full_range_is_depth2_optimum(task, k, weights, it):
    """min over (f0, f1, f2) of L2([n], f0, [0, u(f0)], f1, f2) == brute force (8 per case)."""
    P = optimum_cases(task, k, weights)[it]
    Q, tol = quantities(P)
    p = P.p
    l2 = min(
        Q.ref_L2(Q.all(), (f0, 0, int(Q.u[f0]), f1, f2))
        for f0 in range(p)
        for f1 in range(p)
        for f2 in range(p)
    )
    assert l2 == pytest.approx(brute_force(P.X, P.y, P.w, task=task, depth=2), abs=tol), it
    l1 = min(Q.ref_L1(Q.all(), f) for f in range(p))
    assert l1 == pytest.approx(brute_force(P.X, P.y, P.w, task=task, depth=1), abs=tol), it
