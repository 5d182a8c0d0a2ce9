"""The branch-and-bound searches: options, incumbents and statistics (`state`),
frontier records (`frontier`), the shared search (`search`), the depth-2 search
(`depth2`, with `pair_bounds`), depth 3 and deeper (`deep`, `appendix`), batches
(`batch`) and the public `solve` (`solve`). See docs/design.md."""
