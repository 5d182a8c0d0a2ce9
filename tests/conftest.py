"""Test configuration: a persistent compilation cache, the `slow` marker, test imports.

**No global 64-bit mode.** JAX's `jax_enable_x64` is not turned on here: the library
must turn it on itself where it needs it (`solve` and `solve_batch` run their kernels
under `jax.enable_x64(True)`), and a global switch in the tests would hide a public
entry point that forgot to. Tests that build device arrays or call the kernels
directly (`SweepData`, `KernelRunner`, `sweep_*`) wrap that in
`with jax.enable_x64(True):` themselves, as the library does.

**Slow tests.** Tests marked `@pytest.mark.slow` (long random sweeps, long runs) are
deselected by default, so that `python -m pytest -q` stays a few minutes on two cores.
To run them:

    QBNB_SLOW=1 python -m pytest -q                  # everything, slow tests included
    python -m pytest -q -m slow                      # the slow tests only
    python -m pytest -q -m "slow or not slow"        # everything

Any `-m` expression selects on its own (the default deselection is then off), and
`QBNB_SLOW=0` (or unset) keeps the default.

**Workers.** The modules run on up to 4 worker processes (pytest-xdist, `addopts` in
pyproject.toml), sharing the compilation cache below; `-n 0` runs them in this
process, and `-o addopts=""` runs them where pytest-xdist is not installed.

The compilation cache lives in `.jax_cache` at the repository root (ignored by git), or
where `QBNB_JAX_CACHE` points.
"""

import os
import pathlib
import sys

import jax
import pytest

_CACHE = pathlib.Path(__file__).resolve().parents[1] / ".jax_cache"
jax.config.update("jax_compilation_cache_dir", os.environ.get("QBNB_JAX_CACHE", str(_CACHE)))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

# make `import helpers` work from the test modules
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def run_slow(config) -> bool:
    """Whether slow tests run: `-m` given, or QBNB_SLOW set to something other than 0."""
    return bool(config.getoption("markexpr", default="")) or os.environ.get(
        "QBNB_SLOW", "0"
    ).strip() not in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Deselect slow tests by default: pytest reports them as deselected, not skipped,
    so the summary's skips are only tests that could not run here."""
    if run_slow(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


@pytest.fixture
def sequential_plan(monkeypatch):
    """The sequential plan (a CPU's) for tests of its kernels and of the paths it
    chooses (`execution_plan`); tests of the parallel plan set that themselves. Then a
    run on an accelerator, whose default plan is the parallel one, checks the kernels
    each test names, and `QBNB_JAX_PLAN=parallel python -m pytest` on a CPU runs
    every other test on the parallel plan."""
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
