import sys

from qbnb_jax.bench.solve import main

sys.exit(main())
