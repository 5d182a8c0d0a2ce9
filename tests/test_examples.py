"""The scripts in `examples/` run end to end as plain scripts, in a fresh process.

Each runs with a temporary working directory (so nothing lands in the repository),
shares the test session's JAX compilation cache, and is checked for exit code 0 and
its key output lines. `bound_variants.py` runs on a small problem (`--n 400`) and must
write its PNG.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jax

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, tmp_path: Path, *args: str, env_extra=None, timeout=300) -> str:
    env = dict(os.environ, **(env_extra or {}))
    env["MPLBACKEND"] = "Agg"
    env.setdefault("JAX_PLATFORMS", "cpu")
    # reuse the compiled kernels of this test session (conftest sets the directory)
    cache = jax.config.jax_compilation_cache_dir
    if cache:
        env.setdefault("QBNB_JAX_CACHE_DIR", str(cache))
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"{name} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
        f"--- stderr\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def test_quickstart(tmp_path):
    out = run_example("quickstart.py", tmp_path)
    cart = float(re.search(r"CART +training accuracy: ([0-9.]+)", out).group(1))
    optimal = float(re.search(r"optimal training accuracy: ([0-9.]+)", out).group(1))
    assert optimal >= cart
    assert "status: optimal" in out
    assert "gap: 0" in out
    assert "|--- " in out  # the exported tree


def test_bound_variants_small(tmp_path):
    # the sample count from the command line, the output path from the environment
    out = run_example("bound_variants.py", tmp_path, "--n", "400",
                      env_extra={"QBNB_BV_OUT": "bv.png"})
    assert "n=400, p=10" in out
    for bound in ("w0", "w1", "w2", "l2"):  # one table row per bound, each optimal
        assert re.search(rf"^{bound} +\d+ +\d+ +optimal +\d+", out, re.M), bound
    assert "all four bounds reach the same optimal objective" in out
    for switch in ("on", "off"):  # six classes with the leaf-count bound and without
        assert re.search(rf"^{switch} +\d+ +optimal +\d+", out, re.M), switch
    assert "same optimum either way" in out
    png = tmp_path / "bv.png"
    assert png.is_file() and png.stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {png.resolve()}" in out


def test_multioutput_regression(tmp_path):
    out = run_example("multioutput_regression.py", tmp_path)
    assert out.count("status: optimal") == 2
    for cart, optimal in re.findall(
        r"CART +training SSE: ([0-9.e+-]+)\noptimal training SSE: ([0-9.e+-]+)", out
    ):
        assert float(optimal) <= float(cart) * (1 + 1e-9)
    assert "== Linnerud: n=20, p=3, targets=3" in out
    assert "== synthetic: n=1000, p=6, targets=2" in out
    assert "value: [" in out  # multi-output leaves in export_text


def test_large_n_small_run(tmp_path):
    for task in ("classification", "regression"):
        out = run_example("large_n.py", tmp_path, "--n", "3000", "--p", "4", "--task", task,
                          "--quiet")
        assert "status:      optimal" in out
        assert "optimum <= it: True" in out  # planted tree and CART both bound it
        assert "lower bound <= objective: True" in out


def test_tune_pruning_small(tmp_path):
    out = run_example("tune_pruning.py", tmp_path, "--depths", "2", "--folds", "2")
    assert "tuned optimal tree: {'ccp_alpha'" in out
    assert "'min_samples_leaf'" in out
    for name in ("CART (tuned)", "optimal, unpenalised", "optimal (tuned)"):
        assert re.search(rf"^{re.escape(name)} +\d+ +[0-9.]+ +[0-9.]+$", out, re.M), name
