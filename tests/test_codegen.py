"""The kernel and brute-force tests under XLA's default CPU codegen, the code users run.

The suite compiles with XLA's older CPU emitters where it can (conftest.py, "Codegen"):
they compile faster and give the same results, since nothing in the kernels depends
on how XLA groups a reduction (docs/design.md, "Exact on every backend"). This test
checks that claim for the default emitters: the kernels against their numpy
references and the solver against the brute force, in a fresh process that keeps
XLA's default flags.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
MODULES = ["test_kernel_order.py", "test_plans.py", "test_properties.py", "test_solve.py"]


@pytest.mark.slow
def test_kernels_and_brute_force_under_the_default_codegen():
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                     if "xla_cpu_use_fusion_emitters" not in f)
    env = dict(os.environ, QBNB_TEST_CODEGEN="default", XLA_FLAGS=flags, QBNB_SLOW="0")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *(str(TESTS / m) for m in MODULES)],
        env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout[-2000:]
