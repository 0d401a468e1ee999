"""The one check of a value against its type annotation.

A run's settings read from config.json or the command line (``record``, ``overrides``) and an
algorithm's ``Config`` fields (``refimpl.contract.check_config``) are checked here: a bool is
``True`` or ``False`` (never 1, never ``"no"``, which is truthy), an int is not a bool, a
number is finite and an int fits int64. Nothing of ours is imported: it is the bottom layer,
below the contract (the layer table of ``docs/design.md``).
"""

from __future__ import annotations

import math
import numbers
import os
import types
import typing
from collections.abc import Container
from pathlib import Path
from typing import Literal


def type_options(hint: object) -> tuple[tuple[object, ...], bool]:
    """The types the annotation ``hint`` allows besides None, and whether it allows None:
    ``float | None`` → ``((float,), True)``, ``Literal["a", "b"]`` → one option."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(a for a in args if a is not type(None)), type(None) in args
    return (hint,), False


def _fits(value: object, kind: object) -> bool:
    origin = typing.get_origin(kind)
    if origin is Literal:  # its choices are checked where the setting is (naming them)
        return isinstance(value, str)
    if origin is tuple:  # tuple[str, ...]: a list of strings in JSON
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # a bool is an int to Python, never to a setting
        return False
    if kind is int:
        return isinstance(value, numbers.Integral)
    if kind is float:
        return isinstance(value, numbers.Real)
    if kind is str:
        return isinstance(value, str)
    if kind is Path:
        return isinstance(value, (str, os.PathLike))
    return True  # a type this check does not know: left to the setting's own check


def fits_type(value: object, hint: object) -> bool:
    """Whether ``value`` fits the annotation ``hint``: a bool for ``bool`` (never 1 or
    ``"no"``, which is truthy), an int that is not a bool for ``int``, a number that is not a
    bool for ``float``, a string for ``str``, a ``Literal`` (its choices are the setting's own
    check) and ``Path``, a list or tuple of strings for ``tuple[str, ...]``; None where the
    annotation allows it. A type it does not know fits."""
    options, optional = type_options(hint)
    if value is None and optional:
        return True
    return any(_fits(value, kind) for kind in options)


_TYPE_NAMES = {bool: "a bool (True or False)", int: "an int", float: "a float", str: "a string"}
_JSON_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def expected_type(hint: object, *, json: bool = False) -> str:
    """What ``fits_type`` expects of ``hint``, as an error says it: in Python's words (``a
    float``), or with ``json`` in JSON's (``a number or null``)."""
    options, optional = type_options(hint)
    if not json:
        return _TYPE_NAMES.get(options[0], "a string")  # type: ignore[call-overload]
    names = [
        "a list of strings"
        if typing.get_origin(o) is tuple
        else _JSON_TYPE_NAMES.get(o, "a string")  # type: ignore[call-overload]
        for o in options
    ]
    return " or ".join(names) + (" or null" if optional else "")


def _shown(value: object) -> str:
    """``repr(value)``, except for an int too long to read (``2**1100`` has 332 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"{'-' if value < 0 else ''}an int of {value.bit_length()} bits"
    return repr(value)


def _is_number(value: object, kind: object) -> bool:
    """A Config's numbers fit a tensor operation: an int an int64, a float finite (an int
    given for a float field one that a float holds: it is stored as that float)."""
    if kind is int:
        return -(2**63) <= value < 2**63  # type: ignore[operator]
    if kind is float:
        try:
            return math.isfinite(float(value))  # type: ignore[arg-type]
        except OverflowError:  # an int that no float holds (2**1100)
            return False
    return True


def check_value(
    value: object, hint: object, argument: str, within: Container[object] | None = None
) -> object:
    """``value`` if it fits the annotation ``hint`` (and lies ``within`` a range, any container
    whose ``str`` states it), an int given for a float as that float (``eps=1`` is
    ``eps=1.0``: a Python int beyond int64 would overflow in the first tensor operation); else
    ``ValueError("<argument>: expected ...")``. ``None`` fits where ``hint`` allows it; an
    annotation other than a bool, int, float or string (optional or not) is the caller's to
    check, save for its range."""
    options, optional = type_options(hint)
    if value is None and optional:
        return value
    kind = options[0] if len(options) == 1 and options[0] in _TYPE_NAMES else None
    if kind is not None:
        got = f"got {_shown(value)}"
        if isinstance(value, bool) and kind is not bool:
            got += " (a bool)"
        elif kind is float and isinstance(value, numbers.Real):
            got += " (finite values only)"
        elif kind is int and isinstance(value, numbers.Integral):
            got += " (an int64 only)"
        if not (fits_type(value, kind) and _is_number(value, kind)):
            raise ValueError(f"{argument}: expected {expected_type(kind)}, {got}")
        if kind is float and not isinstance(value, float):
            value = float(value)  # type: ignore[arg-type]
    if within is not None:
        ok = fits_type(value, float) and _is_number(value, float) and value in within
        if not ok:
            raise ValueError(f"{argument}: expected {within}, got {_shown(value)}")
    return value
