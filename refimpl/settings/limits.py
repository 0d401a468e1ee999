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
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from refimpl.problem_streams import SEED_MAX

#: The largest learning rate: torch's Adam (and AdamW) takes a first step of
#: ``lr / (1 − β₁)`` = 10·lr, which must fit in float32 (a larger one is an overflow
#: traceback, not a diverged run).
LR_LIMIT = float(torch.finfo(torch.float32).max) * (1 - 0.9)


def flag(name: str, prefix: str = "--") -> str:
    """The flag of the setting ``name`` (a field, or a dotted path of fields)."""
    return prefix + name.replace("_", "-")


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
