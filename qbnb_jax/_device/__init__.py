"""Device code: the sweep kernels (`kernels`), the host side that pads, compiles and
calls them (`runner`), its threads (`parallel`), compilation cache (`cache`) and
memory settings (`memory`). See docs/design.md, "Kernels" and "Execution plans"."""
