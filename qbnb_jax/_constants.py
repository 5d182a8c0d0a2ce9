"""What the solver supports, in one place (standard library only: the command line
reads it without importing the solver)."""

BOUNDS = ("w0", "w1", "w2", "l2")  # docs/design.md, "Bounds and why they are valid"
SUPPORTED_DEPTHS = tuple(range(1, 9))
