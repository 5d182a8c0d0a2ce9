"""The batch's malloc tuning: applied once, and not at all when switched off."""

import numpy as np

from qbnb_jax import _memory


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
