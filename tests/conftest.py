"""Test configuration: float64 in JAX and a persistent compilation cache."""

import os
import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)
_CACHE = pathlib.Path(__file__).resolve().parents[1] / ".jax_cache"
jax.config.update("jax_compilation_cache_dir", os.environ.get("QBNB_JAX_CACHE", str(_CACHE)))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

# make `import helpers` work from the test modules
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
