"""The sorted form of the slack bound over feature pairs equals the dense form."""

from __future__ import annotations

import numpy as np
import pytest

from qbnb_jax._search.pair_bounds import PairInputs, dense_pair_bounds, sorted_pair_bounds


def random_inputs(seed: int, N: int, p: int, integer: bool):
    rng = np.random.default_rng(seed)

    def losses():
        x = rng.integers(0, 30, (N, p)).astype(float) if integer else rng.uniform(0, 30, (N, p))
        x[rng.random((N, p)) < 0.15] = np.inf  # features not swept
        return x

    pa, pb, sa, sb = losses(), losses(), losses(), losses()
    width = rng.integers(0, 12, N).astype(float) if integer else rng.uniform(0, 12, N)
    limit = rng.integers(10, 50, N).astype(float)
    keep_left, keep_right = rng.random((N, p)) < 0.8, rng.random((N, p)) < 0.8
    return PairInputs(pa, pb, sa, sb, width, limit), keep_left, keep_right


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("p", [1, 2, 7, 60])
@pytest.mark.parametrize("seed", range(4))
def test_sorted_equals_dense(seed, p, integer):
    inputs, keep_left, keep_right = random_inputs(seed, 50, p, integer)
    want = dense_pair_bounds(inputs, keep_left, keep_right)
    got = sorted_pair_bounds(inputs, keep_left, keep_right)
    np.testing.assert_array_equal(got.keep_left, want.keep_left)
    np.testing.assert_array_equal(got.keep_right, want.keep_right)
    if integer:
        np.testing.assert_array_equal(got.least, want.least)
    else:
        np.testing.assert_allclose(got.least, want.least, rtol=1e-12)
    assert want.keep_left.any() and not want.keep_left.all()  # the cases are not trivial
