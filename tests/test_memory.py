"""The batch's malloc tuning: applied once, and not at all when switched off."""

import numpy as np

from qbnb_jax._device import memory as _memory


class _FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


def _fresh(monkeypatch, env=None):
    libc = _FakeLibc()
    monkeypatch.setattr(_memory, "_tuned", False)
    monkeypatch.setattr(_memory.sys, "platform", "linux")
    monkeypatch.setattr(_memory.ctypes, "CDLL", lambda name: libc)
    if env is None:
        monkeypatch.delenv("QBNB_JAX_TUNE_MALLOC", raising=False)
    else:
        monkeypatch.setenv("QBNB_JAX_TUNE_MALLOC", env)
    return libc


def test_tune_malloc_sets_both_thresholds_once(monkeypatch):
    libc = _fresh(monkeypatch)
    _memory.tune_malloc()
    _memory.tune_malloc()
    assert sorted(libc.calls) == sorted([(-3, _memory.MMAP_THRESHOLD),
                                         (-1, _memory.TRIM_THRESHOLD)])


def test_tune_malloc_can_be_switched_off(monkeypatch):
    libc = _fresh(monkeypatch, env="0")
    _memory.tune_malloc()
    assert libc.calls == []


def test_solve_batch_tunes_malloc(monkeypatch):
    import qbnb_jax

    libc = _fresh(monkeypatch)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 2)), rng.integers(0, 2, 12)
    qbnb_jax.solve_batch(X, y, np.ones((2, 12)), task="classification")
    assert len(libc.calls) == 2


# -- the memory ceiling ---------------------------------------------------------------
def test_ceiling_refuses_before_building_tables(monkeypatch):
    import pytest

    import qbnb_jax

    monkeypatch.setenv("QBNB_JAX_MEMORY", "1M")
    X = np.random.default_rng(0).random((5000, 30))
    with pytest.raises(_memory.MemoryCeilingError, match="QBNB_JAX_MEMORY") as caught:
        qbnb_jax.solve(X, np.arange(5000) % 2, task="classification")
    assert "sweep tables" in str(caught.value)
    monkeypatch.setenv("QBNB_JAX_MEMORY", "1G")  # the same problem fits under a larger one
    assert qbnb_jax.solve(X, np.arange(5000) % 2, task="classification").status == "optimal"


def test_ceiling_refuses_many_classes_before_host_work(monkeypatch):
    """Tables grow with the classes: a refused problem is refused before the host
    builds its first trees (whose class counts grow the same way), naming the classes."""
    import importlib

    import pytest

    import qbnb_jax

    def no_host_trees(*args):
        raise AssertionError("host work ran before the ceiling's check")

    solve_module = importlib.import_module("qbnb_jax._search.solve")
    monkeypatch.setattr(solve_module, "cart_splits", no_host_trees)
    monkeypatch.setenv("QBNB_JAX_MEMORY", "64M")
    rng = np.random.default_rng(0)
    X, y = rng.random((2000, 20)), rng.integers(0, 500, 2000)
    for depth in (2, 3):
        with pytest.raises(_memory.MemoryCeilingError, match=r"p = 20, \d+ classes\)"):
            qbnb_jax.solve(X, y, task="classification", depth=depth, time_limit=60)


def test_ceiling_values(monkeypatch):
    import pytest

    monkeypatch.setenv("QBNB_JAX_MEMORY", "512M")
    assert _memory.memory_ceiling() == 512 << 20
    monkeypatch.setenv("QBNB_JAX_MEMORY", "2g")
    assert _memory.memory_ceiling() == 2 << 30
    for bad in ("lots", "-1G", "0"):
        monkeypatch.setenv("QBNB_JAX_MEMORY", bad)
        with pytest.raises(ValueError, match="QBNB_JAX_MEMORY"):
            _memory.memory_ceiling()
    monkeypatch.delenv("QBNB_JAX_MEMORY")
    assert _memory.memory_ceiling() is None or _memory.memory_ceiling() > 0


def test_device_tables_grow_as_p_n_not_p_squared_n():
    """No table per (root feature, feature) pair: the bytes stay under the bound
    `table_bytes` states, which is linear in p."""
    import jax

    from qbnb_jax._device.kernels import SweepData, table_bytes
    from qbnb_jax._problem.data import make_problem

    rng = np.random.default_rng(1)
    n, p = 300, 60
    problem = make_problem(rng.random((n, p)), rng.integers(0, 2, n), task="classification")
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
    held = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(data))
    assert held <= table_bytes(1, 1, p, data.length, problem.n_channels)
    assert held < p * p * n * 4  # what one int32 (p, p, n) table alone would take
