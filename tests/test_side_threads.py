"""A depth-3 search's side batches on two threads (`deep.side_threads`): the same
trees as one thread, and the helper sweeps in float64 (a per-thread JAX setting)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import qbnb_jax
from qbnb_jax._device.kernels import SweepData
from qbnb_jax._search import deep, deep_batch


def _record_sweep_dtypes(monkeypatch) -> list:
    """A list that gets (on the main thread?, sorted_scan dtype) of every sweep table
    built from now on."""
    built = []
    from_problems = SweepData.from_problems

    def recording(*args, **kwargs):
        data = from_problems(*args, **kwargs)
        built.append((threading.current_thread() is threading.main_thread(),
                      data.sorted_scan.dtype))
        return data

    monkeypatch.setattr(SweepData, "from_problems", staticmethod(recording))
    return built


@pytest.mark.parametrize("task, lockstep", [
    ("regression", True), ("classification", False),
    pytest.param("classification", True, marks=pytest.mark.slow),
    pytest.param("regression", False, marks=pytest.mark.slow)])
def test_side_batches_on_two_threads_equal_one_thread(monkeypatch, task, lockstep):
    """Both ways a depth-3 search solves its sides: as a lockstep batch of one
    (`deep_batch`, the default) and in batches of its own (`DeepSearch.solve_sides`)."""
    rng = np.random.default_rng(5)
    X = np.round(rng.normal(size=(100, 3)), 2)
    y = X[:, 0] - X[:, 1] ** 2 + rng.normal(size=100)
    if task == "classification":
        y = (y > 0).astype(int) + (y > 1)
    # sides of different sizes: many batches
    if lockstep:
        monkeypatch.setattr(deep_batch, "SMALL_BATCH", 1)
        monkeypatch.setattr(deep_batch, "MAX_BATCH", 4)
    else:
        monkeypatch.setattr(deep.DeepSearch, "solves_in_lockstep", lambda self: False)
        monkeypatch.setattr(deep, "SMALL_SIDE", 8)
    built = _record_sweep_dtypes(monkeypatch)
    two = qbnb_jax.solve(X, y, task=task, depth=3)
    on_helper = [dtype for main, dtype in built if not main]
    assert on_helper, "no side batch ran on the helper thread"
    if task == "regression":
        assert all(dtype == np.float64 for _, dtype in built)
    monkeypatch.setattr(deep, "THREADS", 1)
    one = qbnb_jax.solve(X, y, task=task, depth=3)
    assert two.objective == one.objective
    assert repr(two.tree) == repr(one.tree)
    assert two.stats["cut_elements"] == one.stats["cut_elements"]


def test_lockstep_batch_sweeps_regression_in_float64_on_both_threads(monkeypatch):
    """A depth-3 `solve_batch` of regression problems solves its rounds' side batches
    on this thread and the helper: the helper's sweeps must be float64 too (a float32
    sweep gives other losses than `solve`)."""
    rng = np.random.default_rng(7)
    X = np.round(rng.normal(size=(120, 3)), 2)
    y = X[:, 0] - X[:, 1] ** 2 + rng.normal(size=120)
    weights = rng.integers(0, 3, size=(6, 120)).astype(float)
    built = _record_sweep_dtypes(monkeypatch)
    batch = qbnb_jax.solve_batch(X, y, weights, task="regression", depth=3)
    assert any(not main for main, _ in built), "no side batch ran on the helper thread"
    assert all(dtype == np.float64 for _, dtype in built)
    for w, result in zip(weights, batch):
        alone = qbnb_jax.solve(X, y, task="regression", depth=3, sample_weight=w)
        assert result.objective == alone.objective
        assert repr(result.tree) == repr(alone.tree)


def test_run_all_inside_its_own_task_runs_in_order():
    """`run_all` called from one of its pool's tasks runs its items on that thread: with
    every pool thread waiting on tasks queued behind it, it would never return."""
    from qbnb_jax._device import parallel

    done = []
    lock = threading.Lock()

    def outer(i: int) -> None:
        def inner(j: int) -> None:
            with lock:
                done.append((i, j))
        parallel.run_all(inner, range(4))

    runner = threading.Thread(target=parallel.run_all, args=(outer, range(2 * parallel.THREADS)),
                              daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "nested run_all did not return"
    assert sorted(done) == [(i, j) for i in range(2 * parallel.THREADS) for j in range(4)]
