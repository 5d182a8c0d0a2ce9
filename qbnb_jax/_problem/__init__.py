"""Host-side problem data: validation and presorted arrays (`data`), the fitted tree
(`tree`), and numpy stump searches and tree building (`host`). See docs/design.md,
"Problem and data layout"."""
