"""How a flag is spelled, the rules of one flag's bounds, and the limits an RL run's flags and
its warm start's share.

A setting is refused at start-up with one line naming its flag, ``flag("schedule_steps",
"--warmstart.")`` → ``--warmstart.schedule-steps``: ``--`` for a command's own flags, the
prefix of the nested settings inside another (``--warmstart.`` in ``refimpl train``).

A settings type states each flag's own bounds once, as a table of ``(field, rule)`` pairs
(``Bounds``: ``TrainConfig``'s ``TRAIN_BOUNDS``, the warm start's, the model's), which its
check walks in order, ``rule(value, flag(field))``; the bounds that tie one flag to another
(``--minibatches`` divides ``--prompts-per-step``) follow as that check's own lines. A rule
raises ``ValueError`` naming the flag it is given.

Last, the checks of a command's flags as they were typed, which a parsed value no longer
shows: an empty path (``--runs-dir ""`` is ``.``) and an empty item of a comma-separated list
(``--rollouts 2,,4``); the command line (``refimpl.cli``) runs them for every command.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from refimpl.problem_streams import SEED_MAX

#: The largest learning rate: torch's Adam (and AdamW) takes a first step of
#: ``lr / (1 − β₁)`` = 10·lr, which must fit in float32 (a larger one is an overflow
#: traceback, not a diverged run).
LR_LIMIT = float(torch.finfo(torch.float32).max) * (1 - 0.9)


#: One flag's rule: ``rule(value, flag)`` raises ``ValueError`` naming ``flag`` unless
#: ``value`` is within the flag's bounds.
Rule = Callable[[Any, str], None]
#: A settings type's table of its flags' own bounds: ``(field, rule)`` pairs, checked in order.
Bounds = tuple[tuple[str, Rule], ...]


def at_least(low: int, note: str = "") -> Rule:
    """The rule: an integer ≥ ``low`` (``note``: why, or what ``low`` means, in the error)."""

    def rule(value: object, flag: str) -> None:
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
            raise ValueError(f"{flag}: expected an integer ≥ {low}{note}, got {value}")

    return rule


def one_of(choices: Sequence[str]) -> Rule:
    """The rule: one of ``choices``."""

    def rule(value: object, flag: str) -> None:
        if value not in choices:
            raise ValueError(f"{flag}: expected one of {', '.join(choices)}, got {value!r}")

    return rule


def optional(rule: Rule) -> Rule:
    """``rule``, except that None passes (a flag whose None means off, or a default)."""

    def optional_rule(value: object, flag: str) -> None:
        if value is not None:
            rule(value, flag)

    return optional_rule


def check_positive(value: object, flag: str) -> None:
    """``ValueError`` naming ``flag`` unless ``value`` is a positive integer."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"{flag}: expected a positive integer, got {value}")


def check_lr(lr: float, flag: str, optimizer: str = "Adam") -> None:
    """``ValueError`` naming ``flag`` unless ``lr`` is a positive learning rate whose first
    step (``optimizer``'s, ``lr/(1−β₁)``) fits in float32."""
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"{flag}: expected a positive learning rate, got {lr}")
    if lr > LR_LIMIT:
        raise ValueError(
            f"{flag}: expected a learning rate ≤ {LR_LIMIT:.3g} ({optimizer}'s first step, "
            f"lr/(1−β₁), must fit in float32), got {lr}"
        )


def comma_items(text: str, flag: str) -> list[str]:
    """The items of a comma-separated ``text``, stripped; ``ValueError`` naming ``flag`` when
    one is empty (``2,,4``, ``2,4,``: a typo, not a choice). An empty ``text`` is no items."""
    if not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ValueError(
            f"{flag}: {text!r} has an empty item (two commas, or one at an end); expected "
            "values separated by single commas"
        )
    return items


def parse_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """The integers of a comma-separated ``text`` (``comma_items``: no empty item);
    ``ValueError`` naming ``flag`` when one is not an integer. The callers check the range
    and repeats."""
    items = comma_items(text, flag)
    try:
        return [int(s) for s in items]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def check_seed(seed: int, flag: str) -> None:
    """``ValueError`` naming ``flag`` unless ``seed`` is in ``[0, SEED_MAX]``."""
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(
            f"{flag}: expected an integer in [0, {SEED_MAX}] (its stream key is one 32-bit "
            f"word: refimpl.problem_streams), got {seed}"
        )


def check_threads(threads: int | None, flag: str) -> None:
    """``ValueError`` naming ``flag`` unless ``threads`` is None (torch's default) or a
    positive integer, at most the CPU count: torch segfaults on 100000 threads, and more
    threads than cores only slow a run down."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"{flag}: expected a positive integer (or None), got {threads}")
    cores = os.cpu_count() or 1
    if threads > cores:
        raise ValueError(
            f"{flag}: expected at most {cores} (the CPU cores of this machine), got {threads}"
        )


# ---------------------------------------------------------------------------------------------
# A command's flags as typed: checks of the raw text that a parsed value no longer shows.
# ---------------------------------------------------------------------------------------------


def path_flags(cls: type, prefix: str = "--") -> set[str]:
    """The flags of the command ``cls`` (a dataclass; nested ones with their dotted prefix,
    ``--warmstart.runs-dir``) that take a path."""
    return _flags_where(cls, lambda hint, _doc: hint is Path or Path in typing.get_args(hint))


def comma_list_flags(cls: type) -> set[str]:
    """The flags of the command ``cls`` that take a comma-separated list (a string whose help
    text says so: ``--rollouts``, ``--algos``, ``--seeds``, ...)."""
    return _flags_where(cls, lambda hint, doc: hint is str and doc.startswith("comma-separated"))


def _flags_where(cls: type, wanted, prefix: str = "--") -> set[str]:
    """The flags of ``cls`` (nested dataclasses with their dotted prefix) whose field's type
    hint and help text satisfy ``wanted(hint, doc)``."""
    from tyro import _docstrings

    flags: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint, flag = hints[f.name], prefix + f.name.replace("_", "-")
        if dataclasses.is_dataclass(hint):
            flags |= _flags_where(hint, wanted, flag + ".")
        elif wanted(hint, _docstrings.get_field_docstring(cls, f.name, ()) or ""):
            flags.add(flag)
    return flags


def _typed_values(args: list[str], flags: set[str]) -> list[tuple[str, str | None]]:
    """``(flag, value)`` of each of ``flags`` typed in ``args`` (``--flag value`` or
    ``--flag=value``; dashes or underscores)."""
    typed = []
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        flag = flag.replace("_", "-")
        if flag in flags:
            typed.append((flag, value if eq else (args[i + 1] if i + 1 < len(args) else None)))
    return typed


def check_empty_paths(cls: type, args: list[str]) -> None:
    """``ValueError`` naming the flag when a path flag of ``cls`` is given an empty string:
    ``Path("")`` is ``.``, so ``--runs-dir ""`` would put the run in the current directory."""
    for flag, given in _typed_values(args, path_flags(cls)):
        if given == "":
            raise ValueError(f"{flag}: expected a path, got an empty string (. is this directory)")


def check_comma_lists(cls: type, args: list[str]) -> None:
    """``ValueError`` naming the flag when a comma-separated flag of ``cls`` holds an empty
    item: ``--rollouts 2,,4`` was read as K = 2, 4, a typo taken for a choice (each command
    checks the items themselves)."""
    for flag, given in _typed_values(args, comma_list_flags(cls)):
        comma_items(given or "", flag)
