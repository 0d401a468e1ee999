"""Reference implementation of group-relative policy optimisation with token-level credit
assignment. See README.md; the algorithms live one per file in ``refimpl/algorithms``."""

__version__ = "0.1.0"
