"""`python -m qbnb_jax ...` runs the `qbnb` command line."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
