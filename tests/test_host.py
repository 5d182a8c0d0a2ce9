"""Host helpers checked against plain numpy."""

import numpy as np
import pytest

from qbnb_jax._depth2 import row_searchsorted


@pytest.mark.parametrize("n_rows", [1, 5, 80])  # the row-by-row path and the binary search
def test_row_searchsorted_equals_numpy(n_rows):
    rng = np.random.default_rng(n_rows)
    for trial in range(40):
        width = int(rng.integers(1, 50))
        table = rng.integers(0, 20, size=(n_rows, width)).astype(float)
        if trial % 2:
            table += rng.random((n_rows, width))
        table.sort(axis=1)
        rows = rng.integers(0, n_rows, int(rng.integers(0, 100)))
        values = rng.integers(-1, 22, len(rows)).astype(float)
        values[::3] = table[rows[::3], 0]  # ties with table entries
        for side in ("left", "right"):
            want = [np.searchsorted(table[r], v, side=side) for r, v in zip(rows, values)]
            np.testing.assert_array_equal(row_searchsorted(table, rows, values, side),
                                          np.asarray(want, dtype=np.int64))
