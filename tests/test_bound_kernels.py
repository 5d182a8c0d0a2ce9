"""The library's W0, W1_{s'}, W2 and L2 against the paper's quantities, tuple by tuple.

A lower bound that is too loose only slows the search: every end-to-end test still
finds the optimum. So these tests compare the values themselves with `PaperQuantities`
(tests/helpers.py: the paper's definitions computed literally, independent of qbnb_jax)
on small random problems, at two levels:

1. the kernel sweeps (`KernelRunner.full` and `.window`, both the scanned and the
   gathered window path): the L1 of every set a bound is made of, and W0, W1_{s'}, W2,
   L2 combined from them as the paper defines them, equal the reference (tight);
2. `Depth2Search.refine`, the step that prunes with W1_{s'}, W2 or L2: the value it
   prunes a tuple (f0, [a, b], f1, f2) with equals the reference quantity it claims to
   compute (so it is also valid: never above L2), its piece bound is the minimum over
   the kept (f1, f2), and it keeps exactly the child features whose bound can still beat
   the incumbent.

A tuple's thresholds are numbered as in the paper: t = 0..u(f0), u(f0) the number of
distinct values of f0, t distinct values left (`Problem.cut_pos[f0, t]` samples). The
library drops zero-weight rows, which would change that numbering, so every weight here
is positive.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import PaperQuantities, equispaced, random_problem, random_weights, seed_of

from qbnb_jax._device.runner import GATHER_SHARE, KernelRunner
from qbnb_jax._problem.data import make_problem
from qbnb_jax._search import depth2 as _depth2
from qbnb_jax._search.depth2 import CutLosses, Depth2Search, Frontier, PieceFeatures, Pieces
from qbnb_jax._search.search import Search
from qbnb_jax._search.state import SearchOptions

CASES = [  # (task, classes or targets, weights): integer counts, float weights, regression
    ("classification", 2, "ones"),
    ("classification", 3, "int"),
    ("classification", 4, "float"),
    ("regression", 1, "ones"),
    ("regression", 2, "int"),
    ("regression", 3, "float"),
]
N, P = 40, 3  # one shape per case: few compiles. Padded to 64 samples, so windows of at
# most 16 samples are gathered and wider ones scanned in place (`KernelRunner.window`).
SEEDS = range(3)
BOUNDS = ("w1", "w2", "l2")
FULL_CUTS, WINDOW_CUTS = 32, 8  # cuts per request, padded: one compiled shape each


@pytest.fixture(autouse=True)
def _x64():
    """The library runs its kernels under `jax.enable_x64` (`solve`, `solve_batch`);
    these tests call them directly, so they do the same."""
    with jax.enable_x64(True):
        yield


def case_id(case) -> str:
    task, k, weights = case
    return f"{task[:3]}-k{k}-{weights}"


def problem_for(case, seed):
    """`(library Problem, PaperQuantities, tolerance)` of a random problem, weights > 0."""
    task, k, weights = case
    rng = np.random.default_rng(seed_of("bound-kernels", task, k, weights, seed))
    prob = random_problem(rng, task, N, P, k, weights=weights)
    # feature 0 with many distinct values (and some ties), so that there are pieces of
    # several thresholds and few samples (`random_problem` often makes coarse grids)
    prob.X[:, 0] = np.round(rng.normal(size=N), 1)
    w = random_weights(rng, N, weights)
    w = np.where(w > 0, w, 1.0)  # positive: the library drops zero-weight rows
    problem = make_problem(prob.X, prob.y, task=task,
                           sample_weight=None if weights == "ones" else w)
    Q = PaperQuantities(prob.X, prob.y, None if weights == "ones" else w, task)
    assert problem.n == Q.n
    np.testing.assert_array_equal(problem.n_thresholds, Q.u)
    exact = problem.loss_kind == "count"
    tol = 0.0 if exact else 1e-9 * max(1.0, Q.ref_L0(Q.all()))
    return rng, problem, Q, tol


def random_tuples(rng, problem, count: int, narrow: int = 16):
    """`count` tuples (f0, a, b, f1, f2) with a < b: narrow pieces (at most `narrow`
    samples where the feature allows; 16: gathered) and wide ones (scanned), alternately."""
    tuples = []
    for i in range(count):
        f0, f1, f2 = (int(v) for v in rng.integers(0, problem.p, size=3))
        u = int(problem.n_thresholds[f0])
        pos = problem.cut_pos[f0]
        a = int(rng.integers(0, u))
        if i % 2 == 0:  # narrow: the largest b whose piece holds at most `narrow` samples
            b = int(np.searchsorted(pos[: u + 1], pos[a] + narrow, side="right")) - 1
            b = max(a + 1, b)
        else:  # wide: the whole range, or a random one
            a, b = (0, u) if rng.random() < 0.5 else (a, int(rng.integers(a + 1, u + 1)))
        tuples.append((f0, a, b, f1, f2))
    return tuples


def padded(cuts, width: int) -> np.ndarray:
    """`cuts` repeated at the end to a multiple of `width` (duplicates change no minimum)."""
    cuts = np.asarray(cuts, dtype=np.int64)
    extra = -len(cuts) % width
    return np.concatenate([cuts, np.repeat(cuts[-1:], extra)])


def full_sweep(runner, f0, features, cuts):
    """`L1(prefix_c, f)`, `L1(suffix_c, f)` for each f in `features`: `(len, len(cuts))`."""
    K = len(cuts)
    c = padded(cuts, FULL_CUTS)
    rows = len(features)
    pre, suf = runner.full(np.full(rows, f0), np.asarray(features), np.tile(c, (rows, 1)))
    return pre[:, :K], suf[:, :K]


def window_sweep(runner, f0, features, lo, hi, cuts):
    """`L1([lo, c), f)`, `L1([c, hi), f)` over positions of f0's order."""
    K = len(cuts)
    c = padded(cuts, WINDOW_CUTS)
    rows = len(features)
    pre, suf = runner.window(np.full(rows, f0), np.asarray(features), np.full(rows, lo),
                             np.full(rows, hi), np.tile(c, (rows, 1)))
    return pre[:, :K], suf[:, :K]


def gathered(runner, lo: int, hi: int) -> bool:
    """Whether `KernelRunner.window` gathers a window of `hi - lo` samples (else scans)."""
    width = hi - lo
    bucket = max(16, 1 << 2 * -(-max(0, width - 1).bit_length() // 2))
    return bucket * GATHER_SHARE <= runner.data.length


# ---------------------------------------------------------------------------------------
# 1. the kernel sweeps, combined as the paper defines the bounds
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_sweeps_give_the_paper_quantities(case, seed):
    """For 6 tuples per problem (18 problems): every L1 the full and window sweeps return
    equals the reference's, and W0, W1_{s'} (s' = 1, random, b - a), W2 and L2 built
    from them equal `PaperQuantities`' (and so obey W0 <= W1 <= W2 <= L2)."""
    rng, problem, Q, tol = problem_for(case, seed)
    runner = KernelRunner(problem)
    paths = set()
    for f0, a, b, f1, f2 in random_tuples(rng, problem, 6):
        phi = (f0, a, b, f1, f2)
        u = int(problem.n_thresholds[f0])
        pos = problem.cut_pos[f0]
        everything = Q.all()
        # full sweeps at every threshold of f0: L1 of each prefix and suffix
        pre, suf = full_sweep(runner, f0, [f1, f2], pos[: u + 1])
        for t in range(u + 1):
            left, right = Q.sub(everything, f0, 0, t), Q.sub(everything, f0, t, u)
            assert pre[0, t] == pytest.approx(Q.ref_L1(left, f1), abs=tol), (phi, t)
            assert suf[1, t] == pytest.approx(Q.ref_L1(right, f2), abs=tol), (phi, t)
        w0 = pre[0, a] + suf[1, b]
        l2 = min(pre[0, t] + suf[1, t] for t in range(a, b + 1))
        assert w0 == pytest.approx(Q.ref_W0(phi), abs=tol), phi
        assert l2 == pytest.approx(Q.ref_L2(everything, phi), abs=tol), phi
        # window sweeps over the middle [a, b]: W2 and W1_{s'}
        lo, hi = int(pos[a]), int(pos[b])
        paths.add("gathered" if gathered(runner, lo, hi) else "scanned")
        mid_pre, mid_suf = window_sweep(runner, f0, [f1, f2], lo, hi, pos[a : b + 1])
        for t in range(a, b + 1):
            assert mid_pre[0, t - a] == pytest.approx(
                Q.ref_L1(Q.sub(everything, f0, a, t), f1), abs=tol), (phi, t)
            assert mid_suf[1, t - a] == pytest.approx(
                Q.ref_L1(Q.sub(everything, f0, t, b), f2), abs=tol), (phi, t)
        w2 = w0 + min(mid_pre[0, j] + mid_suf[1, j] for j in range(b - a + 1))
        assert w2 == pytest.approx(Q.ref_W2(phi), abs=tol), phi
        for s_prime in sorted({1, int(rng.integers(1, b - a + 1)), b - a}):
            t = equispaced(a, b, s_prime)
            sub_pre, sub_suf = window_sweep(runner, f0, [f1, f2], lo, hi, pos[t])
            w1 = w0 + min(sub_pre[0, j - 1] + sub_suf[1, j] for j in range(1, s_prime + 1))
            assert w1 == pytest.approx(Q.ref_W1(phi, s_prime), abs=tol), (phi, s_prime)
            assert w0 - tol <= w1 <= w2 + tol, (phi, s_prime, w0, w1, w2)
        assert w0 - tol <= w2 <= l2 + tol, (phi, w0, w2, l2)
    assert paths == {"gathered", "scanned"}, paths  # both window kernels were checked


# ---------------------------------------------------------------------------------------
# 2. the quantity `Depth2Search.refine` prunes with
# ---------------------------------------------------------------------------------------


def run_requests(gen, runner):
    """Drive a `Depth2Search` step generator as `Depth2Search.run` does; its value."""
    try:
        request = next(gen)
        while True:
            request = gen.send(getattr(runner, request.kind)(*request.args, problem=None))
    except StopIteration as stop:
        return stop.value


def expected_subcuts(problem, s: int, f0: int, lo: int, hi: int, a: int, b: int) -> int:
    """The s' `refine` uses for piece [a, b] of a tuple over root thresholds lo..hi
    (`Depth2Search.refine`: the paper's s' = 0.6 n s / (b - a), counted in samples,
    capped); 0 where it leaves the piece alone (s' < 2, or more than n / W1_MAX_SHARE
    samples in the piece)."""
    pos = problem.cut_pos[f0]
    parent = max(int(pos[hi] - pos[lo]), 1)
    sub = int(np.floor(_depth2.W1_FACTOR * problem.n * s / parent))
    sub = min(sub, b - a, _depth2.W1_MAX_SUBCUTS)
    samples = int(pos[b] - pos[a])
    return sub if sub >= 2 and samples * _depth2.W1_MAX_SHARE <= problem.n else 0


def reference_bound(Q, bound, phi, s_prime=None) -> float:
    if bound == "w1":
        return Q.ref_W1(phi, s_prime)
    if bound == "w2":
        return Q.ref_W2(phi)
    return Q.ref_L2(Q.all(), phi)


def refine_pieces(problem, runner, bound, s, pieces, keep1, keep2, incumbent=np.inf):
    """`refine` over one piece per tuple: `pieces` rows (f0, lo, hi, a, b), the piece
    [a, b] of a tuple over root thresholds lo..hi; ends swept exactly. Returns
    `(keep1, keep2, piece_lb, alive)`, each `(tuples,)` or `(tuples, p)`."""
    search = Search([problem], SearchOptions.make(bound=bound, s=s, start=0.0), runner=runner)
    d2 = Depth2Search(search)
    search.incumbents.value[:] = incumbent
    T, p = len(pieces), problem.p
    f0, lo, hi, a, b = (np.array([row[i] for row in pieces], dtype=np.int64) for i in range(5))
    left_p = np.empty((T, 1, p))
    right_s = np.empty((T, 1, p))
    for i, (root, _, _, ai, bi) in enumerate(pieces):
        pos = problem.cut_pos[root]
        pre, suf = full_sweep(runner, root, list(range(p)), [pos[ai], pos[bi]])
        left_p[i, 0], right_s[i, 0] = pre[:, 0], suf[:, 1]  # P(t_a, f), S(t_b, f)
    block = Frontier(np.zeros(T, dtype=np.int64), f0, lo, hi, keep1, keep2,
                     np.zeros((T, 4, p)), np.zeros(T))  # refine reads problem, root, lo, hi
    unused = np.full((T, 1, p), np.inf)  # refine reads prefix[:, :-1] and suffix[:, 1:]
    losses = CutLosses(np.concatenate([left_p, unused], axis=1),
                       np.concatenate([unused, right_s], axis=1))
    pieces = Pieces(a[:, None], b[:, None], a[:, None] + 1, b[:, None] - 1,
                    np.full((T, 1), -np.inf), np.ones((T, 1), bool))
    out_pieces, out_keep = run_requests(d2.refine(
        block, losses, pieces, PieceFeatures(keep1[:, None, :], keep2[:, None, :])), runner)
    k1, k2, lb, alive = out_keep.left, out_keep.right, out_pieces.lower_bound, out_pieces.alive
    return k1[:, 0], k2[:, 0], lb[:, 0], alive[:, 0]


def refine_tuples(rng, problem, count: int, narrow: int):
    """Pieces (f0, lo, hi, a, b) with lo <= a < b <= hi, for `refine_pieces`."""
    pieces = []
    for f0, a, b, _, _ in random_tuples(rng, problem, count, narrow):
        lo = int(rng.integers(0, a + 1))
        hi = int(rng.integers(b, int(problem.n_thresholds[f0]) + 1))
        pieces.append((f0, lo, hi, a, b))
    return pieces


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("bound", BOUNDS)
def test_refine_prunes_with_the_paper_quantity(bound, case, seed):
    """Per tuple (f0, [a, b], f1, f2), 6 per problem: with only f1 and f2 kept, `refine`'s
    piece bound is W1_{s'} (s' as `refine` chooses it), W2 or L2 of the reference: equal
    to it (tight) and so between W0 and L2 (valid). W1 pieces `refine` leaves alone
    keep their bound."""
    rng, problem, Q, tol = problem_for(case, seed)
    runner = KernelRunner(problem)
    s = int(rng.integers(2, 6))
    if bound == "w1":  # 4 pieces it refines (at most n / W1_MAX_SHARE samples), 2 not
        candidates = refine_tuples(rng, problem, 40, N // _depth2.W1_MAX_SHARE)
        refines = [expected_subcuts(problem, s, *pc) >= 2 for pc in candidates]
        pieces = ([pc for pc, r in zip(candidates, refines) if r][:4]
                  + [pc for pc, r in zip(candidates, refines) if not r][:2])
    else:
        pieces = refine_tuples(rng, problem, 6, 16)
    pairs = [tuple(int(v) for v in rng.integers(0, problem.p, size=2)) for _ in pieces]
    eye = np.eye(problem.p, dtype=bool)
    keep1 = eye[[f1 for f1, _ in pairs]]
    keep2 = eye[[f2 for _, f2 in pairs]]
    k1, k2, lb, alive = refine_pieces(problem, runner, bound, s, pieces, keep1, keep2)
    refined = 0
    for (f0, lo, hi, a, b), (f1, f2), got in zip(pieces, pairs, lb):
        phi = (f0, a, b, f1, f2)
        s_prime = None
        if bound == "w1":
            s_prime = expected_subcuts(problem, s, f0, lo, hi, a, b)
            if s_prime == 0:  # not refined: the bound it came with
                assert got == -np.inf, (phi, got)
                continue
        refined += 1
        want = reference_bound(Q, bound, phi, s_prime)
        assert got == pytest.approx(want, abs=tol), (phi, s_prime, got, want)
        assert Q.ref_W0(phi) - tol <= got <= Q.ref_L2(Q.all(), phi) + tol, (phi, got)
    # with no incumbent, nothing is pruned
    assert alive.all() and (k1 == keep1).all() and (k2 == keep2).all()
    assert refined >= (2 if bound == "w1" else len(pieces)), refined


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("bound", BOUNDS)
def test_refine_keeps_exactly_the_features_that_can_win(bound, case, seed, monkeypatch):
    """All child features kept on entry, an incumbent U among the reference bounds: the
    piece bound is the least bound over (f1, f2), and f1 survives exactly when some f2
    has a reference bound that can beat U (< U for integer counts; within the tolerance
    otherwise, so values within the tolerance of U are not checked there)."""
    rng, problem, Q, tol = problem_for(case, seed)
    runner = KernelRunner(problem)
    s = int(rng.integers(2, 6))
    p = problem.p
    if bound == "w1":  # refine pieces of any size (W1 with its s' all the same)
        monkeypatch.setattr(_depth2, "W1_MAX_SHARE", 1)
        candidates = refine_tuples(rng, problem, 20, 16)
        pieces = [pc for pc in candidates if expected_subcuts(problem, s, *pc) >= 2][:4]
    else:
        pieces = refine_tuples(rng, problem, 4, 16)
    assert pieces
    ref = np.empty((len(pieces), p, p))
    for i, (f0, lo, hi, a, b) in enumerate(pieces):
        s_prime = expected_subcuts(problem, s, f0, lo, hi, a, b) if bound == "w1" else None
        for f1 in range(p):
            for f2 in range(p):
                ref[i, f1, f2] = reference_bound(Q, bound, (f0, a, b, f1, f2), s_prime)
    everything = np.ones((len(pieces), p), dtype=bool)
    _, _, lb, _ = refine_pieces(problem, runner, bound, s, pieces, everything, everything)
    np.testing.assert_allclose(lb, ref.min(axis=(1, 2)), rtol=0, atol=tol)
    # an incumbent in the middle of the reference bounds prunes some features
    U = float(np.median(ref))
    k1, k2, _, alive = refine_pieces(problem, runner, bound, s, pieces, everything,
                                     everything, incumbent=U)
    best1, best2 = ref.min(axis=2), ref.min(axis=1)  # (pieces, p)
    if problem.loss_kind == "count":
        np.testing.assert_array_equal(k1, best1 < U)
        np.testing.assert_array_equal(k2, best2 < U)
    else:
        search = Search([problem], SearchOptions.make(bound=bound, s=s), cutoff=U)
        slack = float(search.incumbents.tolerance(0))  # the search's pruning tolerance
        for best, got in ((best1, k1), (best2, k2)):
            clear = np.abs(best - (U + slack)) > 2 * tol  # not within round-off of the edge
            np.testing.assert_array_equal(got[clear], (best <= U + slack)[clear])
    np.testing.assert_array_equal(alive, k1.any(axis=1) & k2.any(axis=1))
