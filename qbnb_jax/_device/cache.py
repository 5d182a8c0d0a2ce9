"""JAX's persistent compilation cache, on by default so a fresh process compiles nothing new.

The solver's kernels take seconds to compile and milliseconds to run, so caching the
compiled executables on disk is what makes a cold start fast. The cache goes to
`$QBNB_JAX_CACHE_DIR`, else `$XDG_CACHE_HOME/qbnb_jax` (`~/.cache/qbnb_jax`). Set
`QBNB_JAX_CACHE_DIR=0` to leave JAX's configuration alone. A cache directory the user
already configured for JAX is respected.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

_DONE = False


def enable_persistent_cache() -> None:
    """Point JAX's compilation cache at our directory (once, before the first compile)."""
    global _DONE
    if _DONE:
        return
    _DONE = True
    choice = os.environ.get("QBNB_JAX_CACHE_DIR", "")
    if choice == "0" or jax.config.jax_compilation_cache_dir:
        return
    if choice:
        path = Path(choice)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path = Path(base) / "qbnb_jax"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # read-only home: run without a disk cache
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
