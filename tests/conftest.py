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

**Codegen.** A cold run of the suite is mostly compiling: hundreds of small shapes,
each compiled once. XLA's older CPU emitters (`--xla_cpu_use_fusion_emitters=false`)
compile them in about half the time and run them slower (2-4x on the benchmarks, which
is why the library leaves XLA's default alone); on two cores that took a cold suite
from about 700 to about 420 s. So the suite compiles with them where the installed XLA
still knows the flag (`_fast_compile_flags`, probed once in a subprocess: XLA aborts on
an unknown flag). `QBNB_TEST_CODEGEN=default` keeps XLA's default, the code users run;
the slow test `test_codegen.py` runs the kernel and brute-force tests that way.
"""

import os
import pathlib
import subprocess
import sys

FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _fast_compile_flags() -> None:
    """Add FAST_COMPILE_FLAG to XLA_FLAGS (before JAX starts its backend) unless told
    not to or XLA rejects it. Worker processes inherit the result."""
    flags = os.environ.get("XLA_FLAGS", "")
    if (os.environ.get("QBNB_TEST_CODEGEN", "").strip() == "default"
            or "xla_cpu_use_fusion_emitters" in flags):
        return
    trial = f"{flags} {FAST_COMPILE_FLAG}".strip()
    probe = ("import jax, jax.numpy as jnp; "
             "jax.jit(lambda x: x + 1)(jnp.ones(3)).block_until_ready()")
    env = dict(os.environ, XLA_FLAGS=trial, JAX_PLATFORMS="cpu")
    try:
        ok = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                            timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if ok:
        os.environ["XLA_FLAGS"] = trial


_fast_compile_flags()

import jax  # noqa: E402  (after XLA_FLAGS is settled)
import pytest  # noqa: E402

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
