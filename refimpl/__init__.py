"""Reference implementation of group-relative policy optimisation with token-level credit
assignment. See README.md; the algorithms live one per file in ``refimpl/algorithms``."""

# Before any refimpl module imports torch: put CPU kernels on one numeric path, so that the
# CPU's instruction-set level does not change a run's digits (refimpl/runs/cpu_kernels.py says what it
# does and does not make reproducible, and how to opt out). torch reads the choice once, when it loads, so this must run first.
from refimpl.runs import cpu_kernels as _cpu_kernels

_cpu_kernels.pin()

__version__ = "0.1.0"
