"""Benchmarks: `python -m qbnb_jax.bench` times `solve` on the paper's datasets
(`solve`, loading them with `datasets`, checking regression with the numpy brute force
of `bruteforce`); `python -m qbnb_jax.bench_batch` times many problems at once."""
