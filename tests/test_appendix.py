"""The paper's appendix route for depth 3 (`route="appendix"`).

Its brute-force checks are `tests/test_solve.py::test_random_depth3` (both routes) and
the hypothesis test of `tests/test_properties.py`.
"""

from __future__ import annotations

import numpy as np
import pytest

from qbnb_jax import solve
from qbnb_jax._search import appendix as _appendix
from qbnb_jax._search.appendix import cut_points


@pytest.mark.parametrize("entry_block", [None, 50])  # whole, and pruned in many blocks
def test_routes_agree_on_a_larger_problem(entry_block, monkeypatch):
    if entry_block is not None:
        monkeypatch.setattr(_appendix, "ENTRY_BLOCK_ELEMENTS", entry_block)
    rng = np.random.default_rng(5)
    X = np.round(rng.normal(size=(300, 4)), 2)
    y = ((X[:, 0] > 0.2) ^ (X[:, 1] * X[:, 2] > 0) ^ (rng.random(300) < 0.15)).astype(int)
    a = solve(X, y, task="classification", depth=3, route="appendix")
    b = solve(X, y, task="classification", depth=3)
    assert a.status == b.status == "optimal"
    assert a.objective == b.objective
    assert a.stats["subproblems"] > 0


def test_appendix_time_limit_returns_a_bracket():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 6))
    y = ((X[:, 0] > 0) ^ (X[:, 1] > 0.3) ^ (rng.random(2000) < 0.2)).astype(int)
    res = solve(X, y, task="classification", depth=3, route="appendix", time_limit=0.3)
    assert res.status == "time_limit"
    assert 0.0 <= res.lower_bound <= res.objective
    assert res.tree.max_depth <= 3


def test_cut_points_cover_and_shrink():
    a = np.array([0, 3, 5, 2])
    b = np.array([10, 4, 5, 9])
    for s in (2, 3, 5):
        cuts, count, lo, hi, valid = cut_points(a, b, s)
        for i in range(len(a)):
            covered = set()
            for j in np.nonzero(valid[i])[0]:
                x, y = cuts[i, lo[i, j]], cuts[i, hi[i, j]]
                assert a[i] <= x <= y <= b[i]
                assert y - x < max(b[i] - a[i], 1)  # every piece is narrower
                covered |= set(range(x, y + 1))
            assert covered == set(range(a[i], b[i] + 1))
            assert count[i] == len(np.unique(cuts[i]))


@pytest.mark.parametrize("kwargs", [dict(depth=2), dict(depth=4), dict(bound="w1")])
def test_appendix_options_are_checked(kwargs):
    X, y = np.arange(8.0)[:, None], np.arange(8) % 2
    options = dict(depth=3) | kwargs
    with pytest.raises(ValueError, match="route='appendix'"):
        solve(X, y, task="classification", route="appendix", **options)
    with pytest.raises(ValueError, match="Unknown route"):
        solve(X, y, task="classification", depth=3, route="paper")
